"""The ``ActionRunStore`` contract on every engine: runs of a node newest first, ties of a timestamp in
reverse insertion order, every field as written."""

from __future__ import annotations

import pytest
from hadron.store_contract.conftest import AT, Seed

from triptych.hadron.action_store import ActionRun
from triptych.hadron.store import new_id

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def run(node_id: str, at: str, **fields: object) -> ActionRun:
    values: dict[str, object] = dict(
        id=new_id(), node_id=node_id, memory_id="m", node_revision=1, kind="prompt", actor="hrn:user:alice",
        work_session_id=None, parent_run_id=None, started_at=at, duration_ms=1.25, args={}, outcome="ok",
        error=None, output_chars=None, output_sha256=None,
    )  # fmt: skip
    values.update(fields)
    return ActionRun(**values)  # type: ignore[arg-type]


def test_runs_come_newest_first_and_ties_in_reverse_insertion_order(seed: Seed) -> None:
    store = seed.stores.actions
    older = run("n", "2026-12-01T08:00:00.000Z")
    tied = [run("n", AT) for _ in range(3)]
    for r in (older, *tied):
        store.add_run(r)
    store.add_run(run("other", AT))
    assert [r.id for r in store.runs("n")] == [*[r.id for r in reversed(tied)], older.id]
    assert [r.id for r in store.runs("n", limit=2)] == [tied[2].id, tied[1].id]
    assert store.runs("none") == []


def test_a_run_reads_back_field_for_field(seed: Seed) -> None:
    store = seed.stores.actions
    written = run("n", AT, work_session_id="s", parent_run_id="p", args={"q": "é", "n": [1, 2]},
                  outcome="ACTION_FAILED", error="boom", output_chars=12, output_sha256="ab" * 32,
                  node_revision=7, duration_ms=0.001)  # fmt: skip
    store.add_run(written)
    assert store.runs("n") == [written]
