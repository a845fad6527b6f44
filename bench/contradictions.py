"""Contradiction-detector benchmark: precision / recall / F1 of the freshness pipeline's
``detect_contradiction`` on a hand-labelled set of agent-memory statement pairs.

The set (``bench/contradictions.jsonl``, one JSON object a line) holds ``{"old", "new", "label", "kind",
"split"}``: ``label`` is ``contradiction`` or ``not_contradiction``; ``kind`` says what differs
(contradictions: preference, number, date, negation, name, state, implicit; hard negatives: paraphrase,
format, refinement, attribute, addition, unrelated); ``split`` is ``dev`` (the pairs the detector's
changes were designed against) or ``heldout`` (written before the detector was first run, and never
used to tune it). The detector is run on (old, new) exactly as ``MemoryService._freshness`` calls it.

The detector scored is ``triptych.metronix.freshness.detect_contradiction`` (the code in src/; the
replacement this script first proposed now lives there).

With ``--pipeline`` (default on) both texts are also embedded with the server's model and a pair only
counts as flagged if its cosine clears the pipeline's gate (``MemorySettings.contradiction_floor``,
0.5): the pipeline never compares records that are less similar than that.

Run from the repository root:  .venv/bin/python bench/contradictions.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common import log

from triptych.metronix.freshness import Contradiction, detect_contradiction

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "contradictions.jsonl"
DEFAULT_OUT = Path("/tmp/triptych-bench/contradictions.json")


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
        description="Precision, recall and F1 of the freshness contradiction detector in src/ on a labelled "
        "set of agent-memory statement pairs, overall, per split and per kind, with every error listed.",
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
    for name, detector in (("current", detect_contradiction),):
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
    if sims is not None:
        result["decision_step"] = decision_step(rows, sims)
    print_results(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nJSON written to {args.out}")
    return 0


RESTATEMENTS = ("paraphrase", "format", "refinement")  # the same fact again: the write is the hard call
# A different fact: the write is a new memory. "series": two items of a numbered series.
DISTINCT = ("attribute", "unrelated", "addition", "series")


def previous_judge(
    old: str, new: str, similarity: float, threshold: float, decision_threshold: float
) -> bool:
    """The rule src had before 2026-12-01 (no restatement or numbered-series rule), for comparison."""
    from triptych.metronix.freshness import decision_confidence, jaccard
    from triptych.metronix.memory import DECISION_SIMILARITY_MARGIN

    lexical = jaccard(old, new)
    duplicate = similarity >= threshold and lexical >= 0.5
    unsure = (
        similarity >= threshold - DECISION_SIMILARITY_MARGIN
        and decision_confidence(similarity, lexical, threshold) < decision_threshold
    )
    return duplicate or unsure


def decision_step(rows: Sequence[dict[str, Any]], sims: Sequence[float]) -> dict[str, Any]:
    """What the freshness pipeline files for the non-contradictions, the second statement written after
    the first: ``possible_duplicate`` or ``low_confidence_decision`` (either sends it to review). A
    restatement should be flagged, a distinct fact should not. Defaults of ``MemorySettings``."""
    from triptych.metronix.freshness import judge_repeat
    from triptych.metronix.memory import DECISION_SIMILARITY_MARGIN, MemorySettings

    settings = MemorySettings()
    t, d = settings.reconciler_threshold, settings.decision_threshold
    out: dict[str, Any] = {}
    for name in ("current", "previous"):
        flagged = {"restatement": 0, "distinct": 0}
        totals = {"restatement": 0, "distinct": 0}
        for r, sim in zip(rows, sims, strict=True):
            group = (
                "restatement" if r["kind"] in RESTATEMENTS else "distinct" if r["kind"] in DISTINCT else None
            )
            if group is None or detect_contradiction(r["old"], r["new"]) is not None:
                continue
            totals[group] += 1
            if name == "current":
                repeat = judge_repeat(
                    r["old"],
                    r["new"],
                    sim,
                    threshold=t,
                    decision_threshold=d,
                    margin=DECISION_SIMILARITY_MARGIN,
                )
                flagged[group] += repeat is not None
            else:
                flagged[group] += previous_judge(r["old"], r["new"], sim, t, d)
        out[name] = {g: f"{flagged[g]} of {totals[g]}" for g in totals}
    return out


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
    if "decision_step" in result:
        print("\n  decision step (flagged for review: possible_duplicate or low_confidence_decision):")
        for name, counts in result["decision_step"].items():
            print(
                f"    {name:<9} restatements {counts['restatement']:<9} distinct facts {counts['distinct']}"
            )
    if "gate" in result:
        g = result["gate"]
        print(
            f"\n  similarity gate: {g['contradictions_below_floor']} labelled contradictions have cosine < "
            f"{g['floor']} and are never compared by the pipeline"
        )


if __name__ == "__main__":
    raise SystemExit(main())
