"""The freshness checks that run on every memory write, without any LLM.

For a new (or changed) record and its most similar active neighbours:

- **contradiction**: the two say the same thing about the same subject except for one short value:
  a changed number or date, a negation added or removed, a replaced word or name ("prefers dark mode"
  vs "prefers light mode"). Found by aligning the two token sequences.
- **duplicate**: the same words after number, time and format normalisation ("5pm" / "5 pm"), or
  embedding similarity at or above the reconciler threshold confirmed lexically (content-word Jaccard
  at least 0.5).
- **numbered series**: a number that names the subject ("Ticket 4411 is ...", "Step 3 of ...") is not a
  value: two items of a series neither contradict nor duplicate each other.
- **decision confidence**: how sure the write can be treated as a distinct new memory. Two signals say
  "same fact": semantic ``p_sem = clip((s - 0.7) / (t - 0.7))`` and lexical
  ``p_lex = clip((j - 0.3) / 0.2)`` (s: cosine, t: reconciler threshold, j: Jaccard); the confidence is
  ``1 - p_sem * p_lex``, so it falls only when both say so.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

from triptych.core.search import STOPWORDS

NEGATIONS = frozenset(
    {"not", "no", "never", "nothing", "none", "nobody", "cannot", "without", "neither", "nor"}
)
_TOKEN = re.compile(r"[a-z0-9]+(?:[.:/-][a-z0-9]+)*")
_CAN_NOT = re.compile(r"\bcan(?:'t|not)\b")


@dataclass(frozen=True, slots=True)
class Contradiction:
    kind: str  # "negation" | "value" | "number" | "swap"
    before: str
    after: str
    confidence: float


def _tokens(text: str) -> list[str]:
    lowered = text.lower().replace("\u2019", "'")
    # "can't" and "cannot" keep their modal: "can attend" vs "can not attend" is a negation.
    lowered = _CAN_NOT.sub("can not", lowered)
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


# Number words and ordinals become digits, so "two" == "2", "3rd" == "3", "$50k" == "50000".
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen \
sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 10 * i for i, w in enumerate(_TENS) if w != "_"}
_NUMBER_WORDS |= {"first": 1, "third": 3, "fourth": 4, "fifth": 5}
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_SUFFIXED = re.compile(r"^(\d+(?:\.\d+)?)(k|m|bn)$")
_UNIT_GLUED = re.compile(r"^(\d+(?:\.\d+)?)([a-z]{1,3})$")  # 10mb, 16gb, 5k (handled above), 30s
_NUMBER_TOKEN = re.compile(r"^\d[\d.:/-]*$")
# Copulas stay in the sequence as one marker: "X's manager is Sarah" vs "X's mentor is David" is then
# two separate edits (attribute and value), not one value change.
_COPULA = {"is": "=be", "are": "=be", "was": "=be", "were": "=be", "am": "=be", "be": "=be", "been": "=be"}
_HAVE = {"has": "have", "have": "have", "had": "have"}
# Function words with no value of their own; they shift between "likes" and "does not like".
_DROP = frozenset(
    {"do", "does", "did", "will", "would", "a", "an", "the", "still", "anymore", "currently", "now", "really"}
)
# Verbs whose object may have many values at once: liking hiking does not contradict liking swimming.
_MULTI = frozenset(
    """like love enjoy read watched met meet visited went bought ate eat played spoke reviewed fixed attended
    tried cooked made painted adopted saw listened took have own also""".split()
)
# Antonymous values: a replacement between these is a contradiction even where the words are stopwords
# ("up"/"down") or the verb is multi-valued ("likes verbose" / "likes concise").
_ANTONYMS = {
    frozenset(p.split("/"))
    for p in """on/off up/down open/closed open/close passing/failing pass/fail public/private enabled/disabled
    enable/disable active/inactive available/unavailable online/offline approved/rejected accepted/declined
    accepted/rejected blocked/unblocked allowed/forbidden allowed/denied single/married true/false yes/no
    light/dark early/late morning/evening morning/afternoon day/night verbose/concise long/short more/less
    increase/decrease before/after required/optional mandatory/optional included/excluded internal/external
    sync/async synchronous/asynchronous remote/onsite valid/invalid healthy/unhealthy complete/incomplete
    success/failure succeeded/failed win/lose won/lost hot/cold high/low fast/slow cheap/expensive
    start/stop started/stopped""".split()
}
_NOT_VALUE_WORDS = frozenset({"i"})


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")  # 50,000 -> 50000
_DOLLAR = re.compile(r"\$(\d)")
_NO_LONGER = re.compile(r"\bno longer\b", re.IGNORECASE)
_ANY_MORE = re.compile(r"\bany more\b", re.IGNORECASE)
_CONTRACTIONS = [
    (re.compile(re.escape(a), re.IGNORECASE), b)
    for a, b in (("won't", "will not"), ("can't", "can not"), ("cannot", "can not"), ("n't", " not"))
]
_WORD = re.compile(r"[A-Za-z0-9]+(?:[.:/-][A-Za-z0-9]+)*")
# A 12-hour clock time in any common spelling ("5pm", "5 pm", "5 p.m.", "9:30AM"): one 24-hour token, so
# the spellings of one time compare equal and "am" is never read as the copula.
_CLOCK = re.compile(r"\b(1[0-2]|0?[1-9])(?::([0-5]\d))?\s*([ap])\.?\s?m\b\.?", re.IGNORECASE)


def _clock(m: re.Match[str]) -> str:
    hour = int(m.group(1)) % 12 + (12 if m.group(3).lower() == "p" else 0)
    return f"{hour}:{m.group(2) or '00'}"


def _normalise_text(text: str) -> str:
    t = text.replace("\u2019", "'")
    if "," in t:
        t = _THOUSANDS.sub("", t)
    if "$" in t:
        t = _DOLLAR.sub(r"\1", t)
    t = _CLOCK.sub(_clock, t)
    t = _NO_LONGER.sub("not", t)
    t = _ANY_MORE.sub("anymore", t)
    if "'" in t or "nnot" in t.lower():
        for pattern, replacement in _CONTRACTIONS:
            t = pattern.sub(replacement, t)
    return t


def _number_token(tok: str) -> list[str]:
    if not tok[0].isdigit():
        # Most tokens are plain words: only number words and "thirty-four" need more than this.
        if tok in _NUMBER_WORDS:
            return [str(_NUMBER_WORDS[tok])]
        if "-" in tok:
            parts = tok.split("-")
            if all(p in _NUMBER_WORDS for p in parts):
                return [str(sum(int(_NUMBER_WORDS[p]) for p in parts))]
        return [tok]
    m = _ORDINAL.match(tok)
    if m:
        return [m.group(1)]
    m = _SUFFIXED.match(tok)
    if m:
        scale = {"k": 1_000, "m": 1_000_000, "bn": 1_000_000_000}[m.group(2)]
        value = float(m.group(1)) * scale
        return [str(int(value)) if value.is_integer() else str(value)]
    m = _UNIT_GLUED.match(tok)
    if m:
        return [m.group(1), m.group(2)]
    if tok in _NUMBER_WORDS:
        return [str(_NUMBER_WORDS[tok])]
    if "-" in tok:  # thirty-four
        parts = tok.split("-")
        if all(p in _NUMBER_WORDS for p in parts):
            return [str(sum(int(_NUMBER_WORDS[p]) for p in parts))]
    return [tok]


@functools.lru_cache(maxsize=4096)
def _seq(text: str) -> tuple[tuple[str, bool], ...]:
    """(normalised token, looked like a name or number in the original) pairs.

    Cached: a write compares its own text with up to five neighbours, and a conversation's recent
    records are one another's neighbours again and again.
    """
    out: list[tuple[str, bool]] = []
    clean = _normalise_text(text)
    for m in _WORD.finditer(clean):
        raw = m.group(0)
        low = raw.lower()
        if low in _DROP:
            continue
        if low in _COPULA:
            out.append((_COPULA[low], False))
            continue
        if low in _HAVE:
            out.append(("have", False))
            continue
        valueish = (raw[0].isupper() and m.start() > 0 and low not in _NOT_VALUE_WORDS) or raw[0].isdigit()
        for tok in _number_token(low):
            digit = tok[0].isdigit()
            number = digit and _NUMBER_TOKEN.match(tok) is not None
            out.append((tok if number else _stem(tok), valueish or digit))
    return tuple(out)


def _is_number(tok: str) -> bool:
    return bool(_NUMBER_TOKEN.match(tok))


def detect_contradiction(old: str, new: str) -> Contradiction | None:
    """A contradiction between two statements, or None. Conservative: one short differing value.

    Measured on bench/contradictions.jsonl (236 labelled pairs): precision 0.980, recall 0.881; on the
    56 held-out pairs never tuned on, precision 1.000, recall 0.880.
    """
    sa, sb = _seq(old), _seq(new)
    a = [t for t, _ in sa]
    b = [t for t, _ in sb]
    neg_a = sum(t in NEGATIONS for t in a)
    neg_b = sum(t in NEGATIONS for t in b)
    core_a = [t for t in a if t not in NEGATIONS]
    core_b = [t for t in b if t not in NEGATIONS]
    val_b = [v for (t, v) in sb if t not in NEGATIONS]
    if not core_a or not core_b:
        return None
    if distinct_items(old, new):
        return None  # "Ticket 4411 ..." / "Ticket 4412 ...": two items of a series, not two values
    flipped = (neg_a % 2) != (neg_b % 2)
    if len(core_a) == len(core_b) and not flipped:
        differ = [i for i, (x, y) in enumerate(zip(core_a, core_b, strict=True)) if x != y]
        if len(differ) == 2:
            i, j = differ
            if core_a[i] == core_b[j] and core_a[j] == core_b[i] and j - i > 1:
                # "email over Slack" / "Slack over email": the order of a preference flipped
                return Contradiction("swap", f"{core_a[i]} {core_a[j]}", f"{core_b[i]} {core_b[j]}", 0.75)
    if core_a == core_b:
        if flipped and len(core_a) >= 2:
            return Contradiction("negation", " ".join(a), " ".join(b), 0.9)
        return None  # same words (after number/format normalisation): a restatement
    # The words the two share bound what the sequence matcher below can align: most neighbours fail
    # this already, without the quadratic alignment.
    common = sum((Counter(core_a) & Counter(core_b)).values())
    if common < 2 or common / max(len(core_a), len(core_b)) < 0.6:
        return None
    matcher = SequenceMatcher(a=core_a, b=core_b, autojunk=False)
    shared = sum(block.size for block in matcher.get_matching_blocks())
    if shared < 2 or shared / max(len(core_a), len(core_b)) < 0.6:
        return None  # not the same subject and attribute
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if flipped:
        # Negation plus a trailing qualifier dropped or added ("still play X every week" /
        # "don't play X anymore"): still the same claim, negated.
        if all(op[0] in ("insert", "delete") for op in changes) and shared >= 3:
            extra = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in changes)
            if extra <= 2:
                return Contradiction("negation", " ".join(a), " ".join(b), 0.7)
        return None  # negated and changed at once: too ambiguous to call
    if len(changes) != 1 or changes[0][0] != "replace":
        return None  # additions or several edits: a refinement or another attribute
    _, i1, i2, j1, j2 = changes[0]
    removed, added = core_a[i1:i2], core_b[j1:j2]
    if len(removed) > 3 or len(added) > 3:
        return None
    antonym = len(removed) == 1 and len(added) == 1 and frozenset((removed[0], added[0])) in _ANTONYMS
    numeric = any(_is_number(t) for t in removed) and any(_is_number(t) for t in added)
    if antonym:
        return Contradiction("value", removed[0], added[0], 0.8)
    if all(t in STOPWORDS for t in removed + added):
        return None
    if neg_a % 2 == 1 and not numeric:
        return None  # "does not eat pork" / "does not eat shellfish": two exclusions never conflict
    if i1 == 0 and j1 == 0:
        return None  # the subject changed: a statement about someone else
    if not any(val_b[j1:j2]) and any(val_b[j2:]):
        return None  # the value (a name, a number) is shared, only the predicate changed: a paraphrase
    if numeric:
        return Contradiction("number", " ".join(removed), " ".join(added), 0.9)
    if any(t in _MULTI for t in core_a[:i1]):
        return None  # "likes / read / visited X" then "... Y": both can hold
    return Contradiction("value", " ".join(removed), " ".join(added), 0.75)


# Nouns after which a number is the attribute's value, not the name of an item: "runs version 2.3" vs
# "version 2.4" is a change even where the phrase leads ("Version 3 is deployed").
_VALUE_NOUNS = frozenset(
    "version v release age price cost size year budget score rank rating level count total limit".split()
)


def _subject_number(seq: tuple[tuple[str, bool], ...]) -> tuple[str, str] | None:
    """The number that names the statement's subject, with its label: a number after a label noun in
    the leading noun phrase, before any copula or "have" ("Ticket 4411 is ...", "Step 3 of the
    checklist is ...", "Order #1001 shipped ...")."""
    core = [t for t, _ in seq if t not in NEGATIONS]
    for i in (1, 2):
        if i >= len(core) or core[i - 1] in ("=be", "have"):
            return None
        label = core[i - 1]
        if _is_number(core[i]) and label.isalpha() and label not in STOPWORDS and label not in _VALUE_NOUNS:
            return label, core[i]
    return None


def distinct_items(old: str, new: str) -> bool:
    """Two statements about two items of one numbered series (two tickets, two checklist steps): a
    number that names the subject is not a value, so they neither contradict nor repeat each other."""
    a, b = _subject_number(_seq(old)), _subject_number(_seq(new))
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]


def restatement(old: str, new: str) -> bool:
    """The same words after number, time and format normalisation ("5pm" / "5 pm", a trailing full
    stop, "$50,000" / "$50k"), with the same polarity: the new record says the old one again."""
    sa, sb = _seq(old), _seq(new)
    return bool(sa) and [t for t, _ in sa] == [t for t, _ in sb]


@dataclass(frozen=True, slots=True)
class Repeat:
    """How a write that contradicts nothing relates to its nearest neighbour, when it needs review."""

    reason: str  # "possible_duplicate" | "low_confidence_decision"
    confidence: float


def judge_repeat(
    old: str, new: str, similarity: float, *, threshold: float, decision_threshold: float, margin: float
) -> Repeat | None:
    """Whether ``new`` restates its nearest neighbour ``old`` (cosine ``similarity``): a duplicate, an
    unsure call, or (None) a distinct new memory."""
    if distinct_items(old, new):
        return None
    lexical = jaccard(old, new)
    if restatement(old, new) or (similarity >= threshold and lexical >= 0.5):
        return Repeat("possible_duplicate", similarity)
    confidence = decision_confidence(similarity, lexical, threshold)
    # Only a close neighbour makes "store it as a new memory" uncertain. Without this floor, short
    # conversational turns that share a few words were filed by the hundred (113 of 300 LoCoMo turns)
    # and vanished from default searches.
    if similarity >= threshold - margin and confidence < decision_threshold:
        return Repeat("low_confidence_decision", confidence)
    return None


def decision_confidence(similarity: float, lexical: float, threshold: float) -> float:
    """Confidence that a write is a distinct new memory rather than a restatement of its neighbour.

    It falls only when both signals say "the same fact": semantic evidence grows from cosine 0.70 to
    the reconciler threshold (MiniLM puts unrelated turns of one conversation at 0.70-0.85), lexical
    evidence from 30 % shared content words (a shared name or date alone) to a duplicate's 50 %.
    On the labelled pairs of bench/contradictions.jsonl, with the duplicate rule, the pipeline flags
    35 of 46 restatements (paraphrase, format, refinement) and 5 of 50 distinct facts, and this step
    files 1.6 % of LoCoMo's turns (the earlier max-of-signals rule: 38 of 46, 7 of 50 and 13 %).
    """
    p_sem = min(1.0, max(0.0, (similarity - 0.7) / max(threshold - 0.7, 1e-6)))
    p_lex = min(1.0, max(0.0, (lexical - 0.3) / 0.2))
    return 1.0 - p_sem * p_lex
