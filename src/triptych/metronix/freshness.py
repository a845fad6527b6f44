"""The freshness checks that run on every memory write, without any LLM.

For a new (or changed) record and its most similar active neighbours:

- **contradiction**: the two say the same thing about the same subject except for one short value:
  a changed number or date, a negation added or removed, a replaced word or name ("prefers dark mode"
  vs "prefers light mode"). Found by aligning the two token sequences.
- **duplicate**: embedding similarity at or above the reconciler threshold, confirmed lexically
  (content-word Jaccard at least 0.5).
- **decision confidence**: how sure the write can be treated as a distinct new memory. Two signals say
  "same fact": semantic ``p_sem = clip((s - 0.5) / (t - 0.5))`` and lexical ``p_lex = clip(j / 0.5)``
  (s: cosine, t: reconciler threshold, j: Jaccard). When exactly one of them is saturated the signals
  disagree and the confidence is ``1 - min(p_sem, p_lex)``; otherwise it is ``1 - max(p_sem, p_lex) / 2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from triptych.core.search import STOPWORDS

NEGATIONS = frozenset(
    {"not", "no", "never", "nothing", "none", "nobody", "cannot", "without", "neither", "nor"}
)
# Auxiliaries shift between "likes" and "does not like"; they carry no value of their own.
_AUXILIARIES = frozenset(
    {"do", "does", "did", "is", "am", "are", "was", "were", "be", "been", "will", "would", "a", "an", "the"}
)
_TOKEN = re.compile(r"[a-z0-9]+(?:[.:/-][a-z0-9]+)*")
_NUMBER = re.compile(r"^\d[\d.:/,-]*[a-z]{0,2}$")  # 42, 3.5, 2026-04-17, 10:30, 3pm, 4th


@dataclass(frozen=True, slots=True)
class Contradiction:
    kind: str  # "negation" | "value" | "number"
    before: str
    after: str
    confidence: float


def _tokens(text: str) -> list[str]:
    lowered = text.lower().replace("\u2019", "'")
    # "can't" and "cannot" keep their modal: "can attend" vs "can not attend" is a negation.
    lowered = re.sub(r"\bcan(?:'t|not)\b", "can not", lowered)
    lowered = lowered.replace("won't", "will not").replace("n't", " not")
    return _TOKEN.findall(lowered)


def _stem(token: str) -> str:
    # Enough to align "likes" with "like" and "prefers" with "prefer"; not a general stemmer.
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and token[-3] in "sxz":
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def content_words(text: str) -> set[str]:
    return {_stem(t) for t in _tokens(text) if t not in STOPWORDS or t in NEGATIONS}


def jaccard(a: str, b: str) -> float:
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def detect_contradiction(old: str, new: str) -> Contradiction | None:
    """A contradiction between two statements, or None. Conservative: one short differing value."""
    a = [_stem(t) for t in _tokens(old) if t not in _AUXILIARIES]
    b = [_stem(t) for t in _tokens(new) if t not in _AUXILIARIES]
    neg_a = sum(t in NEGATIONS for t in a)
    neg_b = sum(t in NEGATIONS for t in b)
    core_a = [t for t in a if t not in NEGATIONS]
    core_b = [t for t in b if t not in NEGATIONS]
    if not core_a or not core_b:
        return None
    if core_a == core_b:
        if (neg_a % 2) != (neg_b % 2) and len(core_a) >= 2:
            return Contradiction("negation", " ".join(a), " ".join(b), 0.9)
        return None
    matcher = SequenceMatcher(a=core_a, b=core_b, autojunk=False)
    shared = sum(block.size for block in matcher.get_matching_blocks())
    if shared < 2 or shared / max(len(core_a), len(core_b)) < 0.6:
        return None  # not the same subject and attribute
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(changes) != 1 or changes[0][0] != "replace":
        return None  # additions or several edits: a refinement, not a contradiction
    _, i1, i2, j1, j2 = changes[0]
    if i1 == 0 and j1 == 0:
        return None  # the subject changed ("Alice likes coffee" / "Bob likes coffee"): two facts, no conflict
    removed, added = core_a[i1:i2], core_b[j1:j2]
    if len(removed) > 3 or len(added) > 3:
        return None
    if all(t in STOPWORDS for t in removed + added):
        return None
    if (neg_a % 2) != (neg_b % 2):
        return None  # negated and changed at once: too ambiguous to call
    if any(_NUMBER.match(t) for t in removed + added):
        return Contradiction("number", " ".join(removed), " ".join(added), 0.9)
    return Contradiction("value", " ".join(removed), " ".join(added), 0.75)


def decision_confidence(similarity: float, lexical: float, threshold: float) -> float:
    p_sem = min(1.0, max(0.0, (similarity - 0.5) / max(threshold - 0.5, 1e-6)))
    p_lex = min(1.0, max(0.0, lexical / 0.5))
    if (p_sem >= 1.0) != (p_lex >= 1.0):
        return 1.0 - min(p_sem, p_lex)
    return 1.0 - max(p_sem, p_lex) / 2.0
