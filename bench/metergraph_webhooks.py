"""Incident webhook delivery: latency from the incident commit to the receiver, and the throughput of a
burst, next to a baseline from the same run (the same signed bodies POSTed straight to the same receiver).

    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_webhooks.py [--latency 200] [--burst 1000]

In process, on a throwaway data directory: Metergraph with one webhook endpoint pointing at a real HTTP
receiver on 127.0.0.1 (tests/webhook_receiver.py, a ThreadingHTTPServer answering 200). Incidents are
written through ``IncidentStore.save`` (the detectors' own write: the incident row and its outbox row in
one transaction); the server's sender thread delivers them, with the default settings.

1. Latency: ``--latency`` incidents opened one at a time, each after the previous one was received;
   latency = arrival at the receiver (body read) minus the return of the committing ``save``. Baseline:
   the round trip of a signed POST of one such body on a keep-alive client, arrival minus send. Then
   ``--cross`` incidents committed through a second Metergraph on the same data directory (as another
   server worker would): no wake-up reaches the sender, which finds them by polling.
2. Burst: ``--burst`` incidents opened in one transaction (as one sweep opening many); throughput =
   events / (last arrival - commit). Baseline: the same bodies POSTed by ``MG_WEBHOOK_CONCURRENCY`` threads
   on one keep-alive client, as fast as they go.
Results print as JSON (and go to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx  # noqa: E402
from common import machine_facts  # noqa: E402
from webhook_receiver import Receiver  # noqa: E402

from triptych.metergraph.incident_store import Incident  # noqa: E402
from triptych.metergraph.service import Metergraph  # noqa: E402
from triptych.metergraph.settings import load_metergraph_settings  # noqa: E402
from triptych.metergraph.webhooks import event_body, load_webhook_settings, signed_headers  # noqa: E402

HOUR_MS = 3_600_000


def incident(n: int, now_ms: int) -> Incident:
    """A cost-spike incident with a diagnosis shaped as the detector writes it (series ``m<n>``)."""
    start = now_ms // HOUR_MS * HOUR_MS
    iso = datetime.fromtimestamp(start / 1000, UTC).isoformat()
    diagnosis = {
        "kind": "cost_spike", "grain": "model", "value": 45.1, "baseline": 1.02, "baseline_windows": 24,
        "window": {"start": iso, "end": iso, "complete": False, "width_seconds": 3600},
        "numbers": {"window_cost_usd": 45.1, "baseline_cost_usd": 1.02, "window_calls": 720},
        "thresholds": {"ratio": 3.0, "min_usd": 1.0, "clear_fraction": 0.5, "resolve_windows": 2},
        "evidence": {
            "usage": {"tool": "metergraph_get_usage_aggregates", "exact": True,
                      "arguments": {"since": iso, "until": iso, "group_by": ["provider", "model"],
                                    "provider": ["openai"], "model": [f"m{n}"], "environment": ["prod"]}},
            "traces": {"tool": "metergraph_query_traces", "arguments": {"days": 1, "limit": 50, "route": "support"}},
            "routes": [{"route": "support", "day_calls": 720, "day_errors": 3}],
        },
    }  # fmt: skip
    return Incident(
        "inc_" + uuid.uuid4().hex[:24], "bench", "cost_spike", "model", json.dumps(["openai", f"m{n}", "prod"]),
        None, "openai", f"m{n}", "prod", "open", "critical", f"Cost spike on openai/m{n} (prod)", start,
        start + HOUR_MS, now_ms, now_ms, None, 1, 1, 0, start // HOUR_MS, diagnosis,
    )  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": round(pct(ms, 0.5), 2), "p95_ms": round(pct(ms, 0.95), 2),
            "mean_ms": round(statistics.fmean(ms), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=int, default=200, help="incidents opened one at a time")
    parser.add_argument("--burst", type=int, default=1000, help="incidents opened in one transaction")
    parser.add_argument("--cross", type=int, default=20, help="incidents committed by another Metergraph")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = machine_facts()
    settings = load_webhook_settings()
    receiver = Receiver().start()
    tmp = Path(tempfile.mkdtemp(prefix="mg-webhooks-bench-"))
    mg = Metergraph.open(tmp, load_metergraph_settings(), webhook_settings=settings)
    store = mg.incidents.store
    endpoint, secret = mg.webhooks.add("bench", receiver.url)
    mg.webhooks.start()
    results: dict[str, Any] = {"settings": settings.model_dump(), "machine_start": started}
    try:
        # 1. Latency, one incident at a time.
        latencies: list[float] = []
        for n in range(args.latency):
            item = incident(n, int(time.time() * 1000))
            store.save("bench", "model", None, [item], {item.id})
            committed = time.time()
            got = receiver.wait_accepted(n + 1)[-1]
            assert got.json()["incident"]["id"] == item.id
            latencies.append(got.arrived - committed)
        results["latency_commit_to_receiver"] = summary_ms(latencies)

        # 1b. Committed by another process's connections (another worker, no wake-up): found by polling.
        other = Metergraph.open(tmp, load_metergraph_settings(), webhook_settings=settings)
        try:
            polled: list[float] = []
            rng = random.Random(5)
            for n in range(args.cross):
                # Arriving at a random moment, not in step with the sender's last delivery (right after
                # which it claims once more and would catch the commit without polling).
                time.sleep(rng.uniform(0.2, 1.2))
                item = incident(50_000 + n, int(time.time() * 1000))
                other.incidents.store.save("bench", "model", None, [item], {item.id})
                committed = time.time()
                got = receiver.wait_accepted(args.latency + n + 1)[-1]
                assert got.json()["incident"]["id"] == item.id
                polled.append(got.arrived - committed)
        finally:
            other.close()
        results["latency_commit_elsewhere_to_receiver"] = summary_ms(polled)

        # Baseline: a signed POST of the same kind of body, straight to the receiver.
        body = event_body("incident.opened", "evt_b", "whd_b", "bench", None, int(time.time() * 1000))
        raw = body.encode()
        round_trips: list[float] = []
        with httpx.Client(timeout=10) as client:
            for _ in range(args.latency):
                before = len(receiver.received)
                sent = time.time()
                client.post(
                    receiver.url, content=raw, headers=signed_headers(secret, "whd_b", "x", raw, sent)
                )
                assert receiver.wait_for(lambda r, before=before: len(r.received) > before)
                got = receiver.received[before]
                round_trips.append(got.arrived - sent)
        results["baseline_direct_post"] = summary_ms(round_trips)
        results["latency_ratio_p50"] = round(pct(latencies, 0.5) / pct(round_trips, 0.5), 1)

        # 2. A burst: many incidents in one transaction.
        received_before = len(receiver.accepted())
        items = [incident(100_000 + n, int(time.time() * 1000)) for n in range(args.burst)]
        store.save("bench", "model", None, items, {i.id for i in items})
        committed = time.time()
        # Counting (not filtering) on each arrival keeps the waiting thread off the receiver's lock.
        target = len(receiver.received) + args.burst
        assert receiver.wait_for(lambda r: len(r.received) >= target, timeout=600)
        got_all = receiver.accepted()[received_before:]
        last = max(r.arrived for r in got_all)
        burst_s = last - committed
        ids = {r.json()["incident"]["id"] for r in got_all}
        assert ids == {i.id for i in items}, "every burst event arrives once"
        results["burst"] = {"events": args.burst, "seconds": round(burst_s, 3),
                            "events_per_s": round(args.burst / burst_s, 1)}  # fmt: skip

        bodies = [r.body for r in got_all]
        before = len(receiver.received)
        with httpx.Client(
            timeout=10, limits=httpx.Limits(max_connections=settings.concurrency * 2)
        ) as client:
            start = time.time()

            def send(raw_body: bytes) -> None:
                headers = signed_headers(secret, "whd_b", "x", raw_body, time.time())
                client.post(receiver.url, content=raw_body, headers=headers)

            with ThreadPoolExecutor(settings.concurrency) as pool:
                list(pool.map(send, bodies))
            assert receiver.wait_for(lambda r: len(r.received) >= before + len(bodies))
            direct_s = max(r.arrived for r in receiver.received[before:]) - start
        results["baseline_burst_direct_post"] = {"events": len(bodies), "seconds": round(direct_s, 3),
                                                 "events_per_s": round(len(bodies) / direct_s, 1)}  # fmt: skip
        results["burst_ratio"] = round(burst_s / direct_s, 2)
        results["endpoint"] = endpoint["id"]
    finally:
        mg.close()
        receiver.stop()
    results["machine_end"] = machine_facts()
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
