"""Ingest: normalize rows (SDK or OTLP), drop content unless retained, price, store as one batch.

What refuses a batch (HTTP 400, nothing stored) is what the upstream server refuses: a body that is not
an object, an unknown ``schema_version``, ``rows`` missing, empty or too long, ``meta`` not an object, or
a row that is not an object. A row holding a value the rules cannot read (a negative token count, a
timestamp that is none, a cost that is not a finite non-negative amount, an unusable import identity) is
ignored and counted in ``ignored``, as outcome rows are: the batch's other rows are stored. Rows that
carry an import identity (``import_source``, ``import_source_scope``, ``import_event_id``) already stored
in the workspace are accepted and not stored again (``import_events.py``). Accepted rows, their content
and the batch record commit in one transaction before the 202 goes out. On the embedded engine the
rollups are folded from the committed calls afterwards (``SqliteCallStore.fold_rollups``: in the
background, and by any read of a rollup before it reads); on ClickHouse, materialized views maintain
them as part of the INSERT.

A batch is normalized column by column, not row by row: each field is read from every row at once and
checked with C-level passes (its set of types, an empty string, the longest string), and only a column
holding an unusual value goes value by value through the checking helpers. The stored values and the
refusal messages are those of the row-by-row rules (``tests/metergraph/test_ingest_columns.py`` compares
them with the previous row-by-row code), and so are the rows they ignore.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import operator
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import orjson

from triptych.metergraph import histogram
from triptych.metergraph.call_model import CallBatch, Content
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.errors import BadBatch
from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.pricing import Pricer

SCHEMA_VERSIONS = (1,)
_MAX_TEXT = 512  # identifiers (route, model, ids, ...) are cut to this many characters
_STR_FIELDS = (
    "route", "provider", "model", "endpoint", "request_id", "status", "status_code", "finish_reason",
    "error_type", "session_id", "conversation_id", "trace_id", "span_id", "parent_span_id", "trace_name",
    "template_hash", "unit_name", "func", "module", "sdk", "sdk_version", "runtime", "environment", "operation",
    "gateway", "reported_cost_source",  # who reported a cost, and the field it was read from (pricing.py)
)  # fmt: skip
_INT_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens",
)  # fmt: skip
_FLOAT_FIELDS = ("latency_ms", "ttft_ms", "unit_count")
_IMPORT_FIELDS = ("import_source", "import_source_scope", "import_event_id")
_MAX_IMPORT_TEXT = 512  # an import identity part, after stripping: as the relay validates it
# A cost in USD: a JSON number or a decimal string (the relay sends gateway amounts as strings so no
# binary rounding happens on the way). Plain decimal notation with an optional exponent, as
# ``str(Decimal)`` writes it; no sign, no spaces, no NaN or infinity.
_COST_TEXT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_COST_TEXTS = re.compile(rf"(?:(?:{_COST_TEXT.pattern})\n)*(?:{_COST_TEXT.pattern})")  # a joined column
_MAX_COST_CHARS = 64
MAX_COST_USD = 1_000_000  # per call: a larger amount is a unit mistake (cents, micro-dollars), not a cost
_NONE = type(None)
_ABSENT = {_NONE}
_get = dict.get


class _GcPause:
    """Automatic garbage collection paused while any batch is decoded, normalized and stored.

    A batch allocates tens of thousands of containers (a dict per row and per tags object, the column
    lists, the parameter tuples) that all stay alive until the batch is stored, so the cyclic collector
    runs dozens of times per batch, traverses them again and again and finds nothing: it cost about 30 µs
    a row in the server, a third of its CPU. Nothing a batch allocates is cyclic (JSON values, strings,
    numbers), so reference counting frees it all when the batch is done. The pause is shared by
    concurrent batches and collection resumes when the last one ends; if batches keep overlapping for
    longer than ``max_pause`` seconds, the batch ending then collects, so other requests' cyclic garbage
    cannot pile up under sustained ingest.
    """

    def __init__(self, max_pause: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._resume = False
        self._since = 0.0
        self.max_pause = max_pause

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._resume = gc.isenabled()
                self._since = time.monotonic()
                gc.disable()
            self._active += 1
        try:
            yield
        finally:
            overdue = False
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    if self._resume:
                        gc.enable()
                elif self._resume and time.monotonic() - self._since > self.max_pause:
                    overdue = True
                    self._since = time.monotonic()
            if overdue:
                gc.collect()


gc_paused = _GcPause()


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    ignored: int


def parse_ts(value: Any, index: int) -> int:
    """Epoch milliseconds from an ISO 8601 string or epoch seconds/milliseconds."""
    if isinstance(value, bool):
        raise BadBatch(f"rows[{index}].ts is not a timestamp")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise BadBatch(f"rows[{index}].ts is not a timestamp")
        seconds = value / 1000 if value > 1e11 else value
        return int(seconds * 1000)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadBatch(f"rows[{index}].ts is not an ISO 8601 timestamp") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return int(parsed.timestamp() * 1000)
    raise BadBatch(f"rows[{index}].ts is missing or not a timestamp")


def _opt_str(value: Any, name: str, index: int) -> str | None:
    if value is None:
        return None
    if type(value) is str:  # the common case, first
        return value[:_MAX_TEXT] if value else None
    if isinstance(value, bool | dict | list):
        raise BadBatch(f"rows[{index}].{name} must be a string")
    text = str(value)
    return text[:_MAX_TEXT] if text != "" else None


def _opt_int(value: Any, name: str, index: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
        raise BadBatch(f"rows[{index}].{name} must be a non-negative integer")
    return int(value)


def _opt_float(value: Any, name: str, index: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadBatch(f"rows[{index}].{name} must be a number")
    return float(value)


def parse_cost(value: Any, name: str, index: int) -> float | None:
    """A cost in USD from a JSON number or a decimal string: finite, non-negative, at most
    ``MAX_COST_USD``. A string is read with ``Decimal`` (never through a float) and rounded once, to the
    nearest double, which is what the cost columns hold."""
    if value is None:
        return None
    if type(value) is str:
        if len(value) > _MAX_COST_CHARS or _COST_TEXT.fullmatch(value) is None:
            raise BadBatch(f"rows[{index}].{name} must be a non-negative decimal amount")
        amount = Decimal(value)
        if amount > MAX_COST_USD:
            raise BadBatch(f"rows[{index}].{name} is more than {MAX_COST_USD} USD")
        return float(amount)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadBatch(f"rows[{index}].{name} must be a number or a decimal string")
    if not (math.isfinite(value) and 0 <= value <= MAX_COST_USD):
        raise BadBatch(f"rows[{index}].{name} must be a finite amount from 0 to {MAX_COST_USD} USD")
    return float(value)


def _import_part(value: Any, name: str, index: int) -> str:
    if type(value) is not str:
        raise BadBatch(f"rows[{index}].{name} must be a string")
    text = value.strip()
    if not 0 < len(text) <= _MAX_IMPORT_TEXT:
        raise BadBatch(f"rows[{index}].{name} must have 1 to {_MAX_IMPORT_TEXT} characters")
    return text


def clean_environment(value: str | None) -> str | None:
    """NULL, empty and whitespace-only environments are untagged (stored as NULL)."""
    if value is None or not value.strip():
        return None
    return value


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _Faults:
    """The rows holding a value the rules refuse (their positions in the kept rows): they are ignored."""

    def __init__(self, indexes: Sequence[int]) -> None:
        self.indexes = indexes  # position in the kept rows -> index in the document
        self.bad: set[int] = set()

    def checked(self, values: Sequence[Any], name: str, check: Callable[[Any, str, int], Any]) -> list[Any]:
        """``check`` applied to every value; None where it refuses (and that row marked bad)."""
        out: list[Any] = []
        for position, (index, value) in enumerate(zip(self.indexes, values, strict=True)):
            try:
                out.append(check(value, name, index))
            except BadBatch:
                self.bad.add(position)
                out.append(None)
        return out


# Every field a row is read for, in one pass per row: touching each row dict once keeps it in the CPU
# cache (a pass per field over a batch of 5,000 dicts ran about 40% slower on this machine).
_READ = (
    "ts", *_STR_FIELDS, *_INT_FIELDS, *_FLOAT_FIELDS, "tags", "metadata", "reported_cost_usd", "cost_usd",
    "error", "tool_names", "tool_calls", "stream", "batch", "request_json", "response_text", *_IMPORT_FIELDS,
)  # fmt: skip


def _fields(rows: Sequence[dict[str, Any]], sent: set[str]) -> dict[str, list[Any]]:
    """The ``_READ`` fields of every row, one list per field (None where a row lacks the field).

    Only the fields some row sends (``sent``) are read (a row carries about 15 of the 50), and when
    every row sends all of them they are read with one ``itemgetter`` call per row, in C.
    """
    n = len(rows)
    names = [name for name in _READ if name in sent]
    out = {name: [None] * n for name in _READ if name not in sent}
    if len(names) < 2:
        out.update({name: [row.get(name) for row in rows] for name in names})
        return out
    try:
        per_row = list(map(operator.itemgetter(*names), rows))
    except KeyError:  # some row lacks one of them
        per_row = [tuple(map(row.get, names)) for row in rows]
    out.update(zip(names, map(list, zip(*per_row, strict=True)), strict=True))
    return out


def _str_column(values: list[Any], name: str, faults: _Faults) -> list[Any]:
    types = set(map(type, values))
    if types <= {str, _NONE}:
        if types == _ABSENT:
            return values  # most optional fields: no row sends them
        if "" not in values and max(map(len, filter(None, values)), default=0) <= _MAX_TEXT:
            return values  # what the row-by-row rules keep as it is: None or a string of 1..512
    return faults.checked(values, name, _opt_str)


def _int_column(values: list[Any], name: str, faults: _Faults) -> list[Any]:
    types = set(map(type, values))
    # filter(None) drops None and 0; a negative integer is truthy, so min() sees it.
    if types <= {int, _NONE} and min(filter(None, values), default=0) >= 0:
        return values
    return faults.checked(values, name, _opt_int)


def _float_column(values: list[Any], name: str, faults: _Faults) -> list[Any]:
    types = set(map(type, values))
    # A non-finite sum means a NaN, an infinity or an overflow: the slow path tells them apart.
    if types <= {float, _NONE} and math.isfinite(sum(filter(None, values))):
        return values
    return faults.checked(values, name, _opt_float)


def _with_fallback(
    rows: Sequence[dict[str, Any]], values: list[Any], name: str, fallbacks: list[Any], fallback: str
) -> list[Any]:
    """``row.get(name, row.get(fallback))`` for every row: the fallback only where ``name`` is absent."""
    if None in values and fallbacks.count(None) != len(fallbacks):
        for i, (row, value) in enumerate(zip(rows, values, strict=True)):
            if value is None and name not in row:
                values[i] = row.get(fallback)
    return values


def _tags_column(tags: list[Any], faults: _Faults) -> list[str | None]:
    """Tags as compact JSON, non-ASCII kept (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``).

    orjson writes exactly that for string keys and values, several times faster; anything else (numbers,
    nested values, lone surrogates) keeps the standard library's spelling.
    """
    if not set(map(type, tags)) <= {dict, _NONE}:
        bad = {i for i, t in enumerate(tags) if t is not None and not isinstance(t, dict)}
        faults.bad |= bad
        # dict subclasses (in-process callers) kept; a row with tags that are not an object is ignored
        return [None if i in bad or not t else _tags_json(t) for i, t in enumerate(tags)]
    filled = [t for t in tags if t]
    keys = set(map(type, itertools.chain.from_iterable(filled)))
    values = set(map(type, itertools.chain.from_iterable(map(dict.values, filled))))
    if keys <= {str} and values <= {str}:
        try:
            dumps = orjson.dumps
            return [dumps(t).decode() if t else None for t in tags]
        except orjson.JSONEncodeError:
            pass  # a lone surrogate somewhere: row by row below
    return [_tags_json(t) if t else None for t in tags]


def _tags_json(tags: dict[str, Any]) -> str:
    if all(type(k) is str and type(v) is str for k, v in tags.items()):
        try:
            return orjson.dumps(tags).decode()
        except orjson.JSONEncodeError:
            pass
    return json.dumps(tags, ensure_ascii=False, separators=(",", ":"))


def _cost_column(values: list[Any], faults: _Faults) -> list[float | None]:
    """``parse_cost`` over a column. Plain floats in range (the SDKs' costs) are checked in C, and so are
    decimal strings (the relay's): one regular-expression pass over the column joined by newlines, then
    ``float(Decimal(s))`` for each. Correct rounding is monotonic, so a double below the bound means a
    decimal below it; anything else goes value by value."""
    types = set(map(type, values))
    if types <= {float, _NONE}:
        present = [v for v in values if v is not None]
        total = sum(present)  # a NaN, an infinity or an overflow makes it non-finite
        if (
            math.isfinite(total)
            and min(present, default=0.0) >= 0
            and max(present, default=0.0) <= MAX_COST_USD
        ):
            return values
    elif types <= {str, _NONE}:
        texts = [v for v in values if v is not None]
        joined = "\n".join(texts)
        if (
            max(map(len, texts)) <= _MAX_COST_CHARS
            and joined.count("\n") == len(texts) - 1  # no value holds a newline of its own
            and _COST_TEXTS.fullmatch(joined)
        ):
            amounts = list(map(float, map(Decimal, texts)))
            if max(amounts) < MAX_COST_USD:
                if len(texts) == len(values):
                    return amounts  # type: ignore[return-value]  # list[float] is a list[float | None]
                it = iter(amounts)
                return [None if v is None else next(it) for v in values]
    return faults.checked(values, "cost", parse_cost)


def _import_keys(
    fields: dict[str, list[Any]], sent: set[str], faults: _Faults, n: int
) -> list[ImportKey | None] | None:
    """Each row's import identity: all three parts or none; a partial or unusable one is a fault."""
    if sent.isdisjoint(_IMPORT_FIELDS):
        return None
    keys: list[ImportKey | None] = []
    for position, parts in enumerate(zip(*(fields[name] for name in _IMPORT_FIELDS), strict=True)):
        if parts == (None, None, None):
            keys.append(None)
            continue
        index = faults.indexes[position]
        try:
            source, scope, event = (
                _import_part(v, name, index) for v, name in zip(parts, _IMPORT_FIELDS, strict=True)
            )
        except BadBatch:
            faults.bad.add(position)
            keys.append(None)
            continue
        keys.append(ImportKey(source, scope, event))
    return keys if any(k is not None for k in keys) else None


def _flags(values: list[Any]) -> list[int | None]:
    """SDK booleans (``stream``, ``batch``) as 0/1, None kept."""
    if not values or set(map(type, values)) == {_NONE}:
        return values
    return [None if v is None else int(bool(v)) for v in values]


@dataclass
class _Checked:
    columns: dict[str, list[Any]]
    fields: dict[str, list[Any]]
    reported: list[Any]
    keys: list[ImportKey | None] | None
    faults: _Faults


@dataclass
class Normalized:
    calls: CallBatch
    contents: list[Content | None]
    ignored: int
    content_dropped: int
    import_keys: list[ImportKey | None] | None = None  # None: no row carries an import identity


class IngestService:
    def __init__(
        self,
        calls: CallStore,
        metadata: MetadataStore,
        pricer: Pricer,
        max_rows: int,
        clock: Callable[[], float] = time.time,
        on_batch: Callable[[str, int | None], None] | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.calls = calls
        self.metadata = metadata
        # Told (workspace, newest call time) after each stored batch: the incident detectors' cue.
        self.on_batch = on_batch
        # Told the workspace of each refused batch: the detectors count them as ingestion failures.
        self.on_refused = on_refused
        self.pricer = pricer
        self.max_rows = max_rows
        self.clock = clock

    def ingest_document(self, app: AppPrincipal, document: Any) -> IngestResult:
        """``POST /v1/ingest``: ``{"schema_version": 1, "rows": [...], "meta": {...}}``."""
        if not isinstance(document, dict):
            raise BadBatch("the body must be a JSON object with a rows array")
        version = document.get("schema_version", 1)
        if version not in SCHEMA_VERSIONS or isinstance(version, bool):
            raise BadBatch("unknown schema_version: this server accepts 1")
        rows = document.get("rows")
        if not isinstance(rows, list) or not rows:
            raise BadBatch("rows must be a non-empty array")
        if len(rows) > self.max_rows:
            raise BadBatch(f"too many rows: at most {self.max_rows} per batch")
        meta = document.get("meta") or {}
        if not isinstance(meta, dict):
            raise BadBatch("meta must be an object")
        return self.ingest_rows(app, rows, "sdk", meta=meta)

    def ingest_rows(
        self,
        app: AppPrincipal,
        rows: Sequence[Any],
        source: str,
        meta: Mapping[str, Any] | None = None,
        unknown_attributes: int = 0,
    ) -> IngestResult:
        received_ms = int(self.clock() * 1000)
        workspace = self.metadata.workspace(app.workspace)
        retain = bool(workspace and workspace["retain_content"])
        meta = meta or {}
        with gc_paused():  # already paused when the HTTP door decoded the body: the pause nests
            normalized = self.normalize(app, rows, source, retain)
            batch = {
                "received_ms": received_ms,
                "processed_ms": int(self.clock() * 1000),
                "ignored": normalized.ignored,
                "dropped": _meta_int(meta.get("dropped")),
                "transport_errors": _meta_int(meta.get("transport_errors")),
                "unknown_attributes": unknown_attributes,
                "content_dropped": normalized.content_dropped,
            }
            self.calls.insert_batch(
                app.workspace,
                source,
                normalized.calls,
                normalized.contents,
                batch,
                datetime.now(UTC).isoformat(timespec="seconds"),
                normalized.import_keys,
            )
            if self.on_batch is not None and normalized.calls.size:
                self.on_batch(app.workspace, max(normalized.calls.column("ts_ms")))
            return IngestResult(normalized.calls.size, normalized.ignored)

    def refuse(self, app: AppPrincipal, source: str) -> None:
        """A batch refused whole (``BadBatch``) is a permanent ingestion failure of its workspace:
        recorded for ``metergraph_get_ingestion_health``, and told to the incident detectors."""
        self.metadata.record_failed_batch(app.workspace, source, int(self.clock() * 1000), "permanent")
        if self.on_refused is not None:
            self.on_refused(app.workspace)

    def normalize(self, app: AppPrincipal, rows: Sequence[Any], source: str, retain: bool) -> Normalized:
        """The batch's calls as stored columns, the rows with a refused value left out (ignored); BadBatch
        when the batch itself is refused (a row that is not an object)."""
        kept, indexes = self._kept_rows(rows)
        checked = self._checked_columns(kept, indexes)
        if checked.faults.bad:
            # Rare: read the good rows again, so every column is built over them only.
            bad = checked.faults.bad
            indexes = [index for i, index in enumerate(indexes) if i not in bad]
            kept = [row for i, row in enumerate(kept) if i not in bad]
            checked = self._checked_columns(kept, indexes)
        columns, fields, reported, import_keys = (
            checked.columns,
            checked.fields,
            checked.reported,
            checked.keys,
        )
        n = len(kept)
        columns["lat_bucket"] = histogram.buckets_of(columns["latency_ms"])
        errors = fields["error"]
        status_error = {s: s is not None and s.lower() == "error" for s in set(columns["status"])}
        columns["error"] = [
            int(bool(e) or code == "error" or status_error[s])
            for e, code, s in zip(errors, columns["status_code"], columns["status"], strict=True)
        ]
        if str in set(map(type, errors)):
            error_type = columns["error_type"] = list(columns["error_type"])
            for i, e in enumerate(errors):
                if isinstance(e, str) and not error_type[i]:
                    error_type[i] = e[:_MAX_TEXT]
        tool_names = fields["tool_names"]
        columns["tool_names"] = (
            tool_names
            if tool_names.count(None) == n
            else [json.dumps(t) if isinstance(t, list) else None for t in tool_names]
        )
        tool_calls = fields["tool_calls"]
        no_tool_calls = tool_calls.count(None) == n
        columns["tool_call_count"] = (
            tool_calls if no_tool_calls else [len(t) if isinstance(t, list) else None for t in tool_calls]
        )
        columns["stream"] = _flags(fields["stream"])
        columns["batch"] = _flags(fields["batch"])
        # The catalogue price, the charged cost and their provenance (pricing.py).
        columns.update(self.pricer.price_columns(columns, reported).stored())
        columns["reported_cost_usd"] = reported

        contents, content_dropped = self._contents(
            kept,
            fields["request_json"],
            fields["response_text"],
            None if no_tool_calls else tool_calls,
            retain,
        )
        columns["has_content"] = (
            [0 if c is None else 1 for c in contents] if contents.count(None) != n else [0] * n
        )
        constants = {"workspace": app.workspace, "app": app.app, "source": source}
        return Normalized(
            CallBatch(n, constants, columns), contents, len(rows) - n, content_dropped, import_keys
        )

    @staticmethod
    def _checked_columns(kept: list[dict[str, Any]], indexes: Sequence[int]) -> _Checked:
        """The checked columns of ``kept``, the reported costs, the import keys and the faults."""
        n = len(kept)
        faults = _Faults(indexes)
        columns: dict[str, list[Any]] = {}
        sent = set().union(*kept)  # a field no row sends is all None: nothing to check
        fields = _fields(kept, sent)
        ts = fields["ts"]
        if set(map(type, ts)) <= {str, int, float}:
            columns["ts_ms"] = IngestService._timestamps(ts, indexes, faults)
        else:
            columns["ts_ms"] = faults.checked(ts, "ts", parse_ts_checked)
        for name in _STR_FIELDS:
            columns[name] = _str_column(fields[name], name, faults) if name in sent else fields[name]
        env = columns["environment"]
        blank = {v for v in set(env) if v is not None and clean_environment(v) is None}
        if blank:
            columns["environment"] = [None if v in blank else v for v in env]
        for name in _INT_FIELDS:
            columns[name] = _int_column(fields[name], name, faults) if name in sent else fields[name]
        for name in _FLOAT_FIELDS:
            columns[name] = _float_column(fields[name], name, faults) if name in sent else fields[name]
        columns["tags"] = _tags_column(
            _with_fallback(kept, fields["tags"], "tags", fields["metadata"], "metadata"), faults
        )
        reported = _with_fallback(
            kept, fields["reported_cost_usd"], "reported_cost_usd", fields["cost_usd"], "cost_usd"
        )
        if reported.count(None) != n:
            reported = _cost_column(reported, faults)
        return _Checked(columns, fields, reported, _import_keys(fields, sent, faults, n), faults)

    @staticmethod
    def _kept_rows(rows: Sequence[Any]) -> tuple[list[dict[str, Any]], Sequence[int]]:
        """The rows to store (outcomes are ignored) and their indexes in the document; BadBatch for a row
        that is not an object (the upstream server refuses such a batch whole)."""
        if set(map(type, rows)) == {dict} and "outcome" not in map(
            _get, rows, itertools.repeat("event_type")
        ):
            return list(rows), range(len(rows))
        kept, found = [], []
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadBatch(f"rows[{index}] must be an object")
            if row.get("event_type") == "outcome":
                continue
            kept.append(row)
            found.append(index)
        return kept, found

    @staticmethod
    def _timestamps(values: list[Any], indexes: Sequence[int], faults: _Faults) -> list[int]:
        if set(map(type, values)) == {str}:
            fast = _iso_utc_ms(values)
            if fast is not None:
                return fast
        fromisoformat = datetime.fromisoformat
        out: list[int] = []
        for index, value in zip(indexes, values, strict=True):
            if type(value) is str:
                try:
                    parsed = fromisoformat(value.replace("Z", "+00:00"))
                except ValueError:
                    faults.bad.add(len(out))
                    out.append(0)
                    continue
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=UTC)
                out.append(int(parsed.timestamp() * 1000))
            else:
                try:
                    out.append(parse_ts(value, index))
                except BadBatch:
                    faults.bad.add(len(out))
                    out.append(0)
        return out

    @staticmethod
    def _contents(
        rows: Sequence[dict[str, Any]],
        request: list[Any],
        response: list[Any],
        tool_calls: list[Any] | None,
        retain: bool,
    ) -> tuple[list[Content | None], int]:
        """Each row's prompt/response content, None where there is none or it is dropped."""
        contents: list[Content | None] = [None] * len(rows)
        if (
            request.count(None) == len(rows)
            and response.count(None) == len(rows)
            and (tool_calls is None or not any(isinstance(t, list) and t for t in tool_calls))
        ):
            return contents, 0
        tool_calls = tool_calls or [None] * len(rows)
        dropped = 0
        for i, row in enumerate(rows):
            content = _content_of(request[i], response[i], tool_calls[i])
            if content is not None and not (retain and row.get("content_opted_in", True) is not False):
                dropped += 1
                content = None
            contents[i] = content
        return contents, dropped


# UTC ISO 8601 timestamps in canonical shapes ('YYYY-MM-DDTHH:MM:SS' and 0, 3 or 6 fraction digits, then
# the column's one suffix: '+00:00', 'Z' or nothing): by length, the NumPy unit that prints them back.
_ISO_UNITS: dict[int, Literal["s", "ms", "us"]] = {19: "s", 23: "ms", 26: "us"}
_ISO_SUFFIXES = ("+00:00", "Z", "")
_YEAR_ONE = np.datetime64("0001-01-01T00:00:00", "us")


def _iso_utc_ms(values: list[str]) -> list[int] | None:
    """``int(datetime.fromisoformat(v).timestamp() * 1000)`` for each of a column of UTC timestamps in
    canonical shapes, parsed and converted in C; None when the column is not so (the row-by-row rules then
    decide, refusals included).

    Only values that NumPy prints back exactly as sent are taken (its parser accepts a few forms
    ``fromisoformat`` refuses, such as year 0). The milliseconds are computed as ``timestamp()`` does:
    microseconds since the epoch divided by 10**6 in float64 (exact below 2**53 µs, about year 2255),
    times 1000, truncated.
    """
    if max(map(len, values)) > 32:
        return None
    column = np.array(values)
    if int(np.strings.str_len(column).sum()) != sum(map(len, values)):
        return None  # NumPy's strings drop trailing NULs, which ``fromisoformat`` may refuse
    for suffix in _ISO_SUFFIXES:
        if not suffix or np.strings.endswith(column, suffix).all():
            break
    body = np.strings.slice(column, 0, -len(suffix)) if suffix else column
    lengths = np.strings.str_len(body)
    shapes = np.unique(lengths).tolist()  # Python's isoformat() leaves out a zero fraction
    if not set(shapes) <= _ISO_UNITS.keys():
        return None
    try:
        parsed = body.astype("datetime64[us]")
    except ValueError:
        return None
    if (parsed < _YEAR_ONE).any():
        return None
    for length in shapes:
        same = lengths == length
        if not (np.datetime_as_string(parsed[same], unit=_ISO_UNITS[length]) == body[same]).all():
            return None
    us = parsed.astype(np.int64)
    if (np.abs(us) >= 2**53).any():
        return None  # float64 no longer holds the microseconds exactly (before ~1685, after ~2255)
    ms: list[int] = (us / 1e6 * 1000).astype(np.int64).tolist()
    return ms


def parse_ts_checked(value: Any, name: str, index: int) -> int:
    return parse_ts(value, index)


def _content_of(request_json: Any, response_text: Any, tool_calls: Any) -> Content | None:
    request = _as_text(request_json)
    response = _as_text(response_text)
    tools = _as_text(tool_calls) if isinstance(tool_calls, list) and tool_calls else None
    if request is None and response is None and tools is None:
        return None
    return Content(request, response, tools)


def _meta_int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
