"""Progress bars on stderr for the CLI's long jobs: stdout keeps only what the command did."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class TableBars:
    """A ``core.transfer.Progress``: one bar per table, in turn. A table's bar closes when the next table
    starts, so a terminal shows one bar at a time (a copy of 32 tables once drew 32 bars over each other,
    with the summary inside one); ``close()`` closes the last. The counts are in the summary the command
    prints after, so a finished bar leaves no line behind."""

    def __init__(self) -> None:
        self._bar: Any = None
        self.tables = 0

    def __call__(self, table: str, total: int) -> Callable[[int], None]:
        from tqdm import tqdm  # imported on use: `triptych --help` stays quick

        self.close()
        self.tables += 1
        self._bar = tqdm(
            total=total,
            unit="row",
            desc=f"copying {table} (table {self.tables})",
            file=sys.stderr,
            leave=False,
        )
        update: Callable[[int], None] = self._bar.update
        return update

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class ImportBar:
    """``kb import``'s progress (a ``metronix.importer.ImportProgress``): one bar over the files' bytes, in
    which a long file advances as its chunks are embedded, the file being read, and the chunks a second.
    (Counting files alone, a 3 MB changelog held the bar at "7/626" for five minutes.)"""

    def __init__(self) -> None:
        self._bar: Any = None
        self._size = 0
        self._credited = 0  # bytes of the current file already shown
        self._file_chunks = 0  # chunks of the current file already counted
        self.embedded = 0  # chunks embedded by the whole import
        self.started = time.monotonic()
        self._name = ""

    def start(self, files: int, total_bytes: int) -> None:
        from tqdm import tqdm  # imported on use: `triptych --help` stays quick

        self.started = time.monotonic()
        self._bar = tqdm(
            total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
            desc=f"importing {files} file{'s' if files != 1 else ''}", dynamic_ncols=True,
        )  # fmt: skip

    def file(self, path: Path, size: int) -> None:
        self._size, self._credited, self._file_chunks = size, 0, 0
        self._show(path.name)

    def chunks(self, done: int, total: int) -> None:
        self.embedded += done - self._file_chunks
        self._file_chunks = done
        self._advance(self._size * done // max(total, 1))
        self._show(None)

    def done(self, path: Path) -> None:
        self._advance(self._size)

    def rate(self) -> float:
        """Chunks embedded a second since the start."""
        return self.embedded / max(time.monotonic() - self.started, 1e-9)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _advance(self, credited: int) -> None:
        if self._bar is not None and credited > self._credited:
            self._bar.update(credited - self._credited)
            self._credited = credited

    def _show(self, name: str | None) -> None:
        if self._bar is None:
            return
        if name is not None:
            self._name = name if len(name) <= 40 else name[:18] + "…" + name[-21:]
        # A new file is drawn at once (a long one may take minutes); chunk reports wait for tqdm's interval.
        self._bar.set_postfix_str(f"{self._name}, {self.rate():.1f} chunks/s", refresh=name is not None)
