"""Analysis-run benchmark: one run over 3 workloads x 2 candidates x 50 replays against the local
provider server (tests/provider_server.py, real OpenAI client over HTTP on 127.0.0.1), scored with the
bundled embedding model. Reports wall time and replays per second next to a baseline from the same run:
the same 300 replays through the same replay path, one after another, without scoring or a report.

    .venv/bin/python bench/metergraph_analysis.py [--workloads 3] [--candidates 2] [--samples 50] [--repeat 3]

Data: per workload, 60 retained gpt-4o calls (questions of 20-60 words) ingested in-process through
``IngestService.ingest_rows``; the run samples 50 of each. The provider server answers "replayed: <question>":
two workloads' stored answers are exactly that (candidates pass), the third's are 40-120 unrelated words
(candidates are withheld), so the report holds both kinds of opportunity. Results print as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import machine_facts  # noqa: E402
from provider_server import ProviderServer  # noqa: E402

from triptych.core.embed import LocalEmbedder  # noqa: E402
from triptych.metergraph.analysis_runner import RunSettings  # noqa: E402
from triptych.metergraph.analysis_sources import StoreWorkloads  # noqa: E402
from triptych.metergraph.keys import AgentPrincipal, AppPrincipal  # noqa: E402
from triptych.metergraph.providers import load_provider_settings  # noqa: E402
from triptych.metergraph.service import Metergraph  # noqa: E402
from triptych.metergraph.settings import load_metergraph_settings  # noqa: E402

WORDS = ("invoice refund shipping order account password delivery warranty price discount store "
         "return label tracking card payment address subscription plan upgrade cancel").split()  # fmt: skip
CANDIDATES = ("gpt-4o-mini", "gpt-4.1-mini", "gpt-4.1-nano")


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def load(mg: Metergraph, workloads: int, per_workload: int, now: datetime) -> None:
    rng = random.Random(7)
    mg.metadata.set_retain_content("bench", True, now.isoformat())
    rows = []
    for w in range(workloads):
        for i in range(per_workload):
            question = sentence(rng, 20, 60)
            rows.append({
                "ts": (now - timedelta(minutes=i + 1)).isoformat(), "route": f"route-{w}", "provider": "openai",
                "model": "gpt-4o", "input_tokens": 400 + i, "output_tokens": 120, "latency_ms": 900,
                "status": "success", "trace_id": f"t-{w}-{i}",
                "request_json": {"messages": [{"role": "user", "content": question}]},
                # Two workloads whose answers the candidates reproduce, one they do not.
                "response_text": f"replayed: {question}" if w < 2 else sentence(rng, 40, 120),
            })  # fmt: skip
    mg.ingest.ingest_rows(AppPrincipal("bench", "bench"), rows, "sdk")


def full_run(mg: Metergraph, settings: RunSettings) -> dict[str, Any]:
    principal = AgentPrincipal("bench", "debug", "bench")
    start = time.perf_counter()
    run_id = mg.analysis.start(principal, settings)["run"]["run_id"]
    mg.analysis.wait()
    wall = time.perf_counter() - start
    run = mg.analysis.get_run(principal, run_id)["run"]
    assert run["status"] == "succeeded", run
    replays = run["progress"]["replays_done"]
    return {"wall_s": round(wall, 3), "replays": replays, "replays_per_s": round(replays / wall, 1),
            "replay_s": run["progress"]["replay_seconds"], "scoring_s": run["progress"]["scoring_seconds"],
            "failed": run["progress"]["replays_failed"], "outcome": run["report"]["outcome"]}  # fmt: skip


def bare_replays(
    mg: Metergraph, workloads: int, samples: int, candidates: tuple[str, ...], now: datetime
) -> dict[str, Any]:
    """The baseline: the same replays through the same replay path, sequentially, nothing scored."""
    assert mg.analysis.runner is not None
    replayer = mg.analysis.runner.replayer
    source = StoreWorkloads(mg.calls)
    until = int(now.timestamp() * 1000) + 1
    since = until - 7 * 86_400_000
    calls = [
        c
        for spec in source.workloads("bench", since, until)
        for c in source.sample("bench", spec, since, until, samples)
    ]
    start = time.perf_counter()
    n = 0
    for model in candidates:
        for call in calls:
            assert replayer.replay("bench", call, None, model).text is not None
            n += 1
    wall = time.perf_counter() - start
    return {"wall_s": round(wall, 3), "replays": n, "replays_per_s": round(n / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    now = datetime.now(UTC)
    candidates = CANDIDATES[: args.candidates]
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])
    results: dict[str, Any] = {"machine": machine_facts(), "workloads": args.workloads,
                               "candidates": list(candidates), "samples": args.samples}  # fmt: skip
    with ProviderServer() as provider, tempfile.TemporaryDirectory() as tmp:
        mg = Metergraph.open(
            Path(tmp), load_metergraph_settings(max_rows=5000), clock=lambda: now,
            provider_settings=load_provider_settings(openai_base_url=provider.openai_url, openai_api_key="sk-bench"),
            embedder=lambda: embedder,
        )  # fmt: skip
        try:
            load(mg, args.workloads, args.samples + 10, now)
            settings = RunSettings(days=7, samples_per_workload=args.samples, min_samples=10,
                                   candidates=tuple((None, m) for m in candidates))  # fmt: skip
            runs, sequential, bare = [], [], []
            for _ in range(args.repeat):
                bare.append(bare_replays(mg, args.workloads, args.samples, candidates, now))
                runs.append(full_run(mg, settings))
                sequential.append(full_run(mg, dataclasses.replace(settings, concurrency=1)))
                print(json.dumps({"run": runs[-1], "run_concurrency_1": sequential[-1], "bare": bare[-1]}),
                      file=sys.stderr)  # fmt: skip
        finally:
            mg.close()
    med = statistics.median
    results["analysis_run"] = {"wall_s": med(r["wall_s"] for r in runs), "replays_per_s": med(r["replays_per_s"] for r in runs),
                               "replays": runs[0]["replays"], "runs": runs}  # fmt: skip
    results["analysis_run_concurrency_1"] = {"wall_s": med(r["wall_s"] for r in sequential),
                                             "replays_per_s": med(r["replays_per_s"] for r in sequential)}  # fmt: skip
    results["baseline_bare_sequential_replays"] = {"wall_s": med(r["wall_s"] for r in bare),
                                                   "replays_per_s": med(r["replays_per_s"] for r in bare)}  # fmt: skip
    results["ratio_run_vs_bare_replays_per_s"] = round(
        results["analysis_run"]["replays_per_s"]
        / results["baseline_bare_sequential_replays"]["replays_per_s"],
        2,
    )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
