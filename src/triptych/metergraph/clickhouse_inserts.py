"""Group commit for the ClickHouse engine: ingest batches that wait at the same time go in one INSERT.

Each INSERT into ``calls`` costs ClickHouse a fixed amount besides its rows: a new part in ``calls``
and in every table a materialized view feeds (seven of them up to schema version 4, three since), each
with its view's query planned and run. Measured on the chdb endpoint that was about 100 ms per INSERT
against 9 µs per row with seven, so a batch of 5,000 rows paid 29 µs a row and five batches in one INSERT
13 µs a row (``bench/README.md``, ``docs/benchmarks.md``).

A batch that finds no INSERT in flight goes at once, alone (no added latency). Batches that arrive while
one is in flight queue up, and the next INSERT takes all of them; every batch's caller returns only once
the INSERT holding its rows has been acknowledged, so a 202 still means stored. If a combined INSERT is
refused (a value beyond its column's range, a server error), each of its batches is retried alone, so
only the bad batch fails and the others land as if sent alone; a server that cannot be reached fails
them all (the clients retry), as it would have failed each.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Columns = list[list[Any]]


@dataclass(eq=False)
class _Pending:
    columns: Columns
    done: bool = False
    error: Exception | None = None


class GroupInserter:
    """``submit(columns)`` returns once those columns are stored, together with any others waiting.

    ``insert(columns)`` does one INSERT; ``retry_alone(exc)`` says whether a refused combined INSERT is
    worth retrying batch by batch (not when the server is unreachable).
    """

    def __init__(self, insert: Callable[[Columns], None], retry_alone: Callable[[Exception], bool]) -> None:
        self._insert = insert
        self._retry_alone = retry_alone
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._flushing = False

    def submit(self, columns: Columns) -> None:
        item = _Pending(columns)
        with self._cond:
            self._queue.append(item)
            while self._flushing and not item.done:
                self._cond.wait()
            if not item.done:
                self._flushing = True  # this thread sends the queue, its own batch included
                group, self._queue = self._queue, []
        if not item.done:
            try:
                self._flush(group)
            except Exception as exc:  # before anything was sent (building the combined columns)
                for pending in group:
                    pending.error = pending.error or exc
            finally:
                with self._cond:
                    for pending in group:
                        pending.done = True
                    self._flushing = False
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error

    def _flush(self, group: Sequence[_Pending]) -> None:
        if len(group) == 1:
            self._send(group[0])
            return
        combined = [
            list(itertools.chain.from_iterable(p.columns[i] for p in group))
            for i in range(len(group[0].columns))
        ]
        try:
            self._insert(combined)
        except Exception as exc:  # handed to each waiting caller
            if not self._retry_alone(exc):
                for pending in group:
                    pending.error = exc
                return
            for pending in group:
                self._send(pending)

    def _send(self, pending: _Pending) -> None:
        try:
            self._insert(pending.columns)
        except Exception as exc:
            pending.error = exc
