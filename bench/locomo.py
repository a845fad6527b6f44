"""LoCoMo agent-memory benchmark: recall@1/5/10 of MCP ``memory_search`` and memory latency.

Phases (each timed; long ones show progress on stderr):
  1. ``mcp``: a real ``triptych serve`` subprocess (free port, temp ``--data-dir``). Every LoCoMo turn is
     stored as a memory, one agent per conversation (``locomo-conv-<i>``), the turn's ``dia_id`` in
     metadata. One workspace per content format (``locomo-plain``: ``"{speaker}: {text}"``,
     ``locomo-dated``: ``"[{session date}] {speaker}: {text}"``, ...). The headline format is stored
     turn by turn with ``memory_store`` (every call timed, with a trivial ``metronix_status`` call
     interleaved to measure the bare round trip); the others with ``memory_batch_store``. Then every
     question of categories 1-4 goes through ``memory_search`` (its conversation's agent, top_k 10,
     ``status ["all"]`` so that freshness filings never hide evidence; the headline format also with
     the default status ``["active"]``). Server-side search latency is the response's ``latency_ms``.
  2. ``bm25``: the baseline in this process: SQLite FTS5 (porter unicode61) over the same turns, one
     table per conversation, OR of ``triptych.core.search.keyword_terms``; scored the same way.
  3. ``experiments``: in this process, a ``MemoryService`` over a temp database loaded with the same
     turns (vectors from an embedding cache outside the repo), and a re-implementation of
     ``MemoryService._rank`` with knobs (first-stage pool, fused candidates, RRF k and weights, graph
     weight and entity IDF, dense pseudo-relevance feedback, neighbour-turn smoothing), checked to
     reproduce the service's own ranking at the default knobs. Each variant's recall is measured.
  4. ``scale``: latency in this process and through a server: ``memory_store`` (embedding + insert +
     freshness checks, broken down) and ``memory_search`` (broken down) at LoCoMo size (one
     conversation, ~600 records per agent) and at 10,000 records for one agent (LoCoMo turns
     recombined into distinct texts).

Scoring: a question's evidence is its ``evidence`` dia_ids (malformed ids such as ``D8:6; D9:17`` are
split and repaired; ids that name no turn are dropped; a question with no valid id is skipped).
``full@k`` (headline): the question counts 1 only when all its evidence turns are in the top k;
``frac@k``: the fraction of its evidence turns in the top k. Both are averaged per category and
over categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5 adversarial is skipped).
A stored text identical to an earlier one of the same agent dedups to that record; the record then
stands for both dia_ids.

Run from the repository root:  .venv/bin/python bench/locomo.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# As ``triptych serve`` does (cli.main): one BLAS thread, set before numpy loads, so that the
# in-process timings match the server's.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import log, progress, summary  # noqa: E402

from triptych.core.auth import local_principal  # noqa: E402
from triptych.core.db import Database  # noqa: E402
from triptych.core.embed import LOCAL_MODEL_DIM, LOCAL_MODEL_NAME, LocalEmbedder, quantized_model  # noqa: E402
from triptych.core.search import VectorIndex, keyword_terms, rrf  # noqa: E402
from triptych.metronix.attributes import Visibility  # noqa: E402
from triptych.metronix.entities import extract_entities  # noqa: E402
from triptych.metronix.memory import MemoryService, MemorySettings  # noqa: E402
from triptych.metronix.memory_store import SqliteMemoryStore  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(
    os.environ.get("TRIPTYCH_LOCOMO", REPO.parent / "shared" / "data" / "locomo" / "locomo10.json")
)
DEFAULT_OUT = Path("/tmp/triptych-bench/locomo.json")
DEFAULT_CACHE = common.CACHE_DIR / "locomo"
TOP_K = 10
KS = (1, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
PRINCIPAL = local_principal()


# -- data ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    conv: int
    dia_id: str
    session: int
    speaker: str
    text: str
    date: str  # the session's date, e.g. "8 May, 2023"
    caption: str | None
    prev: str | None  # the previous turn of the same session, "speaker: text"


@dataclass(frozen=True, slots=True)
class Question:
    idx: int
    conv: int
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Locomo:
    turns: list[list[Turn]]  # per conversation, in order
    questions: list[Question]
    skipped: dict[str, int] = field(default_factory=dict)
    repaired: list[tuple[int, str, list[str]]] = field(default_factory=list)


FORMATS: dict[str, Callable[[Turn], str]] = {
    "plain": lambda t: f"{t.speaker}: {t.text}",
    "dated": lambda t: f"[{t.date}] {t.speaker}: {t.text}",
    "caption": lambda t: (
        f"{t.speaker}: {t.text}" + (f" [shares a photo of {t.caption}]" if t.caption else "")
    ),
    "context": lambda t: (f"({t.prev})\n" if t.prev else "") + f"{t.speaker}: {t.text}",
    "dated_context": lambda t: (
        f"[{t.date}] " + (f"({t.prev})\n" if t.prev else "") + f"{t.speaker}: {t.text}"
    ),
}


def _repair(raw: str) -> list[str]:
    """Evidence ids as written ("D8:6; D9:17", "D:11:26", "D30:05") -> canonical "D<s>:<t>" ids."""
    out = []
    for part in re.split(r"[;,\s]+", raw.strip()):
        m = re.fullmatch(r"D:?(\d+):0*(\d+)", part)
        if m:
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def load_locomo(path: Path, conversations: int | None = None) -> Locomo:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if conversations is not None:
        raw = raw[:conversations]
    turns: list[list[Turn]] = []
    questions: list[Question] = []
    skipped = {"category_5": 0, "no_valid_evidence": 0}
    repaired: list[tuple[int, str, list[str]]] = []
    for ci, sample in enumerate(raw):
        conv = sample["conversation"]
        rows: list[Turn] = []
        sessions = sorted((int(m.group(1)), k) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        for number, key in sessions:
            date = conv.get(f"{key}_date_time", "").split(" on ", 1)[-1].strip()
            prev = None
            for t in conv[key]:
                text = (t.get("text") or "").strip()
                row = Turn(ci, t["dia_id"], number, t["speaker"], text, date, t.get("blip_caption"), prev)
                rows.append(row)
                prev = f"{t['speaker']}: {text}"
        turns.append(rows)
        known = {t.dia_id for t in rows}
        for q in sample["qa"]:
            if q["category"] == 5:
                skipped["category_5"] += 1
                continue
            evidence: list[str] = []
            for e in q.get("evidence") or []:
                fixed = _repair(e)
                if fixed != [e]:
                    repaired.append((ci, e, fixed))
                evidence.extend(x for x in fixed if x in known)
            evidence = list(dict.fromkeys(evidence))
            if not evidence:
                skipped["no_valid_evidence"] += 1
                continue
            questions.append(Question(len(questions), ci, q["question"], int(q["category"]), tuple(evidence)))
    return Locomo(turns, questions, skipped, repaired)


def quick_subset(data: Locomo, per_conv: int, seed: int = 7) -> Locomo:
    rng = random.Random(seed)
    keep: list[Question] = []
    for ci in range(len(data.turns)):
        qs = [q for q in data.questions if q.conv == ci]
        keep.extend(sorted(rng.sample(qs, min(per_conv, len(qs))), key=lambda q: q.idx))
    return Locomo(data.turns, [replace(q, idx=i) for i, q in enumerate(keep)], data.skipped, data.repaired)


# -- scoring -----------------------------------------------------------------------------------------

Ranked = list[list[set[str]]]  # per question: the dia_ids each result (in rank order) stands for


def recall_table(questions: Sequence[Question], ranked: Ranked) -> dict[str, Any]:
    groups: dict[str, list[int]] = {"overall": list(range(len(questions)))}
    for i, q in enumerate(questions):
        groups.setdefault(f"cat{q.category}", []).append(i)
    table: dict[str, Any] = {}
    for name in ["overall"] + [f"cat{c}" for c in CATEGORIES if f"cat{c}" in groups]:
        idx = groups[name]
        row: dict[str, Any] = {"n": len(idx)}
        for k in KS:
            full = frac = 0.0
            for i in idx:
                ev = set(questions[i].evidence)
                got: set[str] = set().union(*ranked[i][:k]) if ranked[i] else set()
                hit = len(ev & got)
                full += hit == len(ev)
                frac += hit / len(ev)
            row[f"full@{k}"] = round(full / max(len(idx), 1), 4)
            row[f"frac@{k}"] = round(frac / max(len(idx), 1), 4)
        table[name] = row
    return table


def evidence_ranks(questions: Sequence[Question], ranked: Ranked) -> list[list[int | None]]:
    out = []
    for q, results in zip(questions, ranked, strict=True):
        ranks: list[int | None] = []
        for e in q.evidence:
            ranks.append(next((r + 1 for r, ids in enumerate(results) if e in ids), None))
        out.append(ranks)
    return out


# -- embedding cache ---------------------------------------------------------------------------------


class CachedEmbedder:
    """The bundled model behind an on-disk cache (same name and dimension as ``LocalEmbedder``)."""

    name = LOCAL_MODEL_NAME
    dim = LOCAL_MODEL_DIM

    def __init__(self, cache: common.EmbeddingCache, real: Any) -> None:
        self.cache = cache
        self.real = real
        self.misses = 0

    def warm_up(self) -> None:
        self.real.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if not self.cache.has(t)]
        if missing:
            self.misses += len(missing)
            if len(missing) > 200:
                return self.cache.get(texts, self.real, desc="embedding")
            self.cache.add(missing, self.real.embed(missing))
        return self.cache.get(texts)


# -- phase 1: MCP ------------------------------------------------------------------------------------


def agent_of(conv: int) -> str:
    return f"locomo-conv-{conv}"


def workspace_of(fmt: str) -> str:
    return f"locomo-{fmt}"


def _metadata(t: Turn) -> dict[str, Any]:
    return {"dia_id": t.dia_id, "session": t.session, "session_date": t.date, "speaker": t.speaker}


async def mcp_store(
    client: Any, data: Locomo, fmt: str, single: int, status_every: int = 10
) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """Store every turn: the first ``single`` turns one by one with ``memory_store`` (each timed), the
    rest with ``memory_batch_store``; returns record id -> dia_ids and the store figures."""
    ws = workspace_of(fmt)
    render = FORMATS[fmt]
    ids: dict[str, set[str]] = {}
    rtts: list[float] = []
    batch_rtts: list[float] = []
    status_rtts: list[float] = []
    deduped = errors = 0
    total = sum(len(t) for t in data.turns)
    started = time.perf_counter()
    done = 0
    with progress(total=total, desc=f"store {fmt}", unit="turn") as bar:
        for ci, all_turns in enumerate(data.turns):
            agent = agent_of(ci)
            k = max(0, min(len(all_turns), single - done))
            done += len(all_turns)
            if k:
                for n, t in enumerate(all_turns[:k]):
                    payload, rtt = await common.call_json(
                        client,
                        "memory_store",
                        {
                            "content": render(t),
                            "agent_id": agent,
                            "workspace_id": ws,
                            "source_type": "locomo",
                            "metadata": _metadata(t),
                        },
                    )
                    rtts.append(rtt)
                    ids.setdefault(payload["id"], set()).add(t.dia_id)
                    deduped += bool(payload.get("deduped"))
                    if n % status_every == 0:
                        _, srtt = await common.call_json(client, "metronix_status", {"workspace_id": ws})
                        status_rtts.append(srtt)
                    bar.update(1)
            turns = all_turns[k:]
            if turns:
                for start in range(0, len(turns), 100):
                    part = turns[start : start + 100]
                    records = [{"content": render(t), "metadata": _metadata(t)} for t in part]
                    payload, rtt = await common.call_json(
                        client,
                        "memory_batch_store",
                        {"records": records, "agent_id": agent, "workspace_id": ws, "source_type": "locomo"},
                    )
                    batch_rtts.append(rtt / len(part))
                    for t, r in zip(part, payload["results"], strict=True):
                        if r.get("error"):
                            errors += 1
                            continue
                        ids.setdefault(r["id"], set()).add(t.dia_id)
                    deduped += int(payload.get("deduped", 0))
                    bar.update(len(part))
    seconds = time.perf_counter() - started
    figures: dict[str, Any] = {
        "tool": f"memory_store for the first {min(single, total)} turns, memory_batch_store for the rest",
        "turns": total,
        "memory_store_calls": len(rtts),
        "records": len(ids),
        "deduped": deduped,
        "errors": errors,
        "seconds": round(seconds, 1),
        "turns_per_s": round(total / seconds, 1),
        "client_rtt_ms": summary(rtts),
        "batch_client_rtt_per_record_ms": summary(batch_rtts),
    }
    if rtts and status_rtts:
        base = float(np.median(status_rtts))
        figures["status_rtt_ms"] = summary(status_rtts)
        figures["server_side_estimate_ms"] = summary([max(r - base, 0.0) for r in rtts])
        figures["server_side_estimate_note"] = (
            "client round trip of each memory_store minus the median round trip of metronix_status "
            f"(interleaved every {status_every} stores)"
        )
    return ids, figures


async def mcp_search(
    client: Any,
    data: Locomo,
    fmt: str,
    ids: dict[str, set[str]],
    status: list[str] | None,
    desc: str,
) -> tuple[Ranked, dict[str, Any]]:
    ws = workspace_of(fmt)
    ranked: Ranked = []
    server_ms: list[float] = []
    rtts: list[float] = []
    for q in progress(data.questions, desc=desc, unit="q"):
        args: dict[str, Any] = {
            "query": q.text,
            "agent_id": agent_of(q.conv),
            "workspace_id": ws,
            "top_k": TOP_K,
        }
        if status is not None:
            args["status"] = status
        payload, rtt = await common.call_json(client, "memory_search", args)
        rtts.append(rtt)
        server_ms.append(float(payload["latency_ms"]))
        row = []
        for r in payload["results"]:
            rec = r["record"]
            row.append(ids.get(rec["id"]) or {str(rec.get("metadata", {}).get("dia_id"))})
        ranked.append(row)
    return ranked, {"server_latency_ms": summary(server_ms), "client_rtt_ms": summary(rtts)}


async def mcp_census(client: Any, data: Locomo, fmt: str) -> dict[str, Any]:
    """What the freshness pipeline did during ingest: statuses and review entries."""
    ws = workspace_of(fmt)
    statuses: dict[str, int] = {}
    for status in ("active", "conflicted", "review_needed", "stale", "superseded", "archived", "candidate"):
        n = 0
        for ci in range(len(data.turns)):
            payload, _ = await common.call_json(
                client,
                "memory_list",
                {"agent_id": agent_of(ci), "workspace_id": ws, "status": [status], "limit": 1},
            )
            n += int(payload["total"])
        if n:
            statuses[status] = n
    reviews = {}
    for reason in ("possible_duplicate", "possible_contradiction", "low_confidence_decision"):
        payload, _ = await common.call_json(
            client, "memory_review_list", {"workspace_id": ws, "reason": reason, "limit": 3}
        )
        reviews[reason] = {"total": payload["total"], "examples": [e["content"] for e in payload["entries"]]}
    return {"statuses": statuses, "reviews": reviews}


async def mcp_phase(
    url: str, data: Locomo, formats: Sequence[str], headline: str, single_stores: int
) -> dict[str, Any]:
    from mcp import Client

    out: dict[str, Any] = {}
    async with Client(url + "/mcp") as client:
        for _ in range(20):  # warm the connection and the model
            await common.call_json(client, "metronix_status", {"workspace_id": workspace_of(headline)})
        for fmt in formats:
            single = single_stores if fmt == headline else 0
            ids, store_figures = await mcp_store(client, data, fmt, single)
            entry: dict[str, Any] = {"store": store_figures}
            ranked, lat = await mcp_search(client, data, fmt, ids, ["all"], f"search {fmt} status=all")
            entry["search_status_all"] = {"recall": recall_table(data.questions, ranked), **lat}
            entry["_ranked_all"] = ranked
            if fmt == headline:
                ranked_d, lat_d = await mcp_search(
                    client, data, fmt, ids, None, f"search {fmt} default status"
                )
                entry["search_status_default"] = {"recall": recall_table(data.questions, ranked_d), **lat_d}
            entry["freshness_census"] = await mcp_census(client, data, fmt)
            out[fmt] = entry
    return out


# -- phase 2: BM25 baseline ----------------------------------------------------------------------------


class ConversationBM25:
    """One in-memory FTS5 table per conversation (porter unicode61), OR of ``keyword_terms``."""

    def __init__(self, turns: Sequence[Turn], render: Callable[[Turn], str]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(
            "CREATE VIRTUAL TABLE t USING fts5(dia_id UNINDEXED, body, tokenize='porter unicode61')"
        )
        self.conn.executemany(
            "INSERT INTO t (dia_id, body) VALUES (?, ?)", ((x.dia_id, render(x)) for x in turns)
        )

    def search(self, query: str, k: int) -> list[str]:
        match = common.fts_or_query(query)
        if match is None:
            return []
        rows = self.conn.execute(
            "SELECT dia_id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match, k)
        ).fetchall()
        return [str(r[0]) for r in rows]


def bm25_phase(data: Locomo, fmt: str) -> tuple[Ranked, dict[str, Any]]:
    indexes = [ConversationBM25(turns, FORMATS[fmt]) for turns in data.turns]
    ranked: Ranked = []
    times = []
    for q in data.questions:
        t0 = time.perf_counter()
        hits = indexes[q.conv].search(q.text, TOP_K)
        times.append((time.perf_counter() - t0) * 1000)
        ranked.append([{h} for h in hits])
    return ranked, {"recall": recall_table(data.questions, ranked), "latency_ms": summary(times)}


# -- phase 3: in-process experiments -------------------------------------------------------------------


def open_service(path: Path, embedder: Any, settings: MemorySettings | None = None) -> MemoryService:
    db = Database(path, [])
    return MemoryService(SqliteMemoryStore(db, embedder.dim), embedder, settings)


def load_turns(
    service: MemoryService, data: Locomo, render: Callable[[Turn], str], workspace: str, desc: str
) -> dict[int, dict[int, set[str]]]:
    """Store all turns through ``batch_store`` (skipped for an agent that already has records: a reused
    --work-dir); returns per conversation: record seq -> dia_ids (a deduped text stands for all its turns)."""
    seq_ids: dict[int, dict[int, set[str]]] = {}
    conn = service.store.db.conn
    total = sum(len(t) for t in data.turns)
    with progress(total=total, desc=desc, unit="turn") as bar:
        for ci, turns in enumerate(data.turns):
            agent = agent_of(ci)
            have = conn.execute(
                "SELECT count(*) FROM memory_records WHERE workspace_id = ? AND agent_id = ?",
                (workspace, agent),
            ).fetchone()[0]
            if not have:
                for start in range(0, len(turns), 100):
                    part = turns[start : start + 100]
                    service.batch_store(
                        PRINCIPAL,
                        workspace_id=workspace,
                        records=[{"content": render(t), "metadata": _metadata(t)} for t in part],
                        agent_id=agent,
                        source_type="locomo",
                    )
                    bar.update(len(part))
            else:
                bar.update(len(turns))
            by_content: dict[str, set[str]] = {}
            for t in turns:
                by_content.setdefault(render(t).strip(), set()).add(t.dia_id)
            rows = conn.execute(
                "SELECT seq, content FROM memory_records WHERE workspace_id = ? AND agent_id = ?",
                (workspace, agent),
            ).fetchall()
            seq_ids[ci] = {int(seq): by_content.get(content, set()) for seq, content in rows}
    return seq_ids


@dataclass(frozen=True)
class Knobs:
    """The ranking of ``MemoryService._rank`` with its constants exposed (defaults = src as it is)."""

    name: str = "src default"
    pool: int = 50  # first-stage depth of each list: max(50, top_k * 5)
    cand: int = 40  # fused candidates re-scored with the graph: max(top_k * 4, 20)
    rrf_k: int = 5
    w_dense: float = 1.0
    w_kw: float = 2.0
    dense_weight: float = 0.6
    graph_weight: float = 0.3
    graph_idf: bool = False  # weight query-entity overlap by IDF within the agent's records
    graph_hop: bool = True  # the 0.5 * one-hop-from-top-3 term
    prf: float = 0.0  # dense pseudo-relevance feedback: q' = q + prf * mean(top-3 fused vectors)
    kw_prf: int = 0  # keyword expansion: add up to this many terms shared by 2 of the top-3 fused records
    neighbours: float = 0.7  # add this share of the best adjacent record's first-stage score
    neighbour_window: int = 2
    neighbour_dir: str = "both"  # "both" | "next" (a record gains from the one stored before it) | "prev"
    scaled: bool = True  # divide the smoothed scores by 1 + neighbours (src: dense_score stays in [0, 1])


class Ranker:
    """``MemoryService._rank`` re-implemented over the same store with every constant a knob.

    First-stage lists are fetched once per question at the largest pool used and cut per variant (the
    store orders both lists deterministically, so a cut list equals a shallower query).
    """

    def __init__(
        self,
        service: MemoryService,
        workspace: str,
        data: Locomo,
        qvecs: dict[str, np.ndarray],
        depth: int = 400,
    ):
        self.service = service
        self.store = service.store
        self.workspace = workspace
        self.data = data
        self.qvecs = qvecs
        self.depth = depth
        self.views: dict[int, Visibility] = {}
        self.seqs: dict[int, list[int]] = {}
        self.entities: dict[int, set[str]] = {}
        self.links: dict[int, set[str]] = {}
        self.ids: dict[int, str] = {}
        self.created: dict[int, str] = {}
        self.order: dict[int, list[int]] = {}  # per conversation: seqs in insertion order
        self.pos: dict[int, dict[int, int]] = {}
        self.df: dict[int, dict[str, int]] = {}
        for ci in range(len(data.turns)):
            view = Visibility(workspace_id=workspace, agent_id=agent_of(ci), statuses=None)
            seqs = self.store.visible_seqs(view)
            self.views[ci], self.seqs[ci] = view, seqs
            self.entities.update(self.store.entities(seqs))
            self.links.update(self.store.links(seqs))
            recs = self.store.by_seqs(seqs)
            self.ids.update({s: r.id for s, r in recs.items()})
            self.created.update({s: r.created_at for s, r in recs.items()})
            self.order[ci] = sorted(seqs)
            self.pos[ci] = {x: i for i, x in enumerate(self.order[ci])}
            df: dict[str, int] = {}
            for s in seqs:
                for e in self.entities.get(s, ()):
                    df[e] = df.get(e, 0) + 1
            self.df[ci] = df
        self.keyword: dict[int, list[tuple[int, float]]] = {}
        self.dense: dict[int, list[tuple[int, float]]] = {}
        for q in progress(data.questions, desc=f"first stage ({workspace})", unit="q"):
            view = self.views[q.conv]
            self.keyword[q.idx] = self.store.keyword_search(view, q.text, depth)
            self.dense[q.idx] = self.store.dense_search(view, qvecs[q.text], depth)

    def rank(self, q: Question, k: Knobs, top_k: int = TOP_K) -> list[int]:
        keyword = self.keyword[q.idx][: k.pool]
        dense = self.dense[q.idx][: k.pool]
        first = rrf([[s for s, _ in dense], [s for s, _ in keyword]], [k.w_dense, k.w_kw], k.rrf_k)
        if k.prf > 0:
            top = sorted(first, key=lambda s: first[s], reverse=True)[:3]
            vecs = self.store.vectors(self.workspace, top)
            q2 = self.qvecs[q.text] + k.prf * np.mean([vecs[s] for s in top if s in vecs], axis=0)
            q2 = (q2 / np.linalg.norm(q2)).astype(np.float32)
            dense = self.store.dense_search(self.views[q.conv], q2, k.pool)
            first = rrf([[s for s, _ in dense], [s for s, _ in keyword]], [k.w_dense, k.w_kw], k.rrf_k)
        if k.kw_prf > 0:
            top = sorted(first, key=lambda s: first[s], reverse=True)[:3]
            have = set(keyword_terms(q.text))
            counts: dict[str, int] = {}
            for rec in self.store.by_seqs(top).values():
                for term in set(keyword_terms(rec.content)) - have:
                    counts[term] = counts.get(term, 0) + 1
            extra = [t for t, c in sorted(counts.items(), key=lambda x: -x[1]) if c >= 2][: k.kw_prf]
            if extra:
                keyword = self.store.keyword_search(
                    self.views[q.conv], q.text + " " + " ".join(extra), k.pool
                )
                first = rrf([[s for s, _ in dense], [s for s, _ in keyword]], [k.w_dense, k.w_kw], k.rrf_k)
        if k.neighbours > 0:
            first = self._smooth(q, first, k)
        candidates = sorted(first, key=lambda s: first[s], reverse=True)[: k.cand]
        graph = self._graph(q, candidates, k) if k.graph_weight else {}
        scored = [(k.dense_weight * first[s] + k.graph_weight * graph.get(s, 0.0), s) for s in candidates]
        # src breaks ties by importance (all 0.5 here) and created_at, then insertion order
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [s for _, s in scored[:top_k]]

    def _smooth(self, q: Question, first: dict[int, float], k: Knobs) -> dict[int, float]:
        """Conversation context: a record also scores ``k.neighbours`` times the best first-stage score of
        the records stored just before / after it by the same agent (its visible seqs, in order)."""
        order = self.order[q.conv]
        pos = self.pos[q.conv]
        ahead = 0 if k.neighbour_dir == "prev" else k.neighbour_window  # targets after the source
        behind = 0 if k.neighbour_dir == "next" else k.neighbour_window  # targets before it
        bonus: dict[int, float] = {}
        for s, score in first.items():
            i = pos[s]
            # s lends to records after it (they follow the matched turn: "next") and/or before it
            for j in range(i - behind, i + ahead + 1):
                if j != i and 0 <= j < len(order):
                    o = order[j]
                    bonus[o] = max(bonus.get(o, 0.0), score)
        out = dict(first)
        for o, b in bonus.items():
            out[o] = out.get(o, 0.0) + k.neighbours * b
        if k.scaled:
            out = {o: v / (1.0 + k.neighbours) for o, v in out.items()}
        return out

    def _graph(self, q: Question, candidates: list[int], k: Knobs) -> dict[int, float]:
        wanted = extract_entities(q.text)
        seeds = candidates[:3]
        seed_ids = {self.ids[s] for s in seeds}
        df = self.df[q.conv]
        n = max(len(self.seqs[q.conv]), 1)
        idf = {e: math.log(1 + n / (1 + df.get(e, 0))) for e in wanted} if k.graph_idf else {}
        scores: dict[int, float] = {}
        for s in candidates:
            own = self.entities.get(s, set())
            if not wanted:
                direct = 0.0
            elif k.graph_idf:
                direct = sum(idf[e] for e in wanted & own) / (sum(idf.values()) or 1.0)
            else:
                direct = len(wanted & own) / len(wanted)
            hop = 0.0
            if k.graph_hop:
                neighbours = [
                    o
                    for o in seeds
                    if o != s and (own & self.entities.get(o, set()) or self.links.get(s, set()) & seed_ids)
                ]
                hop = len(neighbours) / max(len([o for o in seeds if o != s]), 1)
            scores[s] = max(direct, 0.5 * hop)
        return scores

    def run(self, k: Knobs, seq_ids: dict[int, dict[int, set[str]]]) -> Ranked:
        return [[seq_ids[q.conv].get(s, set()) for s in self.rank(q, k)] for q in self.data.questions]


def check_ranker(
    service: MemoryService, ranker: Ranker, data: Locomo, workspace: str, n: int = 100
) -> dict[str, Any]:
    """Agreement of ``Ranker`` at the default knobs with ``MemoryService.search`` itself."""
    same = 0
    sample = data.questions[:: max(1, len(data.questions) // n)][:n]
    got_sets, mine_sets = [], []
    for q in sample:
        got = service.search(
            PRINCIPAL,
            workspace_id=workspace,
            query=q.text,
            agent_id=agent_of(q.conv),
            top_k=TOP_K,
            status=["all"],
        )
        ids = [r["record"]["id"] for r in got["results"]]
        mine = [ranker.ids[s] for s in ranker.rank(q, Knobs())]
        same += ids == mine
        got_sets.append([{i} for i in ids])
        mine_sets.append([{i} for i in mine])
    # the same top-10 sets, compared as recall of the service's own results (ties at the pool cut may
    # order equal BM25 scores differently between LIMIT 50 and the deeper fetch)
    overlap = sum(len(set().union(*g) & set().union(*m)) for g, m in zip(got_sets, mine_sets, strict=True))
    total = sum(len(g) for g in got_sets) or 1
    return {"questions": len(sample), "identical_top10": same, "top10_overlap": round(overlap / total, 4)}


PREVIOUS = Knobs(name="before: RRF k 60, keyword x1, no context", rrf_k=60, w_kw=1.0, neighbours=0.0)


def variants() -> list[Knobs]:
    """The ranking src had before, src's default, then one factor at a time from src's default."""
    d = Knobs()
    return [
        PREVIOUS,
        d,
        replace(d, name="context not rescaled (graph relatively weaker)", scaled=False),
        replace(d, name="no context", neighbours=0.0),
        replace(d, name="context 0.5", neighbours=0.5),
        replace(d, name="context 1.0", neighbours=1.0),
        replace(d, name="context from the turns before only", neighbour_dir="next"),
        replace(d, name="context window 1", neighbour_window=1),
        replace(d, name="context window 3", neighbour_window=3),
        replace(d, name="RRF k 10", rrf_k=10),
        replace(d, name="RRF k 20", rrf_k=20),
        replace(d, name="keyword x1", w_kw=1.0),
        replace(d, name="keyword x3", w_kw=3.0),
        replace(d, name="pool 200", pool=200),
        replace(d, name="candidates 100", cand=100),
        replace(d, name="graph weight 0 (first stage only)", graph_weight=0.0),
        replace(d, name="graph: IDF-weighted entity overlap", graph_idf=True),
        replace(d, name="graph: no one-hop term", graph_hop=False),
        replace(d, name="dense PRF 0.5 (query expansion)", prf=0.5),
        replace(d, name="keyword PRF +5 terms (query expansion)", kw_prf=5),
    ]


def embed_questions(cached: CachedEmbedder, data: Locomo) -> dict[str, np.ndarray]:
    texts = list(dict.fromkeys(q.text for q in data.questions))
    vecs = cached.embed(texts)
    return dict(zip(texts, vecs, strict=True))


def experiments_phase(
    data: Locomo, formats: Sequence[str], cached: CachedEmbedder, workdir: Path, extra: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {"formats": {}, "variants": {}, "ranker_check": {}}
    qvecs = embed_questions(cached, data)
    rankers: dict[str, tuple[Ranker, dict[int, dict[int, set[str]]]]] = {}
    for fmt in formats:
        t0 = time.perf_counter()
        ws = workspace_of(fmt)
        service = open_service(workdir / f"exp-{fmt}.db", cached)
        # Loading skips the freshness checks (they only set statuses, which status=all ignores, and are
        # timed in the scale phase); the checks are marked done so nothing stays queued.
        check = service.lifecycle._check
        service.lifecycle._check = lambda record, vector=None, found=None, svc=service: (
            svc.store.reviews.check_done(record.id)
        )  # type: ignore[method-assign]
        seq_ids = load_turns(service, data, FORMATS[fmt], ws, f"load {fmt} (in-process)")
        service.lifecycle._check = check  # type: ignore[method-assign]
        cached.cache.save()
        ranker = Ranker(service, ws, data, qvecs)
        out["ranker_check"][fmt] = check_ranker(service, ranker, data, ws)
        rankers[fmt] = (ranker, seq_ids)
        default = ranker.run(Knobs(), seq_ids)
        dense_only = [
            [seq_ids[q.conv].get(s, set()) for s, _ in ranker.dense[q.idx][:TOP_K]] for q in data.questions
        ]
        kw_only = [
            [seq_ids[q.conv].get(s, set()) for s, _ in ranker.keyword[q.idx][:TOP_K]] for q in data.questions
        ]
        out["formats"][fmt] = {
            "hybrid (src default)": recall_table(data.questions, default),
            "hybrid (ranking before)": recall_table(data.questions, ranker.run(PREVIOUS, seq_ids)),
            "dense only": recall_table(data.questions, dense_only),
            "store keyword only": recall_table(data.questions, kw_only),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        log(
            f"format {fmt}: hybrid full@10 {out['formats'][fmt]['hybrid (src default)']['overall']['full@10']}"
        )
    fmt0 = formats[0]
    ranker, seq_ids = rankers[fmt0]
    out["diagnosis"] = diagnose(ranker, seq_ids, data)
    out["freshness_replay"] = {}
    for fmt, (r, _) in rankers.items():
        out["freshness_replay"][fmt] = freshness_replay(r.service, data, workspace_of(fmt))
        log(f"freshness replay {fmt}: {out['freshness_replay'][fmt]['filings']}")
    todo = variants() if extra else [PREVIOUS, Knobs()]
    for k in progress(todo, desc=f"variants ({fmt0})", unit="variant"):
        out["variants"][k.name] = {
            "knobs": asdict(k),
            "recall": recall_table(data.questions, ranker.run(k, seq_ids)),
        }
    return out


def freshness_replay(service: MemoryService, data: Locomo, workspace: str) -> dict[str, Any]:
    """What the freshness pipeline files when the turns arrive in order: each record against the most
    similar earlier records of its agent (top 5 at cosine >= 0.5, as ``_freshness``; statuses ignored),
    with src's contradiction detector and two decision rules, both behind src's similarity margin: src's
    and the previous one (``contradictions.previous_decision_confidence``)."""
    from contradictions import previous_decision_confidence

    from triptych.metronix import memory as memory_module
    from triptych.metronix.freshness import decision_confidence, detect_contradiction, jaccard

    s = service.settings
    margin = getattr(memory_module, "DECISION_SIMILARITY_MARGIN", None)

    def src_rule(sim: float, lex: float) -> bool:
        near = margin is None or sim >= s.reconciler_threshold - margin
        return near and decision_confidence(sim, lex, s.reconciler_threshold) < s.decision_threshold

    def previous(sim: float, lex: float) -> bool:
        near = margin is None or sim >= s.reconciler_threshold - margin
        return near and previous_decision_confidence(sim, lex, s.reconciler_threshold) < s.decision_threshold

    rules: dict[str, Callable[[float, float], bool]] = {
        "src decision rule": src_rule,
        "previous decision rule (max of the signals)": previous,
    }
    counts: dict[str, int] = {}
    examples: list[list[str]] = []
    n = 0
    for ci in range(len(data.turns)):
        rows = service.store.db.conn.execute(
            "SELECT seq, content, embedding FROM memory_records WHERE workspace_id = ? AND agent_id = ? ORDER BY seq",
            (workspace, agent_of(ci)),
        ).fetchall()
        if len(rows) < 2:
            continue
        texts = [r[1] for r in rows]
        matrix = np.vstack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
        for i in range(1, len(rows)):
            n += 1
            sims = matrix[:i] @ matrix[i]
            top = [int(j) for j in np.argsort(-sims)[:5] if sims[j] >= s.contradiction_floor]
            if not top:
                continue
            hit = next((j for j in top if detect_contradiction(texts[j], texts[i]) is not None), None)
            if hit is not None:
                counts["possible_contradiction"] = counts.get("possible_contradiction", 0) + 1
                if len(examples) < 8:
                    examples.append([texts[hit], texts[i]])
                continue
            best = top[0]
            lexical = jaccard(texts[best], texts[i])
            if sims[best] >= s.reconciler_threshold and lexical >= 0.5:
                counts["possible_duplicate"] = counts.get("possible_duplicate", 0) + 1
                continue
            for name, rule in rules.items():
                if rule(float(sims[best]), lexical):
                    key = f"low_confidence_decision, {name}"
                    counts[key] = counts.get(key, 0) + 1
    rates = {k: f"{v} ({v / max(n, 1):.1%})" for k, v in counts.items()}
    return {"records_checked": n, "filings": rates, "contradiction_examples": examples}


def diagnose(ranker: Ranker, seq_ids: dict[int, dict[int, set[str]]], data: Locomo) -> dict[str, Any]:
    """Where evidence is lost: first-stage depth of each evidence turn in the dense and keyword lists."""
    buckets = {"dense": {}, "keyword": {}, "best_of_both": {}}  # type: dict[str, dict[str, int]]
    edges = (1, 5, 10, 20, 50, 100, 200, 400)

    def bucket(rank: int | None) -> str:
        if rank is None:
            return f">{edges[-1]}"
        for e in edges:
            if rank <= e:
                return f"<={e}"
        return f">{edges[-1]}"

    per_cat_missing: dict[int, int] = {}
    total = 0
    for q in data.questions:
        lists = {
            "dense": [seq_ids[q.conv].get(s, set()) for s, _ in ranker.dense[q.idx]],
            "keyword": [seq_ids[q.conv].get(s, set()) for s, _ in ranker.keyword[q.idx]],
        }
        for e in q.evidence:
            total += 1
            ranks = {}
            for name, lst in lists.items():
                ranks[name] = next((i + 1 for i, ids in enumerate(lst) if e in ids), None)
                b = bucket(ranks[name])
                buckets[name][b] = buckets[name].get(b, 0) + 1
            best = min((r for r in ranks.values() if r is not None), default=None)
            b = bucket(best)
            buckets["best_of_both"][b] = buckets["best_of_both"].get(b, 0) + 1
            if best is None or best > 50:
                per_cat_missing[q.category] = per_cat_missing.get(q.category, 0) + 1
    order = [f"<={e}" for e in edges] + [f">{edges[-1]}"]
    return {
        "evidence_turns": total,
        "rank_buckets": {n: {b: v.get(b, 0) for b in order} for n, v in buckets.items()},
        "evidence_beyond_pool50_by_category": dict(sorted(per_cat_missing.items())),
        "pool_ceiling": pool_ceiling(ranker, seq_ids, data),
    }


def pool_ceiling(
    ranker: Ranker, seq_ids: dict[int, dict[int, set[str]]], data: Locomo, hops: int = 2
) -> dict[str, dict[str, float]]:
    """The share of questions whose evidence turns are all in the union of the dense and keyword top N,
    alone and with the records up to ``hops`` writes around them (what conversation context reaches):
    no re-ranking of that pool can score higher."""
    out: dict[str, dict[str, float]] = {}
    for n in (10, 50, 100, 200):
        for reach in (0, hops):
            full, sizes = 0, 0
            for q in data.questions:
                pool = {s for s, _ in ranker.dense[q.idx][:n]} | {s for s, _ in ranker.keyword[q.idx][:n]}
                order, pos = ranker.order[q.conv], ranker.pos[q.conv]
                pool |= {
                    order[j]
                    for s in list(pool)
                    for j in range(pos[s] - reach, pos[s] + reach + 1)
                    if 0 <= j < len(order)
                }
                sizes += len(pool)
                found = set().union(*(seq_ids[q.conv].get(s, set()) for s in pool))
                full += set(q.evidence) <= found
            key = f"top {n} of each list" + (f" + {reach} writes of context" if reach else "")
            out[key] = {
                "all_evidence_in_pool": round(full / len(data.questions), 4),
                "mean_pool_size": round(sizes / len(data.questions), 1),
            }
    return out


# -- phase 4: latency at LoCoMo size and at 10k records ---------------------------------------------


class TimedEmbedder:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.last_ms = 0.0

    def warm_up(self) -> None:
        self.inner.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.inner.embed(texts)
        self.last_ms = (time.perf_counter() - t0) * 1000
        return out


def synthetic_records(data: Locomo, n: int, seed: int = 11) -> list[str]:
    """``n`` distinct memory texts: every LoCoMo turn once, then turns recombined (a turn's speaker and
    first sentence with a sentence of another turn), so the texts read like conversation memories."""
    rng = random.Random(seed)
    turns = [t for conv in data.turns for t in conv if t.text]
    texts = list(dict.fromkeys(f"{t.speaker}: {t.text}" for t in turns))
    sentences = [s.strip() for t in turns for s in re.split(r"(?<=[.!?])\s+", t.text) if len(s.strip()) > 15]
    seen = set(texts)
    while len(texts) < n:
        a = rng.choice(turns)
        first = re.split(r"(?<=[.!?])\s+", a.text)[0]
        text = f"{a.speaker}: {first} {rng.choice(sentences)}"
        if text not in seen:
            seen.add(text)
            texts.append(text)
    rng.shuffle(texts)
    return texts[:n]


def fresh_texts(data: Locomo, n: int, seed: int) -> list[str]:
    """Texts for timed stores: new combinations, never embedded before (so no cache helps)."""
    rng = random.Random(seed)
    turns = [t for conv in data.turns for t in conv if t.text]
    out = []
    for i in range(n):
        a, b = rng.choice(turns), rng.choice(turns)
        out.append(f"{a.speaker}: {b.text} (note {seed}-{i})")
    return out


def timed_service_calls(
    service: MemoryService,
    embedder: TimedEmbedder,
    workspace: str,
    agent: str,
    stores: Sequence[str],
    queries: Sequence[str],
) -> dict[str, Any]:
    """``store_record`` and ``search`` called in-process, each split into its steps."""
    store = service.store
    parts: dict[str, list[float]] = {}

    def add(key: str, ms: float) -> None:
        parts.setdefault(key, []).append(ms)

    timers: dict[str, float] = {}
    originals = {}
    for name in (
        "first_stage",
        "dense_search",
        "keyword_search",
        "context",
        "visible_subset",
        "by_seqs",
        "ranking_rows",
        "links",
        "vectors",
        "insert",
        "finish_check",
    ):
        originals[name] = getattr(store, name)

        def wrap(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
            def inner(*a: Any, **kw: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    timers[key] = timers.get(key, 0.0) + (time.perf_counter() - t0) * 1000

            return inner

        setattr(store, name, wrap(originals[name], name))
    check = service.lifecycle._check

    def timed_check(record: Any, vector: Any = None, found: Any = None) -> None:
        t0 = time.perf_counter()
        check(record, vector, found)
        timers["freshness_total"] = timers.get("freshness_total", 0.0) + (time.perf_counter() - t0) * 1000

    service.lifecycle._check = timed_check  # type: ignore[method-assign]
    try:
        for text in progress(stores, desc=f"timed memory_store ({workspace})", unit="rec"):
            timers.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            service.store_record(
                PRINCIPAL, workspace_id=workspace, content=text, agent_id=agent, source_type="bench"
            )
            total = (time.perf_counter() - t0) * 1000
            add("store_total_ms", total)
            add("store_process_cpu_ms", (time.process_time() - c0) * 1000)
            add("store_embed_ms", embedder.last_ms)
            add("store_insert_ms", timers.get("insert", 0.0))
            add("store_freshness_ms", timers.get("freshness_total", 0.0))
            # The neighbour search runs in a worker thread while the row is inserted.
            add("store_freshness_neighbours_ms (concurrent with insert)", timers.get("dense_search", 0.0))
            add("store_freshness_review_and_done_ms", timers.get("finish_check", 0.0))
            add(
                "store_freshness_compare_ms (detectors, by_seqs)",
                timers.get("freshness_total", 0.0) - timers.get("finish_check", 0.0),
            )
        for q in progress(queries, desc=f"timed memory_search ({workspace})", unit="q"):
            timers.clear()
            c0 = time.process_time()
            res = service.search(
                PRINCIPAL, workspace_id=workspace, query=q, agent_id=agent, top_k=TOP_K, status=["all"]
            )
            add("search_latency_ms (service)", float(res["latency_ms"]))
            add("search_process_cpu_ms", (time.process_time() - c0) * 1000)
            # The embedding runs in a worker thread while the keyword search runs: they overlap.
            add("search_embed_ms (concurrent with keyword)", embedder.last_ms)
            # One store call: the keyword search, awaiting the query's vector, the dense search.
            add("search_first_stage_ms (keyword, embedding wait, dense)", timers.get("first_stage", 0.0))
            add("search_context_ms", timers.get("context", 0.0))
            add(
                "search_hydrate_graph_ms",
                sum(timers.get(x, 0.0) for x in ("by_seqs", "ranking_rows", "links")),
            )
    finally:
        for name, fn in originals.items():
            setattr(store, name, fn)
        service.lifecycle._check = check  # type: ignore[method-assign]
    return {k: summary(v) for k, v in parts.items()}


def vector_microbench(n: int, dim: int = LOCAL_MODEL_DIM, reps: int = 200, seed: int = 3) -> dict[str, Any]:
    """src ``VectorIndex`` on ``n`` random unit vectors (one agent owns all, and a 50% subset): time per
    call (median of ``reps``; wall, so load shows)."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = list(range(1, n + 1))
    half = ids[::2]
    out: dict[str, Any] = {"n": n}

    def med(fn: Callable[[], Any], r: int = reps) -> float:
        fn()
        ts = []
        for _ in range(r):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1000)
        return round(float(np.median(ts)), 3)

    index = VectorIndex(dim, lambda _key: (ids, matrix))
    index.sync("w", 1)
    q = matrix[7]
    out["search_all_ms"] = med(lambda: index.search("w", 1, q, 200))
    out["search_subset_all_ms"] = med(lambda: index.search_subset("w", 1, q, ids, 200))
    out["search_subset_half_ms"] = med(lambda: index.search_subset("w", 1, q, half, 200))
    gen = [1]

    def insert() -> None:
        vec = rng.standard_normal(dim).astype(np.float32)
        index.apply("w", gen[0], gen[0] + 1, added=[(10**7 + gen[0], vec)])
        gen[0] += 1

    out["insert_one_ms"] = med(insert, 100)
    return out


class TunedEmbedder(LocalEmbedder):
    """``LocalEmbedder`` with onnxruntime session options under test (spinning, threads)."""

    def __init__(self, threads: int, spinning: bool) -> None:
        super().__init__(threads=threads)
        self.spinning = spinning

    def _load(self) -> None:
        import onnxruntime as ort

        super()._load()
        model = quantized_model(self.files()[0], self._cache_dir)  # the model src runs
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        if self._threads > 0:
            options.intra_op_num_threads = self._threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        self._session = ort.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._single = self._session  # single texts too: the settings under test apply to every run


def embedder_microbench(queries: Sequence[str], rounds: int = 3) -> dict[str, Any]:
    """One query at a time (as memory_search and memory_store embed): src ``LocalEmbedder`` as it is
    configured, and explicit settings of onnxruntime's intra-op threads and spin-waiting. Interleaved in rounds
    so that a change of machine load hits every setting alike."""
    settings = {
        "src LocalEmbedder (as configured)": LocalEmbedder(),
        "threads=all, spinning on": TunedEmbedder(0, True),
        "threads=all, spinning off": TunedEmbedder(0, False),
        "threads=1, spinning off": TunedEmbedder(1, False),
    }
    for e in settings.values():
        e.warm_up()
    wall: dict[str, list[float]] = {k: [] for k in settings}
    cpu: dict[str, list[float]] = {k: [] for k in settings}
    for _ in range(rounds):
        for name, e in settings.items():
            for q in queries:
                t0, c0 = time.perf_counter(), time.process_time()
                e.embed([q])
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name].append((time.process_time() - c0) * 1000)
    batch = [f"{q} {q}" for q in queries][:64]
    throughput = {}
    for name, e in settings.items():
        t0 = time.perf_counter()
        e.embed(batch)
        throughput[name] = round(len(batch) / (time.perf_counter() - t0), 1)
    return {
        name: {
            "wall_ms": summary(wall[name]),
            "process_cpu_ms": summary(cpu[name]),
            "batch_texts_per_s": throughput[name],
        }
        for name in settings
    }


def build_scale(
    data: Locomo, n: int, data_dir: Path, cached: CachedEmbedder, workspace: str, agent: str
) -> dict[str, Any]:
    """``n`` records for one agent in a server data dir, built in-process through ``batch_store``."""
    from triptych.core.config import load_settings
    from triptych.metronix.surface import Metronix

    texts = synthetic_records(data, n)
    cached.embed(texts)  # fill the cache first (progress bar), so the build below only inserts
    cached.cache.save()
    metronix = Metronix.open(load_settings(data_dir=data_dir), embedder=cached)
    # The bulk build skips the freshness checks (marked done): they are what the timed stores measure.
    memory = metronix.memory
    memory.lifecycle._check = lambda record, vector=None, found=None: memory.store.reviews.check_done(
        record.id
    )  # type: ignore[method-assign]
    t0 = time.perf_counter()
    checks = []
    with progress(total=len(texts), desc=f"build {n} records (batch_store, freshness on)", unit="rec") as bar:
        for start in range(0, len(texts), 100):
            c0 = time.perf_counter()
            metronix.memory.batch_store(
                PRINCIPAL,
                workspace_id=workspace,
                records=[{"content": t} for t in texts[start : start + 100]],
                agent_id=agent,
                source_type="bench",
            )
            checks.append((time.perf_counter() - c0) * 1000 / len(texts[start : start + 100]))
            bar.update(len(texts[start : start + 100]))
    seconds = time.perf_counter() - t0
    metronix.close()
    return {"records": n, "build_seconds": round(seconds, 1), "per_record_ms_by_batch": summary(checks)}


def scale_phase(
    data: Locomo,
    n_records: int,
    n_stores: int,
    n_queries: int,
    cached: CachedEmbedder,
    workdir: Path,
    server: bool,
) -> dict[str, Any]:
    from triptych.core.config import load_settings
    from triptych.metronix.surface import Metronix

    out: dict[str, Any] = {}
    rng = random.Random(5)
    queries = [q.text for q in rng.sample(data.questions, min(n_queries, len(data.questions)))]
    log("vector index micro-benchmark ...")
    out["vector_index"] = [vector_microbench(n) for n in (600, n_records)]
    log("BLAS threads micro-benchmark ...")
    out["blas"] = blas_microbench(n_records)
    log("embedder micro-benchmark (threads, spinning) ...")
    out["embedder"] = embedder_microbench(queries[:40])
    real = LocalEmbedder()
    real.warm_up()

    # LoCoMo size: the largest conversation as one agent's memory, timed record by record.
    conv = max(range(len(data.turns)), key=lambda i: len(data.turns[i]))
    turns = data.turns[conv]
    timed = TimedEmbedder(real)
    service = open_service(workdir / "scale-locomo.db", timed)
    agent = agent_of(conv)
    half = len(turns) // 2
    log(f"LoCoMo size: conversation {conv}, {len(turns)} turns as one agent")
    for start in range(0, half, 100):  # the first half in bulk, so timings are taken at ~300-600 records
        service.batch_store(
            PRINCIPAL,
            workspace_id="lat",
            records=[{"content": FORMATS["plain"](t)} for t in turns[start : min(start + 100, half)]],
            agent_id=agent,
        )
    conv_queries = [q.text for q in data.questions if q.conv == conv][:n_queries]
    out["locomo_size"] = {
        "records_before": half,
        "records_after": len(turns),
        "in_process": timed_service_calls(
            service, timed, "lat", agent, [FORMATS["plain"](t) for t in turns[half:]], conv_queries
        ),
    }

    # 10k records for one agent, then the same timings.
    data_dir = workdir / "scale-10k"
    ws, agent10k = "locomo-10k", "locomo-10k"
    out["build"] = build_scale(data, n_records, data_dir, cached, ws, agent10k)
    metronix = Metronix.open(load_settings(data_dir=data_dir), embedder=TimedEmbedder(real))
    timed10k = metronix.memory.embedder
    stores = fresh_texts(data, n_stores, seed=1)
    out["10k"] = {"in_process": timed_service_calls(metronix.memory, timed10k, ws, agent10k, stores, queries)}
    metronix.close()
    if server:
        out["10k"]["mcp"] = asyncio.run(
            scale_mcp(data_dir, ws, agent10k, fresh_texts(data, n_stores, seed=2), queries)
        )
        # The same server with OpenBLAS's threads on every core (triptych defaults to one BLAS thread).
        out["10k"]["mcp_openblas_all_threads"] = asyncio.run(
            scale_mcp(
                data_dir,
                ws,
                agent10k,
                fresh_texts(data, n_stores, seed=3),
                queries,
                env={"OPENBLAS_NUM_THREADS": str(os.cpu_count() or 1)},
            )
        )
    return out


async def _client_mix(
    url: str, ws: str, agent: str, stores: Sequence[str], queries: Sequence[str]
) -> dict[str, list[float]]:
    """One MCP client alternating ``memory_store`` and ``memory_search``: round trips by tool."""
    from mcp import Client

    out: dict[str, list[float]] = {"memory_store": [], "memory_search": []}
    async with Client(url + "/mcp") as client:
        for text, query in zip(stores, queries, strict=True):
            for name, args in (
                ("memory_store", {"content": text, "agent_id": agent, "workspace_id": ws}),
                ("memory_search", {"query": query, "agent_id": agent, "workspace_id": ws, "top_k": TOP_K}),
            ):
                _, rtt = await common.call_json(client, name, args)
                out[name].append(rtt)
    return out


def concurrency_phase(
    data: Locomo,
    n_records: int,
    cached: CachedEmbedder,
    workdir: Path,
    clients: int = 8,
    per_client: int = 25,
) -> dict[str, Any]:
    """One server over ``n_records`` records of one agent: the same mix of stores and searches from one
    client, then from ``clients`` clients at once; round trips and throughput (the one-client run is the
    same-run baseline)."""
    data_dir = workdir / "scale-10k"
    ws, agent = "locomo-10k", "locomo-10k"
    if not (data_dir / "metronix.db").exists():
        build_scale(data, n_records, data_dir, cached, ws, agent)
    rng = random.Random(17)
    n = clients * per_client
    texts = fresh_texts(data, 2 * n, seed=23)
    queries = [q.text for q in rng.choices(data.questions, k=2 * n)]
    out: dict[str, Any] = {"records": n_records, "clients": clients, "calls_per_client": 2 * per_client}

    async def run(k: int, offset: int) -> dict[str, Any]:
        with common.Server(data_dir) as srv:
            await asyncio.sleep(5)  # the server warms its caches in the background first
            t0 = time.perf_counter()
            parts = await asyncio.gather(
                *(
                    _client_mix(
                        srv.url,
                        ws,
                        agent,
                        texts[offset + c * (n // k) : offset + (c + 1) * (n // k)],
                        queries[offset + c * (n // k) : offset + (c + 1) * (n // k)],
                    )
                    for c in range(k)
                )
            )
            seconds = time.perf_counter() - t0
        calls = sum(len(v) for part in parts for v in part.values())
        return {
            "seconds": round(seconds, 2),
            "calls_per_second": round(calls / seconds, 1),
            **{
                name: summary([x for part in parts for x in part[name]])
                for name in ("memory_store", "memory_search")
            },
        }

    log(f"concurrency: {n} stores and {n} searches from 1 client, then from {clients} clients")
    out["one_client"] = asyncio.run(run(1, 0))
    out["many_clients"] = asyncio.run(run(clients, n))
    out["throughput_ratio"] = round(
        out["many_clients"]["calls_per_second"] / out["one_client"]["calls_per_second"], 2
    )
    return out


async def _scale_mcp_calls(
    url: str, ws: str, agent: str, stores: Sequence[str], queries: Sequence[str]
) -> dict[str, Any]:
    from mcp import Client

    store_rtt, status_rtt, search_ms, search_rtt, store_server, search_server = [], [], [], [], [], []
    async with Client(url + "/mcp") as client:
        for _ in range(20):
            await common.call_json(client, "metronix_status", {"workspace_id": ws})
        for q in queries[:10]:  # warm the vector index (first search loads 10k vectors)
            await common.call_json(
                client, "memory_search", {"query": q, "agent_id": agent, "workspace_id": ws}
            )
        for q in progress(queries, desc="MCP memory_search at 10k", unit="q"):
            payload, rtt, server = await common.call_timed(
                client,
                "memory_search",
                {"query": q, "agent_id": agent, "workspace_id": ws, "top_k": TOP_K, "status": ["all"]},
            )
            search_ms.append(float(payload["latency_ms"]))
            search_rtt.append(rtt)
            if server is not None:
                search_server.append(server)
        for i, text in enumerate(progress(stores, desc="MCP memory_store at 10k", unit="rec")):
            _, rtt, server = await common.call_timed(
                client, "memory_store", {"content": text, "agent_id": agent, "workspace_id": ws}
            )
            store_rtt.append(rtt)
            if server is not None:
                store_server.append(server)
            if i % 5 == 0:
                _, srtt = await common.call_json(client, "metronix_status", {"workspace_id": ws})
                status_rtt.append(srtt)
    base = float(np.median(status_rtt)) if status_rtt else 0.0
    return {
        "search_server_latency_ms": summary(search_ms),
        "search_client_rtt_ms": summary(search_rtt),
        "store_client_rtt_ms": summary(store_rtt),
        "status_rtt_ms": summary(status_rtt),
        "store_server_side_estimate_ms": summary([max(r - base, 0.0) for r in store_rtt]),
        # The server's own time for the whole tool call (argument parsing to result), from ``_meta``.
        "store_server_ms": summary(store_server),
        "search_server_ms": summary(search_server),
    }


async def scale_mcp(
    data_dir: Path,
    ws: str,
    agent: str,
    stores: Sequence[str],
    queries: Sequence[str],
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    with common.Server(data_dir, env=env) as srv:
        return await _scale_mcp_calls(srv.url, ws, agent, stores, queries)


BLAS_PROBE = """
import time, numpy as np
m = np.random.default_rng(0).standard_normal((N, 384)).astype(np.float32)
q = m[3]
w, c = [], []
for _ in range(200):
    t0, c0 = time.perf_counter(), time.process_time()
    m @ q
    w.append((time.perf_counter() - t0) * 1000)
    c.append((time.process_time() - c0) * 1000)
print(float(np.median(w)), float(np.percentile(w, 95)), float(np.median(c)))
"""


def blas_microbench(n: int, rounds: int = 3) -> dict[str, Any]:
    """A (n, 384) float32 matrix-vector product, the core of the dense search, in a fresh process with
    OpenBLAS's default threads (all cores) and with OPENBLAS_NUM_THREADS=1 (interleaved rounds)."""
    import subprocess

    out: dict[str, Any] = {"n": n}
    for label, extra in (("default threads", {}), ("OPENBLAS_NUM_THREADS=1", {"OPENBLAS_NUM_THREADS": "1"})):
        runs = []
        for _ in range(rounds):
            env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | extra
            res = subprocess.run(
                [sys.executable, "-c", BLAS_PROBE.replace("N", str(n))],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            p50, p95, cpu = (float(x) for x in res.stdout.split())
            runs.append(
                {"wall_p50_ms": round(p50, 3), "wall_p95_ms": round(p95, 3), "cpu_p50_ms": round(cpu, 3)}
            )
        out[label] = runs
    return out


# -- main ----------------------------------------------------------------------------------------------

PHASES = ("mcp", "bm25", "experiments", "scale", "concurrency")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/locomo.py",
        description="LoCoMo through a real `triptych serve`: recall@1/5/10 of MCP memory_search per "
        "category against a BM25 (SQLite FTS5) baseline, content-format and ranking ablations in-process, "
        "and memory_store / memory_search latency at LoCoMo size and at 10,000 records per agent.",
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 conversations, 15 questions each, 1,000 records for the scale phase (a few minutes)",
    )
    p.add_argument("--conversations", type=int, help="use only the first N conversations")
    p.add_argument(
        "--formats",
        default="plain,dated",
        help="content formats stored through MCP (plain,dated,caption,context)",
    )
    p.add_argument(
        "--headline-format", default="plain", help="format stored with memory_store and reported as headline"
    )
    p.add_argument(
        "--exp-formats",
        default="plain,dated,caption,context",
        help="content formats compared in-process (phase 3)",
    )
    p.add_argument(
        "--single-stores",
        type=int,
        default=1000,
        help="turns of the headline format stored one by one with memory_store (timed); the rest of the "
        "turns and the other formats go through memory_batch_store (default 1000)",
    )
    p.add_argument(
        "--phases", default=",".join(PHASES), help=f"comma list of phases to run ({','.join(PHASES)})"
    )
    p.add_argument(
        "--scale-records", type=int, default=10_000, help="records for one agent in the scale phase"
    )
    p.add_argument("--scale-stores", type=int, default=200, help="timed memory_store calls per size")
    p.add_argument("--scale-queries", type=int, default=300, help="timed memory_search calls per size")
    p.add_argument("--no-scale-server", action="store_true", help="scale phase in-process only")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="embedding cache (outside the repo)")
    p.add_argument(
        "--work-dir", type=Path, help="where temp databases go (default: a temp dir, deleted after)"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phase(s): {', '.join(sorted(unknown))}")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    exp_formats = [f.strip() for f in args.exp_formats.split(",") if f.strip()]
    for f in formats + exp_formats + [args.headline_format]:
        if f not in FORMATS:
            raise SystemExit(f"unknown format {f!r}; known: {', '.join(FORMATS)}")
    if args.headline_format not in formats:
        formats.insert(0, args.headline_format)
    conversations = 2 if args.quick and args.conversations is None else args.conversations
    data = load_locomo(args.data, conversations)
    if args.quick:
        data = quick_subset(data, 15)
        args.scale_records = min(args.scale_records, 1_000)
        args.scale_stores = min(args.scale_stores, 30)
        args.scale_queries = min(args.scale_queries, 30)
        args.single_stores = min(args.single_stores, 200)
        exp_formats = exp_formats[:2]
    n_turns = sum(len(t) for t in data.turns)
    log(
        f"LoCoMo: {len(data.turns)} conversations, {n_turns} turns, {len(data.questions)} questions (cat 1-4)"
    )
    result: dict[str, Any] = {
        "machine": common.machine_facts(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "data": {
            "conversations": len(data.turns),
            "turns": n_turns,
            "questions": len(data.questions),
            "by_category": {f"cat{c}": sum(q.category == c for q in data.questions) for c in CATEGORIES},
            "skipped": data.skipped,
            "repaired_evidence_ids": [list(r) for r in data.repaired],
            "questions_with_several_evidence_turns": sum(len(q.evidence) > 1 for q in data.questions),
        },
        "phases": {},
    }
    workdir = args.work_dir or Path(tempfile.mkdtemp(prefix="triptych-locomo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cache = common.EmbeddingCache(LOCAL_MODEL_NAME, LOCAL_MODEL_DIM, args.cache_dir)
    cached = CachedEmbedder(cache, LocalEmbedder())
    try:
        if "mcp" in phases:
            t0 = time.perf_counter()
            with common.Server(workdir / "serve") as srv:
                result["server_startup_s"] = round(srv.startup_s, 2)
                mcp = asyncio.run(mcp_phase(srv.url, data, formats, args.headline_format, args.single_stores))
            harvest(workdir / "serve" / "metronix.db", cache)
            result["phases"]["mcp"] = {"seconds": round(time.perf_counter() - t0, 1)}
            for entry in mcp.values():
                ranked = entry.pop("_ranked_all")
                entry["evidence_ranks_status_all"] = evidence_ranks(data.questions, ranked)
            result["mcp"] = mcp
        if "bm25" in phases:
            t0 = time.perf_counter()
            result["bm25"] = {}
            for fmt in formats:
                _, figures = bm25_phase(data, fmt)
                result["bm25"][fmt] = figures
            result["phases"]["bm25"] = {"seconds": round(time.perf_counter() - t0, 1)}
        if "experiments" in phases:
            t0 = time.perf_counter()
            result["experiments"] = experiments_phase(
                data, exp_formats, cached, workdir, extra=not args.quick
            )
            result["phases"]["experiments"] = {"seconds": round(time.perf_counter() - t0, 1)}
        if "scale" in phases:
            t0 = time.perf_counter()
            result["scale"] = scale_phase(
                data,
                args.scale_records,
                args.scale_stores,
                args.scale_queries,
                cached,
                workdir,
                not args.no_scale_server,
            )
            result["phases"]["scale"] = {"seconds": round(time.perf_counter() - t0, 1)}
        if "concurrency" in phases:
            t0 = time.perf_counter()
            result["concurrency"] = concurrency_phase(data, args.scale_records, cached, workdir)
            result["phases"]["concurrency"] = {"seconds": round(time.perf_counter() - t0, 1)}
    finally:
        cache.save()
        if args.work_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    common.write_json(args.out, result)
    print_results(result, args.out)
    return 0


def harvest(db_path: Path, cache: common.EmbeddingCache) -> int:
    """Copy the vectors the server computed into the cache (keyed by the stored content)."""
    if not db_path.exists():
        return 0
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT content, embedding FROM memory_records").fetchall()
    finally:
        conn.close()
    texts = [r[0] for r in rows if not cache.has(r[0])]
    vecs = [np.frombuffer(r[1], dtype=np.float32) for r in rows if not cache.has(r[0])]
    added = cache.add(texts, np.vstack(vecs)) if vecs else 0
    cache.save()
    return added


# -- output ------------------------------------------------------------------------------------------


def _recall_lines(label: str, table: dict[str, Any], metric: str = "full") -> list[str]:
    cols = ["overall"] + [f"cat{c}" for c in CATEGORIES if f"cat{c}" in table]
    lines = []
    for k in KS:
        cells = "  ".join(f"{table[c][f'{metric}@{k}']:.3f}" for c in cols)
        lines.append(f"  {label:<44} {metric}@{k:<2} {cells}")
    return lines


def _header(table: dict[str, Any]) -> str:
    cols = ["overall"] + [f"cat{c}" for c in CATEGORIES if f"cat{c}" in table]
    names = "  ".join(f"{c:>5}" if c != "overall" else "overall" for c in cols)
    ns = "  ".join(f"{table[c]['n']:>5}" if c != "overall" else f"{table[c]['n']:>7}" for c in cols)
    return f"  {'':<44} {'':<8}{names}\n  {'(questions)':<44} {'':<8}{ns}"


def print_results(r: dict[str, Any], out_path: Path) -> None:
    print("=" * 100)
    d = r["data"]
    print(
        f"LoCoMo memory benchmark: {d['conversations']} conversations, {d['turns']} turns, {d['questions']} "
        f"questions (cat 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop); skipped {d['skipped']}"
    )
    print(
        f"machine: {r['machine']['nproc']} cores, load {r['machine']['loadavg_at_start']} -> {r['machine'].get('loadavg_at_end')}"
    )
    print("headline: full@k = share of questions whose evidence turns are ALL in the top k")
    print("=" * 100)
    if "mcp" in r:
        for fmt, e in r["mcp"].items():
            t = e["search_status_all"]["recall"]
            print(f"\n[MCP memory_search, format {fmt!r}, status ['all']]")
            print(_header(t))
            lines = _recall_lines("hybrid (MCP)", t) + _recall_lines("hybrid (MCP)", t, "frac")
            if "bm25" in r and fmt in r["bm25"]:
                b = r["bm25"][fmt]["recall"]
                lines += _recall_lines("BM25 baseline (FTS5, per conversation)", b) + _recall_lines(
                    "BM25 baseline (FTS5, per conversation)", b, "frac"
                )
            print("\n".join(lines))
            if "search_status_default" in e:
                t2 = e["search_status_default"]["recall"]
                print("\n".join(_recall_lines("hybrid (MCP), default status ['active']", t2)))
            s = e["store"]
            print(
                f"  store: {s['tool']} {s['turns']} turns -> {s['records']} records ({s['deduped']} deduped) in "
                f"{s['seconds']} s ({s['turns_per_s']}/s); client RTT p50 {s['client_rtt_ms'].get('p50')} p95 "
                f"{s['client_rtt_ms'].get('p95')} ms"
            )
            if s.get("batch_client_rtt_per_record_ms", {}).get("n"):
                b = s["batch_client_rtt_per_record_ms"]
                print(f"  memory_batch_store client RTT per record: p50 {b['p50']} p95 {b['p95']} ms")
            if "server_side_estimate_ms" in s:
                se = s["server_side_estimate_ms"]
                print(
                    f"  memory_store server-side estimate (RTT - status RTT {s['status_rtt_ms']['p50']} ms): "
                    f"p50 {se['p50']} p95 {se['p95']} ms"
                )
            sl = e["search_status_all"]["server_latency_ms"]
            print(f"  memory_search latency_ms (server): p50 {sl['p50']} p95 {sl['p95']} ms")
            c = e["freshness_census"]
            print(
                f"  freshness after ingest: statuses {c['statuses']}; reviews "
                + ", ".join(f"{k} {v['total']}" for k, v in c["reviews"].items())
            )
    elif "bm25" in r:
        for fmt, b in r["bm25"].items():
            print(f"\n[BM25 baseline, format {fmt!r}]")
            print(_header(b["recall"]))
            print("\n".join(_recall_lines("BM25", b["recall"]) + _recall_lines("BM25", b["recall"], "frac")))
    if "experiments" in r:
        x = r["experiments"]
        print("\n[in-process experiments]")
        print(f"  ranker check (re-implementation vs MemoryService.search): {x['ranker_check']}")
        first = None
        for fmt, tables in x["formats"].items():
            for name in (
                "hybrid (src default)",
                "hybrid (ranking before)",
                "dense only",
                "store keyword only",
            ):
                t = tables[name]
                if first is None:
                    first = t
                    print(_header(t))
                print("\n".join(_recall_lines(f"{fmt}: {name}", t)[2:]))
        print("  variants (first format), full@10 / frac@10 overall and per category:")
        for name, v in x["variants"].items():
            t = v["recall"]
            cats = " ".join(f"c{c} {t[f'cat{c}']['full@10']:.3f}" for c in CATEGORIES if f"cat{c}" in t)
            print(
                f"    {name:<58} full@10 {t['overall']['full@10']:.3f}  frac@10 {t['overall']['frac@10']:.3f}  "
                f"full@5 {t['overall']['full@5']:.3f}  full@1 {t['overall']['full@1']:.3f}   {cats}"
            )
        for fmt, fr in x.get("freshness_replay", {}).items():
            print(f"  freshness replay ({fmt}, {fr['records_checked']} records): {fr['filings']}")
        dg = x["diagnosis"]
        print(f"  where the evidence turns rank in the first-stage lists ({dg['evidence_turns']} turns):")
        for n, b in dg["rank_buckets"].items():
            print(f"    {n:<13} " + "  ".join(f"{k} {v}" for k, v in b.items()))
        print(
            "  questions whose evidence is all in the candidate pool (the ceiling of any re-ranking of it):"
        )
        for name, c in dg.get("pool_ceiling", {}).items():
            print(
                f"    {name:<42} {c['all_evidence_in_pool']:.3f}  (mean pool {c['mean_pool_size']} records)"
            )
    if "concurrency" in r:
        c = r["concurrency"]
        print(f"\n[concurrency: {c['records']} records, MCP round trips]")
        for run in ("one_client", "many_clients"):
            x = c[run]
            label = "1 client" if run == "one_client" else f"{c['clients']} clients"
            print(
                f"  {label:<10} {x['seconds']} s, {x['calls_per_second']} calls/s; "
                + "; ".join(
                    f"{n} p50 {x[n]['p50']} p95 {x[n]['p95']} ms" for n in ("memory_store", "memory_search")
                )
            )
        print(f"  throughput ratio {c['throughput_ratio']}")
    if "scale" in r:
        s = r["scale"]
        print("\n[latency]")
        for size in ("locomo_size", "10k"):
            if size not in s:
                continue
            ip = s[size]["in_process"]
            label = (
                f"LoCoMo size ({s[size].get('records_before', '')}->{s[size].get('records_after', '')} records)"
                if size == "locomo_size"
                else f"{s['build']['records']} records, one agent"
            )
            print(f"  {label}, in-process:")
            for k, v in ip.items():
                print(f"    {k:<34} p50 {v.get('p50')}  p95 {v.get('p95')}  (n {v.get('n')})")
            for run in ("mcp", "mcp_openblas_all_threads"):
                if run not in s[size]:
                    continue
                tag = "MCP" if run == "mcp" else "MCP, OpenBLAS threads = cores,"
                for k, v in s[size][run].items():
                    print(f"    {tag} {k:<30} p50 {v.get('p50')}  p95 {v.get('p95')}  (n {v.get('n')})")
        if "build" in s:
            print(f"  10k build: {s['build']}")
        for vi in s.get("vector_index", []):
            print(f"  vector index micro-benchmark: {vi}")
        if "blas" in s:
            print(f"  BLAS GEMV micro-benchmark: {s['blas']}")
        for name, e in s.get("embedder", {}).items():
            print(
                f"  embed one query, {name:<32} wall p50 {e['wall_ms']['p50']} p95 {e['wall_ms']['p95']}  "
                f"cpu p50 {e['process_cpu_ms']['p50']}  batch {e['batch_texts_per_s']} texts/s"
            )
    print(f"\nJSON written to {out_path}")


if __name__ == "__main__":
    raise SystemExit(main())
