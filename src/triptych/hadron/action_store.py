"""The record of every hadron_run_action run: who, when, which node revision, the arguments, the outcome
and the duration. Its own migration component (``hadron-actions``); ``ActionRunStore`` is the
engine-neutral interface; ``ActionRunSql`` holds the SQL of both engines, ``SqliteActionRunStore`` and
``PostgresActionRunStore`` their schemas (a tie of ``started_at`` goes by ``Dialect.insertion_order``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore

COMPONENT = "hadron-actions"


@dataclass(frozen=True, slots=True)
class ActionRun:
    id: str
    node_id: str
    memory_id: str
    node_revision: int
    kind: str
    actor: str
    work_session_id: str | None
    parent_run_id: str | None
    started_at: str
    duration_ms: float
    args: dict[str, Any]
    outcome: str  # "ok" or the refusal's code
    error: str | None
    output_chars: int | None
    output_sha256: str | None

    def view(self) -> dict[str, Any]:
        return {
            "runId": self.id,
            "revision": self.node_revision,
            "kind": self.kind,
            "actor": self.actor,
            "sessionId": self.work_session_id,
            "parentRunId": self.parent_run_id,
            "at": self.started_at,
            "durationMs": round(self.duration_ms, 3),
            "args": self.args,
            "outcome": self.outcome,
            "error": self.error,
            "outputChars": self.output_chars,
            "outputSha256": self.output_sha256,
        }


class ActionRunStore(Protocol):
    def add_run(self, run: ActionRun) -> None: ...
    def runs(self, node_id: str, limit: int = 10) -> list[ActionRun]: ...


_COLUMNS = (
    "id, node_id, memory_id, node_revision, kind, actor, work_session_id, parent_run_id, started_at, "
    "duration_ms, args, outcome, error, output_chars, output_sha256"
)


class ActionRunSql(EngineStore):
    """The SQL both engines run."""

    def add_run(self, run: ActionRun) -> None:
        values = (
            run.id, run.node_id, run.memory_id, run.node_revision, run.kind, run.actor, run.work_session_id,
            run.parent_run_id, run.started_at, run.duration_ms, json.dumps(run.args, ensure_ascii=False),
            run.outcome, run.error, run.output_chars, run.output_sha256,
        )  # fmt: skip
        with self.atomic(write_keys.memory(run.memory_id)) as tx:
            tx.execute(f"INSERT INTO action_runs ({_COLUMNS}) VALUES ({self.dialect.marks(15)})", values)

    def runs(self, node_id: str, limit: int = 10) -> list[ActionRun]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM action_runs WHERE node_id = {p} "
            f"ORDER BY started_at DESC, {self.dialect.insertion_order} DESC LIMIT {p}",
            (node_id, limit),
        ).fetchall()
        return [_run(r) for r in rows]


def _run(row: Any) -> ActionRun:
    return ActionRun(
        id=row[0], node_id=row[1], memory_id=row[2], node_revision=row[3], kind=row[4], actor=row[5],
        work_session_id=row[6], parent_run_id=row[7], started_at=row[8], duration_ms=row[9],
        args=json.loads(row[10]), outcome=row[11], error=row[12], output_chars=row[13], output_sha256=row[14],
    )  # fmt: skip


class SqliteActionRunStore(ActionRunSql):
    dialect = SQLITE
    schema = ((COMPONENT, sqlite_schema.ACTIONS),)


class PostgresActionRunStore(ActionRunSql):
    dialect = POSTGRES
    schema = ((COMPONENT, pg_schema.ACTIONS),)
