"""Contradiction-detector benchmark: precision / recall / F1 of the freshness pipeline's
``detect_contradiction`` on a hand-labelled set of agent-memory statement pairs.

The set (``bench/contradictions.jsonl``, one JSON object a line) holds ``{"old", "new", "label", "kind",
"split"}``: ``label`` is ``contradiction`` or ``not_contradiction``; ``kind`` says what differs
(contradictions: preference, number, date, negation, name, state, implicit; hard negatives: paraphrase,
format, refinement, attribute, addition, unrelated); ``split`` is ``dev`` (the pairs the proposed
changes were designed against) or ``heldout`` (written before the detector was first run, and never
used to tune it). The detector is run on (old, new) exactly as ``MemoryService._freshness`` calls it.

Two detectors are scored side by side:
  * ``current``: ``triptych.metronix.freshness.detect_contradiction`` (the code in src/);
  * ``proposed``: ``proposed_detect_contradiction`` below, a drop-in replacement proposed for
    freshness.py (same signature and ``Contradiction`` result), not yet in src/.

With ``--pipeline`` (default on) both texts are also embedded with the server's model and a pair only
counts as flagged if its cosine clears the pipeline's gate (``MemorySettings.contradiction_floor``,
0.5): the pipeline never compares records that are less similar than that.

Run from the repository root:  .venv/bin/python bench/contradictions.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from triptych.core.search import STOPWORDS
from triptych.metronix.freshness import NEGATIONS, Contradiction, detect_contradiction

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "contradictions.jsonl"
DEFAULT_OUT = Path("/tmp/triptych-bench/contradictions.json")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the proposed detector (a drop-in for freshness.detect_contradiction) ------------------------------

# Number words and ordinals become digits, so "two" == "2", "3rd" == "3", "$50k" == "50000".
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen \
sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORDS = {w: i for i, w in enumerate(_UNITS)} | {w: 10 * i for i, w in enumerate(_TENS) if w != "_"}
_NUMBER_WORDS |= {"first": 1, "third": 3, "fourth": 4, "fifth": 5}
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_SUFFIXED = re.compile(r"^(\d+(?:\.\d+)?)(k|m|bn)$")
_UNIT_GLUED = re.compile(r"^(\d+(?:\.\d+)?)([a-z]{1,3})$")  # 10mb, 16gb, 5k (handled above), 30s
_NUMBER = re.compile(r"^\d[\d.:/-]*$")
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


def _normalise_text(text: str) -> str:
    t = text.replace("\u2019", "'")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)  # 50,000 -> 50000
    t = re.sub(r"\$(\d)", r"\1", t)
    t = re.sub(r"\bno longer\b", "not", t, flags=re.IGNORECASE)
    t = re.sub(r"\bany more\b", "anymore", t, flags=re.IGNORECASE)
    for a, b in (("won't", "will not"), ("can't", "can not"), ("cannot", "can not"), ("n't", " not")):
        t = re.sub(re.escape(a), b, t, flags=re.IGNORECASE)
    return t


def _number_token(tok: str) -> list[str]:
    m = _ORDINAL.match(tok)
    if m:
        return [m.group(1)]
    m = _SUFFIXED.match(tok)
    if m:
        scale = {"k": 1_000, "m": 1_000_000, "bn": 1_000_000_000}[m.group(2)]
        value = float(m.group(1)) * scale
        return [str(int(value)) if value.is_integer() else str(value)]
    m = _UNIT_GLUED.match(tok)
    if m and m.group(2) not in ("am", "pm"):
        return [m.group(1), m.group(2)]
    if tok in _NUMBER_WORDS:
        return [str(_NUMBER_WORDS[tok])]
    if "-" in tok:  # thirty-four
        parts = tok.split("-")
        if all(p in _NUMBER_WORDS for p in parts):
            return [str(sum(int(_NUMBER_WORDS[p]) for p in parts))]
    return [tok]


def _stem(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("es") and token[-3] in "sxz":
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _seq(text: str) -> list[tuple[str, bool]]:
    """(normalised token, looked like a name or number in the original) pairs."""
    out: list[tuple[str, bool]] = []
    clean = _normalise_text(text)
    for m in re.finditer(r"[A-Za-z0-9]+(?:[.:/-][A-Za-z0-9]+)*", clean):
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
            out.append((_stem(tok) if not _NUMBER.match(tok) else tok, valueish or tok[0].isdigit()))
    # am/pm: "2 pm" -> "14:00", "9:30 am" -> "9:30"
    fixed: list[tuple[str, bool]] = []
    for tok, val in out:
        if tok in ("am", "pm") and fixed and _NUMBER.match(fixed[-1][0]):
            prev = fixed[-1][0]
            hour, _, minute = prev.partition(":")
            if hour.isdigit():
                h = int(hour) % 12 + (12 if tok == "pm" else 0)
                fixed[-1] = (f"{h}:{minute or '00'}", True)
                continue
        fixed.append((tok, val))
    return fixed


def _is_number(tok: str) -> bool:
    return bool(_NUMBER.match(tok))


def proposed_detect_contradiction(old: str, new: str) -> Contradiction | None:
    """Same contract as ``freshness.detect_contradiction``; see the module docstring of this file."""
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


# -- scoring -----------------------------------------------------------------------------------------


def load_pairs(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("label") not in ("contradiction", "not_contradiction"):
                raise SystemExit(f"{path}:{n}: label must be contradiction or not_contradiction")
            for key in ("old", "new", "kind"):
                if not isinstance(row.get(key), str) or not row[key].strip():
                    raise SystemExit(f"{path}:{n}: missing {key}")
            row.setdefault("split", "dev")
            rows.append(row)
    return rows


def prf(tp: int, fp: int, fn: int, tn: int) -> dict[str, Any]:
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r > 0 else (0.0 if p == 0 else None)
    total = tp + fp + fn + tn
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "precision": None if p is None else round(p, 4),
        "recall": None if r is None else round(r, 4),
        "f1": None if f1 is None else round(f1, 4),
        "accuracy": round((tp + tn) / total, 4) if total else None,
        "n": total,
    }


def score(rows: Sequence[dict[str, Any]], predictions: Sequence[bool]) -> dict[str, Any]:
    def counts(idx: Sequence[int]) -> dict[str, Any]:
        tp = sum(1 for i in idx if predictions[i] and rows[i]["label"] == "contradiction")
        fp = sum(1 for i in idx if predictions[i] and rows[i]["label"] != "contradiction")
        fn = sum(1 for i in idx if not predictions[i] and rows[i]["label"] == "contradiction")
        tn = len(idx) - tp - fp - fn
        return prf(tp, fp, fn, tn)

    everything = list(range(len(rows)))
    by_kind: dict[str, list[int]] = {}
    by_split: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_kind.setdefault(r["kind"], []).append(i)
        by_split.setdefault(r["split"], []).append(i)
    return {
        "overall": counts(everything),
        "by_split": {k: counts(v) for k, v in sorted(by_split.items())},
        "by_kind": {k: counts(v) for k, v in sorted(by_kind.items())},
    }


def run_detector(
    detector: Callable[[str, str], Contradiction | None], rows: Sequence[dict[str, Any]]
) -> tuple[list[bool], list[dict[str, Any] | None], float]:
    started = time.perf_counter()
    outputs = [detector(r["old"], r["new"]) for r in rows]
    per_pair_us = (time.perf_counter() - started) / max(len(rows), 1) * 1e6
    flat = [
        None
        if o is None
        else {"kind": o.kind, "before": o.before, "after": o.after, "confidence": o.confidence}
        for o in outputs
    ]
    return [o is not None for o in outputs], flat, per_pair_us


def cosines(rows: Sequence[dict[str, Any]]) -> list[float]:
    from triptych.core.embed import LocalEmbedder

    embedder = LocalEmbedder()
    texts = list(dict.fromkeys([r["old"] for r in rows] + [r["new"] for r in rows]))
    log(f"embedding {len(texts)} statements for the similarity gate ...")
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    return [float(vectors[r["old"]] @ vectors[r["new"]]) for r in rows]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/contradictions.py",
        description="Precision, recall and F1 of the freshness contradiction detector (current src/ and the "
        "proposed replacement) on a labelled set of agent-memory statement pairs, overall, per split and "
        "per kind, with every error listed.",
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="labelled pairs (JSON lines)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    p.add_argument("--quick", action="store_true", help="every 4th pair (49), no embedding gate")
    p.add_argument(
        "--no-pipeline",
        action="store_true",
        help="skip the embedding similarity gate (the pipeline only compares records with cosine >= 0.5)",
    )
    p.add_argument(
        "--floor", type=float, default=0.5, help="similarity gate (MemorySettings.contradiction_floor)"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows = load_pairs(args.data)
    if args.quick:
        rows = rows[::4]  # every 4th pair: all kinds, both labels, both splits
    log(f"{len(rows)} pairs from {args.data}")
    result: dict[str, Any] = {"data": str(args.data), "pairs": len(rows), "detectors": {}}
    sims = None if (args.quick or args.no_pipeline) else cosines(rows)
    for name, detector in (("current", detect_contradiction), ("proposed", proposed_detect_contradiction)):
        predictions, outputs, us = run_detector(detector, rows)
        entry: dict[str, Any] = {"per_pair_us": round(us, 1), "detector_only": score(rows, predictions)}
        if sims is not None:
            gated = [p and s >= args.floor for p, s in zip(predictions, sims, strict=True)]
            entry["pipeline_gated"] = score(rows, gated)
        entry["errors"] = [
            {
                "kind": r["kind"],
                "split": r["split"],
                "label": r["label"],
                "error": "false_positive" if pred else "false_negative",
                "old": r["old"],
                "new": r["new"],
                "detector": out,
                **({"cosine": round(sims[i], 3)} if sims is not None else {}),
            }
            for i, (r, pred, out) in enumerate(zip(rows, predictions, outputs, strict=True))
            if pred != (r["label"] == "contradiction")
        ]
        result["detectors"][name] = entry
    if sims is not None:
        low = [i for i, s in enumerate(sims) if s < args.floor and rows[i]["label"] == "contradiction"]
        result["gate"] = {
            "floor": args.floor,
            "contradictions_below_floor": len(low),
            "below_floor": [
                {"old": rows[i]["old"], "new": rows[i]["new"], "cosine": round(sims[i], 3)} for i in low
            ],
        }
    print_results(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nJSON written to {args.out}")
    return 0


def _fmt(x: Any) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def print_results(result: dict[str, Any]) -> None:
    print("=" * 78)
    print(f"contradiction detector on {result['pairs']} labelled pairs")
    print("=" * 78)
    for name, entry in result["detectors"].items():
        for view in ("detector_only", "pipeline_gated"):
            if view not in entry:
                continue
            s = entry[view]
            o = s["overall"]
            print(
                f"\n[{name} / {view}]  P {_fmt(o['precision'])}  R {_fmt(o['recall'])}  F1 {_fmt(o['f1'])}  "
                f"acc {_fmt(o['accuracy'])}  (tp {o['tp']} fp {o['fp']} fn {o['fn']} tn {o['tn']})"
                f"  {entry['per_pair_us']} us/pair"
            )
            for split, c in s["by_split"].items():
                print(
                    f"    split {split:<8} P {_fmt(c['precision'])}  R {_fmt(c['recall'])}  F1 {_fmt(c['f1'])}"
                    f"  (tp {c['tp']} fp {c['fp']} fn {c['fn']} tn {c['tn']})"
                )
            if view == "detector_only":
                print(
                    f"    {'kind':<11} {'n':>3}  label mix        tp fp fn tn   recall  false-positive rate"
                )
                for kind, c in s["by_kind"].items():
                    pos, neg = c["tp"] + c["fn"], c["fp"] + c["tn"]
                    mix = f"{pos} contra / {neg} not"
                    fpr = c["fp"] / neg if neg else None
                    print(
                        f"    {kind:<11} {c['n']:>3}  {mix:<16} {c['tp']:>2} {c['fp']:>2} {c['fn']:>2} {c['tn']:>2}   "
                        f"{_fmt(c['recall']):>6}  {_fmt(fpr):>6}"
                    )
        print(f"\n  errors of {name} ({len(entry['errors'])}):")
        for e in entry["errors"]:
            tag = "FP" if e["error"] == "false_positive" else "FN"
            det = e["detector"]
            why = f" -> {det['kind']}: {det['before']!r} / {det['after']!r}" if det else ""
            cos = f" cos {e['cosine']:.2f}" if "cosine" in e else ""
            print(f"    {tag} [{e['kind']}/{e['split']}]{cos} {e['old']!r} | {e['new']!r}{why}")
    if "gate" in result:
        g = result["gate"]
        print(
            f"\n  similarity gate: {g['contradictions_below_floor']} labelled contradictions have cosine < "
            f"{g['floor']} and are never compared by the pipeline"
        )


if __name__ == "__main__":
    raise SystemExit(main())
