#!/usr/bin/env python3
"""Release profile of the robustness suite (tests/robustness/): many more fuzz examples, random instead
of replayed, longer writes before each ``kill -9`` and several rounds, then one table of the figures:
calls tried, internal errors, /health stalls (> 100 ms) with the same run's idle baseline, and
acknowledged writes lost.

    .venv/bin/python bench/robustness.py                   # 100 examples a tool, 3 kill rounds of 10 s
    .venv/bin/python bench/robustness.py --examples 400 --rounds 5 --crash-seconds 20

It runs pytest on tests/robustness with the profile in the environment; figures are read back from the
report file the tests append to, and written to /tmp/triptych-bench/robustness-<time>.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_facts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(selection: list[str], env: dict[str, str]) -> int:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection]
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **env}).returncode


def summarize(lines: list[dict[str, Any]]) -> dict[str, Any]:
    fuzz = [r for r in lines if r["test"].startswith("fuzz-")]
    doors = [r for r in lines if r["test"].startswith("doors-")]
    stalls = [r for r in lines if r["test"] in ("regex-bomb", "document-300kb")]
    crashes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in lines:
        if r["test"].startswith("kill-9-") or r["test"] == "full-disk":
            crashes[r["test"]].append(r)
    return {
        "fuzz": {
            r["test"]: {
                k: r.get(k, 0)
                for k in (
                    "tools",
                    "calls",
                    "answered",
                    "refused",
                    "protocol_errors",
                    "internal_errors",
                    "tracebacks",
                )
            }
            for r in fuzz
        },  # fmt: skip
        "fuzz_calls": sum(r.get("calls", 0) for r in fuzz),
        "fuzz_internal_errors": sum(r.get("internal_errors", 0) + r.get("tracebacks", 0) for r in fuzz),
        "door_requests": sum(r["calls"] for r in doors),
        "door_failures": sum(r["failures"] for r in doors),
        "stalls": stalls,
        "writes": {
            name: {
                "rounds": len(rs),
                "acknowledged": sum(r["acknowledged"] for r in rs),
                "lost": sum(r["lost"] for r in rs),
            }
            for name, rs in crashes.items()
        },  # fmt: skip
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=100, help="fuzz calls per tool (CI: 8)")
    parser.add_argument("--rounds", type=int, default=3, help="kill -9 rounds per surface")
    parser.add_argument("--crash-seconds", type=float, default=10.0, help="writes before each kill (CI: 3)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = Path(f"/tmp/triptych-bench/robustness-{stamp}.jsonl")
    report.parent.mkdir(parents=True, exist_ok=True)
    env = {
        "TRIPTYCH_ROBUSTNESS_REPORT": str(report),
        "TRIPTYCH_FUZZ_EXAMPLES": str(args.examples),
        "TRIPTYCH_FUZZ_RANDOM": "1",
        "TRIPTYCH_CRASH_SECONDS": str(args.crash_seconds),
    }
    started = time.time()
    facts_before = machine_facts()
    codes = [run_pytest(["tests/robustness", "--deselect", "tests/robustness/test_crash.py"], env)]
    for _ in range(args.rounds):
        codes.append(run_pytest(["tests/robustness/test_crash.py"], env))
    lines = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    summary = summarize(lines)
    result = {"command": " ".join(sys.argv), "profile": vars(args) | {"out": str(args.out)},
              "minutes": round((time.time() - started) / 60, 1), "pytest_exit_codes": codes,
              "machine_before": facts_before, "machine_after": machine_facts(), **summary}  # fmt: skip
    out = args.out or Path(f"/tmp/triptych-bench/robustness-{stamp}.json")
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: result[k] for k in ("fuzz_calls", "fuzz_internal_errors", "door_requests",
                                              "door_failures", "writes", "pytest_exit_codes")}, indent=2))  # fmt: skip
    for stall in summary["stalls"]:
        print(json.dumps(stall))
    print(f"results: {out}")
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
