"""A columnar projection of the ``calls`` table: what metadata aggregates scan.

SQLite stays the system of record (rows are durable there before the 202); this is derived data that
can be rebuilt from it at any time. Per workspace it keeps one array per column, in call-id order:
``ts_ms``; route, provider, model, environment and status as ids into append-only string dictionaries
(id 0 is NULL); the measures ``aggregate_raw`` sums; and one posting per (call, tag key) with the value's
id in the tag-value dictionary, or -1 for a value that is not a string. A missing key has no posting.

It catches up from ``calls`` by id: the watermark is the highest call id projected. Ids only grow
(SQLite assigns them inside the one write transaction at a time, and calls are never deleted), so the
rows after the watermark are exactly the ones not projected yet. Catch-up runs before every read (a read
never misses a committed row), and in a background thread once per ``interval`` in the server.

On disk (``metergraph.columns/`` beside ``metergraph.db``)::

    LOCK              flock'ed by the one process that maintains and reads the projection
    state.json        the watermark and, per workspace, its directory and the length of each file
    <n>/<column>.bin  one little-endian array per column, appended to
    <n>/<dict>.jsonl  one JSON string per line per dictionary

``state.json`` is replaced (atomically) after the appends it counts are synced, so on open a file longer
than the state says ends in a torn append and is truncated to it; a shorter one (writes lost) or a
watermark row that no longer exists in ``calls`` (another database) means a full rebuild.

Only the process holding ``LOCK`` (normally the server) uses the projection; another process on the
same data directory (the CLI, a second server) gets ``None`` from :meth:`ColumnProjection.aggregate`,
and the store answers it with the SQL scan.

``close`` stops the background catch-up, which ends after its batch, waiting at most ``stop_wait``
seconds (decision 0450). A catch-up still at work after that keeps what it uses: the lock, the files and
its connection to the calls (the close returns the thread, so the database's owner leaves that open). It
writes its state and lets go of ``LOCK`` itself when it ends.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from triptych.core.partitions import STOP_WAIT
from triptych.metergraph.call_model import ELIGIBLE_CHARS, PROJECTED_FIELDS, AggRow, CallFilter
from triptych.metergraph.column_scan import (
    COST_CLASSES,
    INELIGIBLE,
    MISSING,
    NO_BUCKET,
    OTHER_COST,
    VALUE_BASE,
    WEIGHTS,
    Snapshot,
    aggregate,
)

log = logging.getLogger(__name__)

FORMAT = 1
_F = {name: i for i, name in enumerate(PROJECTED_FIELDS)}  # the columns read from ``calls``, by position
KEY_COLUMNS = ("route", "provider", "model", "environment", "status")
ROW_COLUMNS: dict[str, np.dtype[Any]] = {
    "ts_ms": np.dtype("<i8"),
    **{name: np.dtype("<i4") for name in KEY_COLUMNS},
    "flags": np.dtype("u1"),
    "bucket": np.dtype("u1"),
    **{name: np.dtype("<f8") for name in WEIGHTS},
}
POSTING_COLUMNS: dict[str, np.dtype[Any]] = {
    "p_row": np.dtype("<i8"),
    "p_key": np.dtype("<i4"),
    "p_value": np.dtype("<i4"),
}
DICTIONARIES = (*KEY_COLUMNS, "tag_key", "tag_value")

# Keys whose dense codes (4 bytes a call) stay in memory between reads.
TAG_CACHE_KEYS = 8
SEEN_TAGS = 100_000  # distinct tags documents remembered while projecting
NOT_STRING = -1  # a posting's value that is not a string


def eligible(value: str) -> bool:
    """A metadata value groups under its own name when it has at most 1,000 characters, counted the way
    SQLite's length() counts them (up to the first NUL), so both read paths agree."""
    nul = value.find("\0")
    return (nul if nul >= 0 else len(value)) <= ELIGIBLE_CHARS


class CallSource(Protocol):
    """What the projection reads from the system of record."""

    def calls_after(self, after_id: int, limit: int) -> list[tuple[Any, ...]]: ...
    def max_call_id(self) -> int: ...
    def call_ts(self, call_id: int) -> int | None: ...


class _Column:
    """A growable array: appends fill spare capacity, so a view of the first n values stays valid."""

    def __init__(self, dtype: np.dtype[Any], initial: npt.NDArray[Any] | None = None) -> None:
        self.n = 0 if initial is None else len(initial)
        self.data: npt.NDArray[Any] = np.empty(max(1024, self.n), dtype=dtype)
        if initial is not None:
            self.data[: self.n] = initial
        self.persisted = self.n

    def append(self, values: npt.NDArray[Any]) -> None:
        end = self.n + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, len(self.data) * 2), dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown  # a reader's view of the old buffer stays intact
        self.data[self.n : end] = values
        self.n = end

    def view(self) -> npt.NDArray[Any]:
        return self.data[: self.n]


class _Dictionary:
    """Append-only strings; id 0 is NULL."""

    def __init__(self, values: list[str] | None = None) -> None:
        self.values: list[str | None] = [None, *(values or [])]
        self.ids: dict[str | None, int] = {v: i for i, v in enumerate(self.values)}
        self.persisted = len(self.values)
        self.bytes = 0

    def encode(self, value: str | None) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found

    def encode_all(self, values: Sequence[str | None]) -> npt.NDArray[np.int32]:
        get = self.ids.get
        found = [get(v) for v in values]  # a lookup per call; new strings are rare
        if None in found:
            found = [self.encode(v) if i is None else i for v, i in zip(values, found, strict=True)]
        return np.array(found, dtype=np.int32)


def _floats(values: Sequence[Any]) -> npt.NDArray[np.float64]:
    return np.array(values, dtype=np.float64)  # None -> NaN


def _parse_tags(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)  # NaN, Infinity: the standard library's spellings


class _Workspace:
    def __init__(self, directory: Path, state: dict[str, Any] | None) -> None:
        self.directory = directory
        self.rows: dict[str, _Column] = {}
        self.postings: dict[str, _Column] = {}
        self.dicts: dict[str, _Dictionary] = {}
        directory.mkdir(parents=True, exist_ok=True)
        if state is None:  # a new workspace: any file here is from a crash before its first state
            for path in directory.iterdir():
                path.unlink()
            state = {"rows": 0, "postings": 0, "dicts": {}}
        for name, dtype in ROW_COLUMNS.items():
            self.rows[name] = _Column(dtype, self._load_array(name, dtype, state["rows"]))
        for name, dtype in POSTING_COLUMNS.items():
            self.postings[name] = _Column(dtype, self._load_array(name, dtype, state["postings"]))
        for name in DICTIONARIES:
            count, size = state["dicts"].get(name, [0, 0])
            self.dicts[name] = self._load_dict(name, count, size)
        self.eligible = _Column(
            np.dtype(np.bool_),
            np.fromiter((v is not None and eligible(v) for v in self.dicts["tag_value"].values), np.bool_),
        )
        self.tag_cache: dict[int, tuple[_Column, int]] = {}  # key id -> (tag codes, postings covered)
        # Tags documents repeat (a prompt id and a team, say): parse each distinct one once.
        self.seen_tags: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        # Cheap pruning: a window covering every call needs no time mask, and a measure no call has
        # (reasoning tokens, say) needs no pass.
        ts = self.rows["ts_ms"].view()
        self.ts_range = (int(ts.min()), int(ts.max())) if len(ts) else (0, -1)
        self.nonzero = {name for name in WEIGHTS if np.any(self.rows[name].view())}

    # -- files ----------------------------------------------------------------------------------

    def _load_array(self, name: str, dtype: np.dtype[Any], count: int) -> npt.NDArray[Any]:
        path = self.directory / f"{name}.bin"
        expected = count * dtype.itemsize
        size = path.stat().st_size if path.exists() else 0
        if size < expected:
            raise _Corrupt(f"{path.name} is shorter than the state says")
        if size > expected:
            os.truncate(path, expected)  # a torn append past the last state
        return np.fromfile(path, dtype=dtype, count=count) if count else np.empty(0, dtype)

    def _load_dict(self, name: str, count: int, size: int) -> _Dictionary:
        path = self.directory / f"{name}.jsonl"
        data = path.read_bytes() if path.exists() else b""
        if len(data) < size:
            raise _Corrupt(f"{path.name} is shorter than the state says")
        if len(data) > size:
            os.truncate(path, size)
        lines = data[:size].splitlines()
        if len(lines) != count:
            raise _Corrupt(f"{path.name} does not hold the strings the state counts")
        found = _Dictionary([orjson.loads(line) for line in lines])
        found.bytes = size
        return found

    def flush(self) -> dict[str, Any]:
        """Append what is not on disk yet (synced); returns this workspace's state entry."""
        for name, column in (*self.rows.items(), *self.postings.items()):
            self._append_file(f"{name}.bin", column.data[column.persisted : column.n].tobytes())
            column.persisted = column.n
        for name, d in self.dicts.items():
            new = b"".join(orjson.dumps(v) + b"\n" for v in d.values[d.persisted :])
            self._append_file(f"{name}.jsonl", new)
            d.persisted = len(d.values)
            d.bytes += len(new)
        return {
            "dir": self.directory.name,
            "rows": self.rows["ts_ms"].n,
            "postings": self.postings["p_row"].n,
            "dicts": {name: [len(d.values) - 1, d.bytes] for name, d in self.dicts.items()},
        }

    def _append_file(self, name: str, data: bytes) -> None:
        with open(self.directory / name, "ab") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    # -- appends --------------------------------------------------------------------------------

    def append(self, calls: Sequence[tuple[Any, ...]]) -> None:
        cols = list(zip(*calls, strict=True))
        base = self.rows["ts_ms"].n
        new: dict[str, npt.NDArray[Any]] = {"ts_ms": np.array(cols[_F["ts_ms"]], dtype=np.int64)}
        for name in KEY_COLUMNS:
            new[name] = self.dicts[name].encode_all(cols[_F[name]])
        latency = _floats(cols[_F["latency_ms"]])
        has_latency = ~np.isnan(latency)
        for name in WEIGHTS:
            values = latency if name == "latency_ms" else _floats(cols[_F[name]])
            new[name] = np.nan_to_num(values, nan=0.0, posinf=np.inf, neginf=-np.inf)
        bucket = _floats(cols[_F["lat_bucket"]])
        new["bucket"] = np.where(np.isnan(bucket), NO_BUCKET, bucket).astype(np.uint8)
        classify = COST_CLASSES.get
        cost = np.array([classify(s, OTHER_COST) for s in cols[_F["cost_status"]]], dtype=np.uint8)
        # Ingest stores error and cost_unknown as 0 or 1.
        error = (np.array(cols[_F["error"]], dtype=np.int64) != 0).astype(np.uint8)
        unknown = (np.array(cols[_F["cost_unknown"]], dtype=np.int64) != 0).astype(np.uint8)
        new["flags"] = error | (has_latency.astype(np.uint8) << 1) | (unknown << 2) | (cost << 3)
        for name, column in self.rows.items():
            column.append(new[name])
        low, high = int(new["ts_ms"].min()), int(new["ts_ms"].max())
        if self.ts_range[0] <= self.ts_range[1]:
            low, high = min(low, self.ts_range[0]), max(high, self.ts_range[1])
        self.ts_range = (low, high)
        self.nonzero.update(name for name in WEIGHTS if np.any(new[name]))
        tag_values = self.dicts["tag_value"]
        known_values = len(tag_values.values)
        rows: list[int] = []
        counts: list[int] = []
        p_key: list[int] = []
        p_value: list[int] = []
        seen = self.seen_tags
        for i, text in enumerate(cols[_F["tags"]]):
            if not text:
                continue
            pairs = seen.get(text)
            if pairs is None:
                if len(seen) >= SEEN_TAGS:
                    seen.clear()  # unbounded tag cardinality (a request id): keep the memory bounded
                pairs = seen[text] = self._postings_of(text)
            if pairs[0]:
                rows.append(i)
                counts.append(len(pairs[0]))
                p_key.extend(pairs[0])
                p_value.extend(pairs[1])
        self.postings["p_row"].append(np.repeat(np.array(rows, dtype=np.int64) + base, counts))
        self.postings["p_key"].append(np.array(p_key, dtype=np.int32))
        self.postings["p_value"].append(np.array(p_value, dtype=np.int32))
        self.eligible.append(
            np.fromiter((eligible(v) for v in tag_values.values[known_values:] if v is not None), np.bool_)
        )

    def _postings_of(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(key ids, value ids) of one tags document; a value that is not a string is NOT_STRING."""
        tags = _parse_tags(text)
        if not isinstance(tags, dict) or not tags:
            return (), ()
        tag_keys, tag_values = self.dicts["tag_key"], self.dicts["tag_value"]
        return (
            tuple(tag_keys.encode(k) for k in tags),
            tuple(tag_values.encode(v) if type(v) is str else NOT_STRING for v in tags.values()),
        )

    # -- reads ----------------------------------------------------------------------------------

    def tag_codes(self, key: str) -> npt.NDArray[np.int32]:
        """Per call: MISSING, INELIGIBLE or VALUE_BASE + the value's id. Kept for the last few keys read
        and extended incrementally. A filter value (at most 1,000 characters) can only equal an eligible
        string, so the same codes serve filters and grouping."""
        rows = self.rows["ts_ms"].n
        key_id = self.dicts["tag_key"].ids.get(key)
        if key_id is None:
            return np.full(rows, MISSING, dtype=np.int32)
        dense, covered = self.tag_cache.get(key_id, (_Column(np.dtype(np.int32)), 0))
        if dense.n < rows:
            dense.append(np.full(rows - dense.n, MISSING, dtype=np.int32))
        total = self.postings["p_key"].n
        if covered < total:
            hits = np.flatnonzero(self.postings["p_key"].data[covered:total] == key_id) + covered
            values = self.postings["p_value"].data[hits]
            usable = np.zeros(len(values), dtype=np.bool_)
            strings = values != NOT_STRING
            usable[strings] = self.eligible.data[values[strings]]
            dense.data[self.postings["p_row"].data[hits]] = np.where(usable, values + VALUE_BASE, INELIGIBLE)
        self.tag_cache.pop(key_id, None)
        self.tag_cache[key_id] = (dense, total)  # most recently used last
        while len(self.tag_cache) > TAG_CACHE_KEYS:
            del self.tag_cache[next(iter(self.tag_cache))]
        return dense.view()

    def snapshot(self, keys: Sequence[str]) -> Snapshot:
        return Snapshot(
            columns={name: column.view() for name, column in self.rows.items()},
            dicts={name: d.values for name, d in self.dicts.items()},
            ids={name: d.ids for name, d in self.dicts.items()},
            sizes={name: len(d.values) for name, d in self.dicts.items()},
            tags={key: self.tag_codes(key) for key in dict.fromkeys(keys)},
            ts_range=self.ts_range,
            nonzero=frozenset(self.nonzero),
        )


class _Corrupt(Exception):
    """The files on disk do not match their state: rebuild from the calls."""


class ColumnProjection:
    """The projection of every workspace's calls, kept up to date from ``source`` (see module doc)."""

    def __init__(
        self,
        directory: Path,
        source: CallSource,
        interval: float = 1.0,
        read_catch_up_limit: int = 100_000,
        chunk: int = 50_000,
        persist_every: float = 5.0,
        stop_wait: float = STOP_WAIT,
    ) -> None:
        self.directory = directory
        self.source = source
        self.interval = interval
        # A read catches up at most this many calls itself; further behind (a first build, a restart
        # after a bulk load), it starts the background catch-up and the SQL scan answers meanwhile.
        self.read_catch_up_limit = read_catch_up_limit
        self.chunk = chunk
        # Syncing the files costs milliseconds under the lock; the projection is derived, so a crash
        # only means catching up the last few seconds again.
        self.persist_every = persist_every
        self.watermark = 0
        self.watermark_ts = 0
        self._workspaces: dict[str, _Workspace] = {}
        self._lock = threading.Lock()
        self._lock_file: Any = None
        self._state: str = "closed"  # closed | owner | foreign
        self._dirty = False
        self._persisted_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stop_wait = stop_wait  # how long ``close`` waits for the catch-up's batch
        # Between a close that gave up waiting and the catch-up's end: which of them lets go of the files.
        self._handoff = threading.Lock()
        self._running = False
        self._release_on_exit = False

    # -- lifecycle ------------------------------------------------------------------------------

    def _open_locked(self) -> bool:
        """Take ownership and load the files once; False when another process owns them."""
        if self._state == "closed":
            self.directory.mkdir(parents=True, exist_ok=True)
            lock_file = open(self.directory / "LOCK", "a+b")  # noqa: SIM115 (held until close)
            try:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock_file.close()
                self._state = "foreign"
                log.info("metergraph columns: %s is owned by another process; SQL scans", self.directory)
                return False
            self._lock_file = lock_file
            try:
                self._load()
            except (_Corrupt, OSError, ValueError, KeyError) as exc:
                log.warning("metergraph columns: rebuilding from the calls (%s)", exc)
                self._reset()
            self._state = "owner"
        return self._state == "owner"

    def _load(self) -> None:
        path = self.directory / "state.json"
        if not path.exists():
            self._reset()
            return
        state = json.loads(path.read_text())
        if state.get("format") != FORMAT:
            raise _Corrupt("another format")
        watermark = int(state["watermark"])
        if watermark and self.source.call_ts(watermark) != state["watermark_ts"]:
            raise _Corrupt("the watermark call is not in this database")
        known = {entry["dir"] for entry in state["workspaces"].values()}
        for child in self.directory.iterdir():
            if child.is_dir() and child.name not in known:
                shutil.rmtree(child)  # a workspace whose first state was never written
        self._workspaces = {
            name: _Workspace(self.directory / entry["dir"], entry)
            for name, entry in state["workspaces"].items()
        }
        self.watermark, self.watermark_ts = watermark, int(state["watermark_ts"])

    def _reset(self) -> None:
        for child in self.directory.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
        (self.directory / "state.json").unlink(missing_ok=True)
        self._workspaces = {}
        self.watermark = self.watermark_ts = 0

    def start(self) -> None:
        """Catch up in a background thread every ``interval`` seconds (the server calls this)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metergraph-columns", daemon=True)
            self._running = True
            self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    self.catch_up()
                except Exception:  # keep the thread alive: reads fall back to SQL when it lags
                    log.exception("metergraph columns: catch-up failed")
                if self._stop.wait(self.interval):
                    return
        finally:
            with self._handoff:
                self._running = False
                release = self._release_on_exit
            if release:  # the close left the files to this thread, which has no caller to raise to
                try:
                    self._release()
                except Exception:
                    log.exception("metergraph columns: writing the state after a late catch-up failed")

    def close(self) -> list[threading.Thread]:
        """Stop the background catch-up (bounded by ``stop_wait``), then write the state and let go of the
        files. Returns the catch-up's thread if it is still at work (normally nothing): it may be inside a
        query, so its connection must be left open, and it lets go of the files when it ends."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(self.stop_wait)
            with self._handoff:
                if self._running:
                    self._release_on_exit = True
                    log.warning(
                        "metergraph columns: the catch-up in %s did not end within %.0f s of the close;"
                        " it keeps the projection's files until it ends",
                        thread.name,
                        self.stop_wait,
                    )
                    return [thread]
            self._thread = None
        self._release()
        return []

    def _release(self) -> None:
        with self._lock:
            if self._state == "owner":
                if self._dirty:
                    self._persist_locked()
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
                self._lock_file.close()
            self._workspaces = {}
            self._state = "closed"

    # -- catch-up -------------------------------------------------------------------------------

    def catch_up(self, progress: Callable[[int], None] | None = None) -> int:
        """Project every committed call after the watermark, a chunk per lock hold; returns how many.

        A long catch-up (a first build) logs its progress every million calls and syncs its files
        every few chunks, so a crash loses little of it.
        """
        done = 0
        started = time.monotonic()
        next_report = 1_000_000
        while True:
            with self._lock:
                if not self._open_locked():
                    return done
                added = self._catch_up_locked(self.chunk)
                done += added
                if self._dirty and time.monotonic() - self._persisted_at >= self.persist_every:
                    self._persist_locked()
            if done >= next_report:
                rate = done / max(time.monotonic() - started, 1e-9)
                log.info("metergraph columns: projected %d calls (%.0f calls/s)", done, rate)
                if progress is not None:
                    progress(done)
                next_report += 1_000_000
            if added < self.chunk or self._stop.is_set():  # stopped: the rest waits for the next start
                return done

    def _catch_up_locked(self, limit: int | None = None) -> int:
        done = 0
        while limit is None or done < limit:
            calls = self.source.calls_after(self.watermark, self.chunk)
            if not calls:
                break
            by_workspace: dict[str, list[tuple[Any, ...]]] = {}
            for call in calls:
                by_workspace.setdefault(call[1], []).append(call)
            for name, rows in by_workspace.items():
                self._workspace(name).append(rows)
            self.watermark, self.watermark_ts = calls[-1][0], calls[-1][2]
            self._dirty = True
            done += len(calls)
            if len(calls) < self.chunk:
                break
        return done

    def _workspace(self, name: str) -> _Workspace:
        found = self._workspaces.get(name)
        if found is None:
            used = {w.directory.name for w in self._workspaces.values()}
            index = next(str(i) for i in range(len(used) + 1) if str(i) not in used)
            found = self._workspaces[name] = _Workspace(self.directory / index, None)
        return found

    def _persist_locked(self) -> None:
        state = {
            "format": FORMAT,
            "watermark": self.watermark,
            "watermark_ts": self.watermark_ts,
            "workspaces": {name: w.flush() for name, w in self._workspaces.items()},
        }
        tmp = self.directory / "state.json.tmp"
        with open(tmp, "w") as out:
            json.dump(state, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.directory / "state.json")
        self._dirty = False
        self._persisted_at = time.monotonic()

    # -- reads ----------------------------------------------------------------------------------

    def aggregate(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow] | None:
        """What ``aggregate_raw`` answers, from the columns; None when the SQL scan must answer (another
        process owns the projection, it is far behind, or the filter has a trace or request id)."""
        if f.request_id is not None or f.trace_id is not None:
            return None
        with self._lock:  # while the background thread loads the files (seconds), a read waits for them
            if not self._open_locked():
                return None
            if self.source.max_call_id() - self.watermark > self.read_catch_up_limit:
                self.start()
                return None
            self._catch_up_locked()
            workspace = self._workspaces.get(f.workspace)
            if workspace is None:
                return {}
            keys = [k for k, _ in f.metadata] + ([meta_key] if meta_key is not None else [])
            snap = workspace.snapshot(keys)
        return aggregate(snap, f, dims, meta_key)

    def flush(self) -> None:
        """Write what is not on disk yet."""
        with self._lock:
            if self._state == "owner" and self._dirty:
                self._persist_locked()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "state": self._state,
                "watermark": self.watermark,
                "calls": {name: w.rows["ts_ms"].n for name, w in self._workspaces.items()},
            }
