"""Shared pieces of the benchmarks: data loading, IR metrics, a real ``triptych serve`` subprocess,
MCP calls, an on-disk embedding cache, BM25 over SQLite FTS5 and machine facts.

Nothing here writes into the repository: data is read from ``../shared/data``, caches and results go
under /tmp unless told otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

# onnxruntime must be imported before usearch anywhere in the process: triptych.core.embed does it.
from triptych.core import embed as _embed  # noqa: F401  (import order, see ARCHITECTURE.md section 5)
from triptych.core.search import STOPWORDS, keyword_terms  # noqa: F401
from triptych.metronix.chunking import chunk_text
from triptych.metronix.knowledge import embedding_text

REPO = Path(__file__).resolve().parents[1]
SCIFACT_DIR = Path(os.environ.get("TRIPTYCH_SCIFACT_DIR", REPO.parent / "shared" / "data" / "scifact"))
CACHE_DIR = Path(os.environ.get("TRIPTYCH_BENCH_CACHE", "/tmp/triptych-bench-cache"))
TRIPTYCH_BIN = Path(sys.executable).with_name("triptych")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def progress(iterable: Any = None, **kwargs: Any) -> Any:
    """A tqdm bar on stderr (long phases only)."""
    from tqdm import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("mininterval", 2.0)
    return tqdm(iterable, **kwargs)


# -- data ------------------------------------------------------------------------------------------


@dataclass
class SciFact:
    docs: list[dict[str, str]]  # {"_id", "title", "text"} in corpus order
    queries: dict[str, str]  # query id -> text, test queries only
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade}
    path: Path = field(default=SCIFACT_DIR)


def load_scifact(path: Path = SCIFACT_DIR) -> SciFact:
    docs = []
    with open(path / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs.append(
                {"_id": str(row["_id"]), "title": row.get("title") or "", "text": row.get("text") or ""}
            )
    qrels: dict[str, dict[str, int]] = {}
    with open(path / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            qid, did, grade = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(grade)
    queries: dict[str, str] = {}
    with open(path / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if str(row["_id"]) in qrels:
                queries[str(row["_id"])] = row["text"]
    missing = set(qrels) - set(queries)
    if missing:
        raise SystemExit(f"{len(missing)} test queries have no text in queries.jsonl")
    return SciFact(docs, queries, qrels, path)


def quick_subset(data: SciFact, n_docs: int, n_queries: int, seed: int = 13) -> SciFact:
    """A small, still meaningful slice: ``n_queries`` test queries, all their relevant documents, and
    random other documents up to ``n_docs``."""
    rng = random.Random(seed)
    qids = sorted(data.queries, key=int)
    qids = sorted(rng.sample(qids, min(n_queries, len(qids))), key=int)
    wanted = {d for q in qids for d in data.qrels[q]}
    keep = [d for d in data.docs if d["_id"] in wanted]
    others = [d for d in data.docs if d["_id"] not in wanted]
    keep += rng.sample(others, max(0, min(len(others), n_docs - len(keep))))
    order = {d["_id"]: i for i, d in enumerate(data.docs)}
    keep.sort(key=lambda d: order[d["_id"]])
    return SciFact(keep, {q: data.queries[q] for q in qids}, {q: data.qrels[q] for q in qids}, data.path)


@dataclass(frozen=True, slots=True)
class ChunkRow:
    doc_id: str
    ordinal: int
    title: str
    text: str

    @property
    def embed_text(self) -> str:
        return embedding_text(self.title or None, self.text)


def chunk_corpus(docs: Sequence[dict[str, str]], chunk_tokens: int) -> list[ChunkRow]:
    """The chunks the service makes of each document (same function, same title prefix)."""
    rows = []
    for d in docs:
        for c in chunk_text(d["text"], chunk_tokens):
            rows.append(ChunkRow(d["_id"], c.ordinal, d["title"], c.text))
    return rows


# -- metrics ---------------------------------------------------------------------------------------


def dedupe(labels: Sequence[str]) -> list[str]:
    """Document labels in rank order, each once (a document may come back as several chunks)."""
    return list(dict.fromkeys(labels))


def ndcg_at_k(ranked: Sequence[str], rels: dict[str, int], k: int = 10) -> float:
    """BEIR / pytrec_eval nDCG@k: gain = grade, discount 1/log2(rank + 1)."""
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], rels: dict[str, int], k: int = 10) -> float:
    relevant = {d for d, g in rels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(ranked[:k])) / len(relevant)


def evaluate(run: dict[str, list[str]], qrels: dict[str, dict[str, int]], k: int = 10) -> dict[str, Any]:
    """Mean nDCG@k and recall@k over the queries of ``qrels`` (a query missing from ``run`` scores 0)."""
    ndcgs = {q: ndcg_at_k(run.get(q, []), rels, k) for q, rels in qrels.items()}
    recalls = {q: recall_at_k(run.get(q, []), rels, k) for q, rels in qrels.items()}
    n = len(qrels) or 1
    return {
        f"ndcg@{k}": round(sum(ndcgs.values()) / n, 4),
        f"recall@{k}": round(sum(recalls.values()) / n, 4),
        "queries": len(qrels),
        "per_query_ndcg": {q: round(v, 4) for q, v in ndcgs.items()},
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "n": int(arr.size),
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "mean": round(float(arr.mean()), 2),
        "max": round(float(arr.max()), 2),
    }


# -- BM25 over SQLite FTS5 -------------------------------------------------------------------------


def fts_or_query(text: str) -> str | None:
    """The OR of the query's terms minus stopwords, as the service builds it (``keyword_terms``)."""
    terms = keyword_terms(text)
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


class DocBM25:
    """Document-level BM25: a separate in-memory FTS5 table (porter unicode61) of title + text."""

    def __init__(self, docs: Sequence[dict[str, str]]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, body, tokenize='porter unicode61')"
        )
        self.conn.executemany(
            "INSERT INTO docs (doc_id, body) VALUES (?, ?)",
            ((d["_id"], f"{d['title']} {d['text']}") for d in docs),
        )

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        match = fts_or_query(query)
        if match is None:
            return []
        rows = self.conn.execute(
            "SELECT doc_id, -bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?", (match, k)
        ).fetchall()
        return [(str(r[0]), float(r[1])) for r in rows]


# -- embedding cache -------------------------------------------------------------------------------


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Vectors by text (sha1), kept in ``<dir>/<model>.keys.npy`` + ``.vecs.npy`` outside the repo, so
    repeated runs and ablations don't re-embed (about 16 passages/s on 2 cores)."""

    def __init__(self, model: str, dim: int, directory: Path = CACHE_DIR) -> None:
        self.model, self.dim = model, dim
        directory.mkdir(parents=True, exist_ok=True)
        self._keys_path = directory / f"{model}.keys.npy"
        self._vecs_path = directory / f"{model}.vecs.npy"
        self.index: dict[str, int] = {}
        self._vecs: list[np.ndarray] = []
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        if self._keys_path.exists() and self._vecs_path.exists():
            keys = np.load(self._keys_path)
            self._matrix = np.load(self._vecs_path).astype(np.float32)
            self.index = {k.decode() if isinstance(k, bytes) else str(k): i for i, k in enumerate(keys)}
        self._dirty = False

    def __len__(self) -> int:
        return len(self.index)

    def _row(self, i: int) -> np.ndarray:
        base = self._matrix.shape[0]
        return self._matrix[i] if i < base else self._vecs[i - base]

    def has(self, text: str) -> bool:
        return text_key(text) in self.index

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> int:
        added = 0
        for text, vec in zip(texts, vectors, strict=True):
            key = text_key(text)
            if key in self.index:
                continue
            self.index[key] = self._matrix.shape[0] + len(self._vecs)
            self._vecs.append(np.asarray(vec, dtype=np.float32).reshape(self.dim))
            added += 1
        self._dirty = self._dirty or added > 0
        return added

    def get(
        self, texts: Sequence[str], embedder: Any = None, desc: str = "embedding", batch: int = 64
    ) -> np.ndarray:
        """Vectors for ``texts``; missing ones are embedded with ``embedder`` (saved as they come)."""
        missing = list(dict.fromkeys(t for t in texts if text_key(t) not in self.index))
        if missing:
            if embedder is None:
                raise RuntimeError(
                    f"{len(missing)} texts are not in the embedding cache and no embedder was given"
                )
            with progress(total=len(missing), desc=desc, unit="chunk") as bar:
                for start in range(0, len(missing), batch):
                    part = missing[start : start + batch]
                    self.add(part, embedder.embed(part))
                    bar.update(len(part))
                    if (start // batch) % 8 == 7:
                        self.save()
            self.save()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = self._row(self.index[text_key(t)])
        return out

    def save(self) -> None:
        if not self._dirty:
            return
        if self._vecs:
            self._matrix = np.vstack([self._matrix, np.vstack(self._vecs)]).astype(np.float32)
            self._vecs = []
        keys = np.array(sorted(self.index, key=self.index.__getitem__), dtype="S40")
        for path, arr in ((self._keys_path, keys), (self._vecs_path, self._matrix)):
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, arr)
            os.replace(tmp, path)
        self._dirty = False


def harvest_vectors(db_path: Path, cache: EmbeddingCache) -> int:
    """Copy the vectors a server computed during ingest into the cache (keyed by the text it embedded)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT d.title, c.text, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id"
        ).fetchall()
    finally:
        conn.close()
    texts = [embedding_text(title, text) for title, text, _ in rows]
    vectors = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in rows]) if rows else None
    added = cache.add(texts, vectors) if vectors is not None and vectors.shape[1] == cache.dim else 0
    cache.save()
    return added


# -- the server under test -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real ``triptych serve`` subprocess on a free port, stopped (by its own pid) on exit."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.env = {**os.environ, "TRIPTYCH_LOG_LEVEL": "warning", **(env or {})}
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"triptych-bench-serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> None:
        cmd = [str(TRIPTYCH_BIN), "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        log(f"starting: {' '.join(cmd)}  (log: {self.log_path})")
        started = time.perf_counter()
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = started + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"triptych serve exited with {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    self.startup_s = time.perf_counter() - started
                    return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"triptych serve did not become healthy in {timeout} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        with contextlib.suppress(Exception):
            self._log.close()

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ToolError(RuntimeError):
    pass


async def call_json(client: Any, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Call an MCP tool; returns (JSON payload, client round trip in ms). An is_error result raises."""
    payload, rtt, _ = await call_timed(client, name, args)
    return payload, rtt


async def call_timed(
    client: Any, name: str, args: dict[str, Any]
) -> tuple[dict[str, Any], float, float | None]:
    """``call_json`` plus the server's own time for the call (``_meta["triptych/server_ms"]``)."""
    started = time.perf_counter()
    result = await client.call_tool(name, args)
    rtt = (time.perf_counter() - started) * 1000
    text = result.content[0].text if result.content else "{}"
    payload = json.loads(text)
    if result.is_error:
        raise ToolError(f"{name} failed: {text[:500]}")
    server = (result.meta or {}).get("triptych/server_ms")
    return payload, rtt, float(server) if server is not None else None


# -- in-process latency breakdown (the steps of KnowledgeService.hybrid) ------------------------------


def latency_breakdown(
    store: Any,
    embedder: Any,
    workspace: str,
    queries: Sequence[str],
    candidates: int = 50,
    top_k: int = 10,
    desc: str = "breakdown",
) -> dict[str, Any]:
    """Times each step of ``KnowledgeService.hybrid`` with the real store: query embedding, BM25 keyword
    query, vector search, then fusion + hydration (rrf, sort, chunk_hits, result dicts)."""
    from triptych.core.search import rrf

    n = max(candidates, top_k * 3)
    parts: dict[str, list[float]] = {
        "embed_ms": [],
        "keyword_ms": [],
        "vector_ms": [],
        "fusion_hydrate_ms": [],
        "total_ms": [],
    }
    for q in progress(queries, desc=desc, unit="q"):
        t0 = time.perf_counter()
        vector = embedder.embed([q])[0]
        t1 = time.perf_counter()
        keyword = store.keyword_search(workspace, q, n)
        t2 = time.perf_counter()
        dense = store.vector_search(workspace, vector, n)
        t3 = time.perf_counter()
        fused = rrf([[i for i, _ in keyword], [i for i, _ in dense]])
        top = sorted(fused, key=lambda i: fused[i], reverse=True)[:top_k]
        hits = store.chunk_hits(workspace, top)
        dense_scores, keyword_scores = dict(dense), dict(keyword)
        _ = [
            {
                "doc_label": hits[c].doc_label,
                "content": hits[c].text,
                "score": round(fused[c], 4),
                "dense": dense_scores.get(c),
                "keyword": keyword_scores.get(c),
            }
            for c in top
            if c in hits
        ]
        t4 = time.perf_counter()
        for key, value in (
            ("embed_ms", t1 - t0),
            ("keyword_ms", t2 - t1),
            ("vector_ms", t3 - t2),
            ("fusion_hydrate_ms", t4 - t3),
            ("total_ms", t4 - t0),
        ):
            parts[key].append(value * 1000)
    return {key: summary(values) for key, values in parts.items()}


# -- facts and output ------------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("triptych", "mcp", "onnxruntime", "usearch", "numpy", "tokenizers"):
        with contextlib.suppress(PackageNotFoundError):
            versions[pkg] = version(pkg)
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        commit += "+dirty-src" if dirty else ""
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "packages": versions,
        "git": commit,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def embed_throughput(embedder: Any, texts: Sequence[str]) -> dict[str, float]:
    """The embedder's own batch throughput on ``texts`` (one ``embed`` call, as a batch)."""
    embedder.warm_up() if hasattr(embedder, "warm_up") else embedder.embed(["warm up"])
    started = time.perf_counter()
    embedder.embed(list(texts))
    seconds = time.perf_counter() - started
    return {
        "chunks": len(texts),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts) / seconds, 2),
    }
