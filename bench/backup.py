"""Backing up a large data directory: `triptych backup` next to `cp -r` of the stopped directory, same run.

    flock /tmp/triptych-bench.lock .venv/bin/python bench/backup.py --out /tmp/triptych-bench/backup
    flock /tmp/triptych-bench.lock .venv/bin/python bench/backup.py --scale 0.1   # a tenth of each count

Builds once (``--out`` keeps it; a later run with the same counts reuses it) a data directory holding
``--chunks`` knowledge-base chunks (10 per document), ``--memories`` agent-memory records, ``--nodes``
Hadron nodes and ``--calls`` Metergraph calls with their columnar projection, written through the stores'
own write paths (the calls through ``IngestService``, generated as ``metergraph_engines.py`` does). Vectors
are random unit vectors and texts random words: what a backup costs is the bytes on disk, not what they
mean, and no model is loaded. Then, ``--rounds`` times in turn: ``cp -r`` of the stopped directory, the
same followed by an fsync of every copied file (as durable as a backup), ``triptych backup`` of it and ``triptych restore`` of that backup, each into a new folder (medians
reported); with ``--serving``, one more backup with an idle server on the directory. Prints the sizes and
times as JSON.

    flock /tmp/triptych-bench.lock .venv/bin/python bench/backup.py --methods 300000 --rounds 2

compares the two ways SQLite copies a live file (docs/decisions/0071-backup-sqlite-online-backup-api.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import metergraph_bench
import numpy as np
import numpy.typing as npt
from common import free_port
from metergraph_engines import load_calls, start_generator, wait_healthy

from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

TRIPTYCH = Path(sys.executable).with_name("triptych")
DIM = 384
MODEL = "bench-random-unit-vectors"
CHUNKS_PER_DOCUMENT = 10


class RandomEmbedder:
    """What ``hadron_search.seed`` asks of an embedder, without a model."""

    name, dim = MODEL, DIM

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return unit(self.rng, len(texts))


def unit(rng: np.random.Generator, n: int) -> npt.NDArray[np.float32]:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def words(rng: random.Random, vocabulary: list[str], n: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def load_knowledge_and_memory(data: Path, chunks: int, memories: int) -> dict[str, float]:
    from triptych.metronix.knowledge import content_hash
    from triptych.metronix.memory_model import MemoryRecord
    from triptych.metronix.memory_store import SqliteMemoryStore
    from triptych.metronix.store import NewDocument, SqliteKnowledgeStore, utcnow

    rng, nrng = random.Random(7), np.random.default_rng(7)
    vocabulary = [f"w{i}{rng.choice('aeiou')}{rng.choice('nrst')}" for i in range(5000)]
    store = SqliteKnowledgeStore(data / "metronix.db", DIM)
    store.set_embedding_model(MODEL, DIM)
    started = time.perf_counter()
    for d in range((chunks + CHUNKS_PER_DOCUMENT - 1) // CHUNKS_PER_DOCUMENT):
        n = min(CHUNKS_PER_DOCUMENT, chunks - d * CHUNKS_PER_DOCUMENT)
        texts = [words(rng, vocabulary, 150) for _ in range(n)]
        content = "\n\n".join(texts)
        store.put_document(NewDocument(
            workspace_id="bench", doc_label=f"doc-{d}", title=f"Document {d}", content=content,
            source_type="bench", url=None, date=None, metadata={},
            content_hash=content_hash(f"Document {d}", content, {}), chunks=texts, embeddings=unit(nrng, n),
        ))  # fmt: skip
    kb_s = time.perf_counter() - started
    memory = SqliteMemoryStore(store.db, DIM)
    memory.set_embedding_model(MODEL, DIM)
    started = time.perf_counter()
    now = utcnow()
    for i in range(memories):
        content = f"Agent fact {i}: " + words(rng, vocabulary, 20)
        record = MemoryRecord(
            id=str(uuid.uuid4()), workspace_id="bench", agent_id=f"agent-{i % 10}", scope="per_agent",
            session_id=None, kind="fact", content=content, content_hash=hashlib.sha256(content.encode()).hexdigest(),
            tags=[], importance_score=0.5, source_type="", metadata={}, status="active", created_at=now,
            updated_at=now,
        )  # fmt: skip
        memory.insert(record, unit(nrng, 1)[0], set(), enqueue=False)
    memory_s = time.perf_counter() - started
    store.close()
    return {"chunks_s": round(kb_s, 1), "memories_s": round(memory_s, 1)}


def load_nodes(data: Path, nodes: int) -> float:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hadron_search import seed

    started = time.perf_counter()
    seed(data, nodes, RandomEmbedder(11))  # type: ignore[arg-type]
    return round(time.perf_counter() - started, 1)


def build(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    data.mkdir(parents=True)
    # The rows' maker is forked before any store opens (metergraph_engines.start_generator).
    now = metergraph_bench.NOW.isoformat()
    maker, queue = start_generator(args.calls, 5000, now)
    mg = Metergraph.open(data, load_metergraph_settings())
    try:
        calls = load_calls(mg, args.calls, maker, queue)
        started = time.perf_counter()
        assert mg.columns is not None
        mg.columns.catch_up()
        calls["projection_s"] = round(time.perf_counter() - started, 1)
    finally:
        mg.close()
    timings: dict[str, Any] = {"calls": calls}
    timings |= load_knowledge_and_memory(data, args.chunks, args.memories)
    timings["nodes_s"] = load_nodes(data, args.nodes)
    return timings


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return seconds, done


def copy_synced(data: Path, target: Path) -> float:
    """``cp -r``, then every copied file and folder synced: the plain copy made as durable as a backup is
    (``triptych backup`` syncs what it writes before it says it is done)."""
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(data), str(target)], check=True)
    for root, _, files in os.walk(target):
        for name in files:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - started


def wait_idle(pid: int, window_s: float = 3.0, busy: float = 0.05, limit_s: float = 900) -> float:
    """When the process's CPU time grew by less than ``busy`` of ``window_s`` over one window (or the
    limit passed): the moment, on the ``time.perf_counter`` clock."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    deadline = time.perf_counter() + limit_s
    before = cpu()
    while time.perf_counter() < deadline:
        time.sleep(window_s)
        now = cpu()
        if now - before < busy * window_s:
            break
        before = now
    return time.perf_counter()


def while_serving(data: Path, work: Path) -> dict[str, Any]:
    """``triptych backup`` with an idle ``triptych serve`` on the directory (the projection's owner), once
    the server's start-up work is done."""
    port = free_port()
    log = open(work / "server.log", "wb")  # noqa: SIM115 - closed below
    started = time.perf_counter()
    server = subprocess.Popen(
        [str(TRIPTYCH), "serve", "--port", str(port), "--data-dir", str(data)], stdout=log, stderr=log
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", "/health")
        healthy_s = time.perf_counter() - started
        # Its start-up work (index loads, catch-ups) done: the backup is timed against an idle server.
        idle_s = wait_idle(server.pid) - started
        print(
            f"server healthy after {healthy_s:.1f} s, idle after {idle_s:.1f} s", file=sys.stderr, flush=True
        )
        target = work / "backup-serving"
        shutil.rmtree(target, ignore_errors=True)
        seconds, _ = timed([str(TRIPTYCH), "backup", str(target), "--data-dir", str(data)])
        found = {"backup_s": round(seconds, 2), "backup_bytes": size_of(target),
                 "server_healthy_after_s": round(healthy_s, 1), "server_idle_after_s": round(idle_s, 1)}  # fmt: skip
        shutil.rmtree(target)
        return found
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=300)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def methods(work: Path, rows: int, rounds: int) -> dict[str, Any]:
    """SQLite's online backup API against ``VACUUM INTO`` on one WAL file while two threads commit a pair
    of rows (one per table) per transaction throughout each copy: each copy's time, the commits made
    meanwhile, and whether it is one consistent snapshot (integrity check, both tables' counts equal)."""
    import sqlite3
    import threading

    source = work / "methods-source.db"
    source.unlink(missing_ok=True)
    with closing(sqlite3.connect(source, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
        conn.execute("CREATE INDEX a_k ON a (k)")
        conn.execute("CREATE TABLE b (id INTEGER PRIMARY KEY, a_id INTEGER)")
        conn.execute("BEGIN")
        for i in range(rows):
            conn.execute("INSERT INTO a (k, v) VALUES (?, ?)", (str(random.random()), os.urandom(200)))
            conn.execute("INSERT INTO b (a_id) VALUES (?)", (i,))
        conn.execute("COMMIT")

    def writer(stop: threading.Event, commits: list[int]) -> None:
        with closing(sqlite3.connect(source, isolation_level=None, timeout=30)) as conn:
            conn.execute("PRAGMA synchronous=NORMAL")
            while not stop.is_set():
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute(
                    "INSERT INTO a (k, v) VALUES (?, ?)", (str(random.random()), os.urandom(200))
                )
                conn.execute("INSERT INTO b (a_id) VALUES (?)", (row.lastrowid,))
                conn.execute("COMMIT")
                commits[0] += 1

    def backup_api(target: Path) -> None:
        with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
            src.backup(dst)

    def vacuum_into(target: Path) -> None:
        with closing(sqlite3.connect(source)) as src:
            src.execute("VACUUM INTO ?", (str(target),))

    found: dict[str, Any] = {"source_bytes": source.stat().st_size, "runs": []}
    for _ in range(rounds):
        for name, copy in (("backup_api", backup_api), ("vacuum_into", vacuum_into)):
            target = work / f"methods-{name}.db"
            target.unlink(missing_ok=True)
            stop, commits = threading.Event(), [0]
            writers = [threading.Thread(target=writer, args=(stop, commits)) for _ in range(2)]
            for t in writers:
                t.start()
            while commits[0] < 100:  # the writers are going
                time.sleep(0.01)
            before, started = commits[0], time.perf_counter()
            copy(target)
            seconds, during = time.perf_counter() - started, commits[0] - before
            stop.set()
            for t in writers:
                t.join()
            with closing(sqlite3.connect(target)) as conn:
                check = conn.execute("PRAGMA integrity_check").fetchone()[0]
                a, b = conn.execute("SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)").fetchone()
            found["runs"].append({"method": name, "seconds": round(seconds, 2), "commits_during": during,
                                  "consistent": check == "ok" and a == b, "bytes": target.stat().st_size})  # fmt: skip
            print(json.dumps(found["runs"][-1]), file=sys.stderr, flush=True)
            target.unlink()
    source.unlink()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count (0.1: a tenth)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of cp -r, backup and restore, in turn")
    parser.add_argument(
        "--serving", action="store_true", help="also back up once with an idle server on the directory"
    )
    parser.add_argument("--out", type=Path, help="work directory, kept (default: a temp dir, removed)")
    parser.add_argument(
        "--methods",
        type=int,
        metavar="ROWS",
        help="instead: the online backup API against VACUUM INTO on a file of ROWS row pairs under writers",
    )
    args = parser.parse_args()
    if args.methods:
        with tempfile.TemporaryDirectory(prefix="triptych-bench-backup-methods-") as tmp:
            print(json.dumps(methods(Path(tmp), args.methods, args.rounds), indent=1))
        return
    for name in ("chunks", "memories", "nodes", "calls"):
        setattr(args, name, max(1, round(getattr(args, name) * args.scale)))
    work = args.out or Path(tempfile.mkdtemp(prefix="triptych-bench-backup-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    profile = {k: getattr(args, k) for k in ("chunks", "memories", "nodes", "calls")}
    results: dict[str, Any] = {"profile": profile, "machine": f"{os.cpu_count()} cores",
                               "load_average_at_start": os.getloadavg()}  # fmt: skip
    marker = work / "profile.json"
    if not (marker.exists() and json.loads(marker.read_text()) == profile):
        shutil.rmtree(data, ignore_errors=True)
        results["build"] = build(data, args)
        marker.write_text(json.dumps(profile))
        print(json.dumps({"build": results["build"]}), file=sys.stderr, flush=True)
    results["data_dir"] = {
        "bytes": size_of(data),
        "files": {
            p.relative_to(data).as_posix(): p.stat().st_size for p in sorted(data.rglob("*")) if p.is_file()
        },
    }
    runs: list[dict[str, Any]] = []
    backup = work / "backup"
    for _ in range(args.rounds):
        for folder in (work / "copy", backup, work / "restored"):
            shutil.rmtree(folder, ignore_errors=True)
        cp_s, _ = timed(["cp", "-r", str(data), str(work / "copy")])
        shutil.rmtree(work / "copy")
        synced_s = copy_synced(data, work / "copy")
        backup_s, done = timed([str(TRIPTYCH), "backup", str(backup), "--data-dir", str(data)])
        restore_s, _ = timed([str(TRIPTYCH), "restore", str(backup), "--data-dir", str(work / "restored")])
        runs.append({
            "cp_r_s": round(cp_s, 2), "cp_r_bytes": size_of(work / "copy"), "cp_r_fsync_s": round(synced_s, 2),
            "backup_s": round(backup_s, 2), "backup_bytes": size_of(backup),
            # The copy itself, from the manifest (the command's start-up is the rest).
            "backup_copy_s": json.loads((backup / "manifest.json").read_text())["seconds"],
            "restore_s": round(restore_s, 2), "ratio_backup_to_cp": round(backup_s / cp_s, 2),
            "ratio_backup_to_cp_fsync": round(backup_s / synced_s, 2),
        })  # fmt: skip
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    results["rounds"] = runs
    results["median"] = (
        {}
        if not runs
        else {
            key: statistics.median(r[key] for r in runs)
            for key in (
                "cp_r_s",
                "cp_r_fsync_s",
                "backup_s",
                "backup_copy_s",
                "restore_s",
                "ratio_backup_to_cp",
                "ratio_backup_to_cp_fsync",
            )
        }
    )
    results["backup_stdout"] = done.stdout if runs else ""
    if args.serving:
        results["backup_while_serving"] = while_serving(data, work)
    for folder in (work / "copy", backup, work / "restored"):
        shutil.rmtree(folder, ignore_errors=True)
    if args.out is None:
        shutil.rmtree(work)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
