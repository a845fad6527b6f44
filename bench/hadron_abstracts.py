"""What node abstracts cost hadron_create_node: p50/p95 of the node service's create (the tool's work,
without the MCP transport) with the abstract written after the commit, and without, interleaved call by
call in the same run so both see the same load. A third row writes LLM abstracts against a local
OpenAI-compatible server on 127.0.0.1 that answers at once (the HTTP round trip, not a model).

    .venv/bin/python bench/hadron_abstracts.py [--calls 500] [--chars 2000]

Every call creates a new node whose content is ``--chars`` characters of Markdown (a heading and
paragraphs of sentences), so every abstract is computed (none is skipped as unchanged).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hadron.llm_server import llm_server  # noqa: E402

from triptych.core.config import Settings  # noqa: E402
from triptych.hadron.domain.abstract import extractive  # noqa: E402
from triptych.hadron.identity import HadronCaller  # noqa: E402
from triptych.hadron.services.nodes import NodeFields  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

WORDS = (
    "deploy rollback approval invoice finance team platform release schedule review budget customer "
    "incident report metric latency storage index memory graph search policy owner quarter plan"
).split()


def document(rng: random.Random, chars: int) -> str:
    parts = [f"# {rng.choice(WORDS).title()} {rng.choice(WORDS)}", ""]
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
        parts.append(sentence + (" " if rng.random() < 0.8 else "\n\n"))
        size += len(sentence) + 1
    return "".join(parts)[:chars]


def setup(data_dir: Path, settings: Settings) -> tuple[Hadron, HadronCaller]:
    hadron = Hadron.open(data_dir / "hadron.db", settings=settings)
    admin = hadron.admin()
    if hadron.tenancy.org_by_root("bench.example") is None:
        admin.create_org("bench.example")
        admin.create_user("bench")
        admin.add_org_member("bench.example", "bench", "OWNER")
        admin.create_memory("notes", "knowledge", org="bench.example", name="Notes")
    caller = HadronCaller("user", "bench", user=hadron.tenancy.user_by_handle("bench"))
    return hadron, caller


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--chars", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench-abstracts-") as tmp, llm_server() as llm:
        data = Path(tmp)
        plain, caller = setup(data, Settings(data_dir=data))
        with_llm, _ = setup(data, Settings(data_dir=data, llm_url=llm.url, llm_model="bench"))
        keep = list(plain.nodes.derived)
        state = plain.selections.session(caller, "bench", None)
        llm_state = with_llm.selections.session(caller, "bench", None)
        times: dict[str, list[float]] = {
            "without abstracts": [],
            "extractive abstract": [],
            "LLM abstract": [],
        }
        extract: list[float] = []

        def create(hadron: Hadron, key: str, n: int, session: object) -> None:
            content = document(rng, args.chars)
            values = {"name": f"n{n}", "content": content}
            fields = NodeFields(values, frozenset(values))
            started = time.perf_counter()
            hadron.nodes.create(
                caller, session, f"hrn:node:bench.example:notes:{key.split()[0]}-{n}", fields, None
            )  # type: ignore[arg-type]
            times[key].append((time.perf_counter() - started) * 1000)

        def toggled(on: bool) -> Callable[[], None]:
            def set_hooks() -> None:
                plain.nodes.derived[:] = keep if on else []

            return set_hooks

        for n in range(args.calls):
            toggled(False)()
            create(plain, "without abstracts", n, state)
            toggled(True)()
            create(plain, "extractive abstract", n, state)
            create(with_llm, "LLM abstract", n, llm_state)
            content = document(rng, args.chars)
            started = time.perf_counter()
            extractive(content)
            extract.append((time.perf_counter() - started) * 1000)
        plain.close()
        with_llm.close()
    base = statistics.median(times["without abstracts"])
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{args.calls} creates per row, {args.chars}-character Markdown content, interleaved")
    print("| call | n | p50 ms | p95 ms | p50 vs without |")
    print("|---|---|---|---|---|")
    for key, samples in times.items():
        p50, p95 = summary(samples)
        print(f"| service: create node, {key} | {len(samples)} | {p50:.2f} | {p95:.2f} | {p50 / base:.2f}x |")
    p50, p95 = summary(extract)
    print(f"| extractive() alone | {len(extract)} | {p50:.3f} | {p95:.3f} | |")


if __name__ == "__main__":
    main()
