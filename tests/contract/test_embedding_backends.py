"""The OpenAI-compatible embedding backend, the model check and `triptych reindex`, `triptych kb import`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from harness import TRIPTYCH, ServerProcess, http_server, mcp_session

DIM = 32


def hashed_bag_of_words(text: str) -> list[float]:
    """A deterministic stand-in model: words hashed into DIM buckets (real arithmetic, no network)."""
    vector = np.zeros(DIM)
    for word in text.lower().split():
        vector[int(hashlib.md5(word.strip(".,").encode()).hexdigest(), 16) % DIM] += 1.0
    return (vector / (np.linalg.norm(vector) or 1.0)).tolist()


class EmbeddingsHandler(BaseHTTPRequestHandler):
    requests_seen: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        EmbeddingsHandler.requests_seen.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), **body}
        )
        if any("FAIL-EMBEDDING" in text for text in body["input"]):
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model crashed")
            return
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_bag_of_words(t)}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def embeddings_url() -> Iterator[str]:
    with http_server(EmbeddingsHandler) as url:
        yield url + "/v1"


async def test_remote_embeddings_model_check_and_reindex(tmp_path: Path, embeddings_url: str) -> None:
    data = tmp_path / "data"
    remote = {
        "TRIPTYCH_EMBED_URL": embeddings_url,
        "TRIPTYCH_EMBED_MODEL": "bow-32",
        "TRIPTYCH_EMBED_API_KEY": "k1",
    }
    server = ServerProcess(data, remote).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            await mcp.call(
                "metronix_store", content="Tomatoes need full sun and warm soil.", doc_label="garden"
            )
            await mcp.call(
                "metronix_store", content="Invoices are due within thirty days.", doc_label="billing"
            )
            found = await mcp.call("metronix_search_fast", query="tomatoes sun", top_k=1)
            memory = await mcp.call("memory_store", content="The user waters tomatoes at dawn", agent_id="a1")
            status = await mcp.call("metronix_status")
            failed = await mcp.call("metronix_store", content="FAIL-EMBEDDING please", doc_label="garden")
            still = await mcp.call("metronix_get", doc_label="garden")
    finally:
        server.stop()
    assert found.data["results"][0]["doc_label"] == "garden"
    assert memory.data["id"]
    assert status.data["embedding_model"] == "bow-32"
    assert failed.error_code == "INGESTION_FAILED"
    assert "TRIPTYCH_EMBED_URL" in failed.data["error"]["hint"]
    assert still.data["content"] == "Tomatoes need full sun and warm soil."
    seen = EmbeddingsHandler.requests_seen[-1]
    assert seen["path"] == "/v1/embeddings" and seen["auth"] == "Bearer k1" and seen["model"] == "bow-32"

    # The same data with the bundled model: refused with a clear message, never silently mixed.
    server = ServerProcess(data, {}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            refused = await mcp.call("metronix_search_fast", query="tomatoes")
            memory_refused = await mcp.call("memory_search", query="tomatoes", agent_id="a1")
            listed = await mcp.call("memory_list", agent_id="a1")
    finally:
        server.stop()
    assert refused.is_error and refused.data["error"]["details"]["reason"] == "EMBEDDING_MISMATCH"
    assert "bow-32" in refused.data["error"]["message"]
    assert "triptych reindex" in refused.data["error"]["hint"]
    # Memory records too: refused for search, still listed.
    assert (
        memory_refused.is_error and memory_refused.data["error"]["details"]["reason"] == "EMBEDDING_MISMATCH"
    )
    assert "bow-32" in memory_refused.data["error"]["message"]
    assert [r["id"] for r in listed.data["records"]] == [memory.data["id"]]

    out = subprocess.run(
        [TRIPTYCH, "reindex", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
    )
    assert (
        "re-embedded 2 chunks and 1 memory records with all-MiniLM-L6-v2-onnx-qint8-dynamic (384 dimensions)"
        in out.stdout
    )

    server = ServerProcess(data, {}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            found = await mcp.call("metronix_search_fast", query="when must invoices be paid", top_k=1)
            recalled = await mcp.call("memory_search", query="when are tomatoes watered", agent_id="a1")
    finally:
        server.stop()
    assert found.data["results"][0]["doc_label"] == "billing"
    assert recalled.data["results"][0]["record"]["id"] == memory.data["id"]


def test_kb_import_ingests_a_folder_with_a_summary_and_a_rerun_is_a_no_op(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "readme.md").write_text("# Onboarding\n\nNew hires get a laptop on day one.\n")
    (docs / "guides" / "deploy.html").write_text(
        "<html><head><title>Deploying</title><script>var x=1;</script></head><body><p>Run the pipeline.</p></body></html>"
    )
    (docs / "notes.txt").write_text("Plain notes about the office plants.")
    (docs / "image.png").write_bytes(b"\x89PNG")
    command = [
        TRIPTYCH,
        "kb",
        "import",
        str(docs),
        "--workspace",
        "handbook",
        "--data-dir",
        str(tmp_path / "data"),
    ]

    first = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "stored 3 documents (3 new, 0 changed; 3 chunks), 0 unchanged, 1 skipped, 0 failed" in first.stdout
    assert "importing" in first.stderr  # the progress bar
    assert f"skipped {docs / 'image.png'}: binary content (a PNG image)" in first.stderr
    second = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "stored 0 documents (0 new, 0 changed; 0 chunks), 3 unchanged, 1 skipped" in second.stdout

    missing = subprocess.run(
        [*command[:3], str(tmp_path / "nope"), *command[4:]], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
