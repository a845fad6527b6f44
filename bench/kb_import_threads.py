"""`triptych kb import` throughput with the bulk embedding on N threads, alternated in one run (issue 31, item 7).

Writes the first ``--docs`` SciFact abstracts as text files into a scratch folder, then for each round and
each thread count imports them with ``TRIPTYCH_EMBED_BULK_THREADS=N`` into a fresh data directory and reads
the command's own closing line ("embedded N chunks in T s (R chunks/s)"). Prints each run and the
median chunks/s per thread count as JSON; the load average is recorded beside every run, since a second
thread only pays when the second core is free.

    flock /tmp/triptych-bench.lock .venv/bin/python bench/kb_import_threads.py --docs 300 --rounds 2 --threads 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import load_scifact

TRIPTYCH = str(Path(sys.executable).parent / "triptych")
LINE = re.compile(r"embedded ([\d,]+) chunks in ([\d.]+) s \(([\d.]+) chunks/s\)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=300, help="SciFact abstracts to import (default 300)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", default="1,2", help="thread counts to alternate (default 1,2)")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="triptych-kb-import-"))
    try:
        folder = scratch / "docs"
        folder.mkdir()
        for i, doc in enumerate(load_scifact().docs[: args.docs]):
            (folder / f"doc{i:05d}.txt").write_text(f"{doc['title']}\n\n{doc['text']}\n")
        runs = []
        for round_ in range(1, args.rounds + 1):
            for threads in counts:
                data = scratch / f"data-{round_}-{threads}"
                env = {**os.environ, "TRIPTYCH_EMBED_BULK_THREADS": str(threads)}
                load = os.getloadavg()[0]
                done = subprocess.run(
                    [TRIPTYCH, "kb", "import", str(folder), "--workspace", "bench", "--data-dir", str(data)],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                match = LINE.search(done.stderr)
                if match is None:
                    raise SystemExit(f"no closing line from kb import:\n{done.stderr[-2000:]}")
                run = {"round": round_, "threads": threads, "chunks": int(match[1].replace(",", "")),
                       "seconds": float(match[2]), "chunks_per_s": float(match[3]), "load": round(load, 2)}  # fmt: skip
                runs.append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
                shutil.rmtree(data)
        medians = {t: statistics.median(r["chunks_per_s"] for r in runs if r["threads"] == t) for t in counts}
        print(json.dumps({"docs": args.docs, "runs": runs, "median_chunks_per_s": medians}, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
