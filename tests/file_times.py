"""The longest test files first: how the suite's xdist workers finish together (docs/decisions/0233).

Under ``--dist loadfile`` a worker takes whole files from one queue. xdist orders that queue by the number
of tests per file, so the slow files with one or two tests (a wheel installed into a fresh venv, a sync
against a broken source, kill -9 of a delivery) came last, and the other worker sat idle while one ran
them. The queue is ordered here by each file's measured seconds instead, longest first (the LPT rule),
from ``file_seconds.json`` beside this module, which a whole run refreshes when asked:

    TRIPTYCH_TEST_TIMES=tests/file_seconds.json python3 tasks.py test

A file the table does not know yet counts as the median file.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from statistics import median

import pytest

TABLE = Path(__file__).with_name("file_seconds.json")
RECORD = "TRIPTYCH_TEST_TIMES"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: whole files, the longest first; each file's own order is kept (pytest's
    grouping by parametrized fixtures within it included)."""
    try:
        seconds: dict[str, float] = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return
    usual = median(seconds.values()) if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(file_of(item.nodeid), usual))


class Recorder:
    """Sums each file's setup, call and teardown seconds over a run and writes them to ``path`` at the end
    (in the process that sees every report: the xdist controller, or the only process)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        # A run of some files updates theirs; files since removed drop out.
        try:
            table: dict[str, float] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            table = {}
        table.update({name: round(value, 1) for name, value in self.seconds.items()})
        root = Path(__file__).resolve().parent.parent
        kept = {name: table[name] for name in sorted(table) if (root / name).exists()}
        self.path.write_text(json.dumps(kept, indent=1) + "\n")


def configure(config: pytest.Config) -> None:
    path = os.environ.get(RECORD)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(Path(path)), "triptych-file-times")
