"""The OpenAI-compatible answer endpoint, driven by the official `openai` client against a real server,
with a small OpenAI-compatible upstream on loopback that records the prompts it receives."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from harness import SECRET, ServerProcess, bearer, mcp_session, token


class Upstream(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Upstream.received.append(body)
        question = body["messages"][-1]["content"]
        if "UPSTREAM-FAIL" in question:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "boom"}')
            return
        if "UPSTREAM-SLOW" in question:
            time.sleep(4)
        answer = "Invoices are approved by the CFO [1]."
        if "ANSWER:" in question:  # the test dictates the answer (its citation markers)
            answer = question.split("ANSWER:", 1)[1].strip()
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            half = len(answer) // 2
            for piece in (answer[:half], answer[half:]):
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        payload = json.dumps(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def rag_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    env = {
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_LLM_URL": f"http://127.0.0.1:{upstream.server_address[1]}/v1",
        "TRIPTYCH_LLM_MODEL": "fake-llm",
        "TRIPTYCH_LLM_API_KEY": "upstream-key",
        "TRIPTYCH_LLM_TIMEOUT": "2",
    }
    server = ServerProcess(tmp_path_factory.mktemp("rag") / "data", env).start()
    yield server
    server.stop()
    upstream.shutdown()
    upstream.server_close()


async def _seed(url: str, tok: str, workspace: str, docs: dict[str, str]) -> None:
    async with mcp_session(url + "/mcp", bearer(tok) if tok else {}) as mcp:
        for label, text in docs.items():
            await mcp.call(
                "metronix_store", content=text, doc_label=label, title=label, workspace_id=workspace
            )


@pytest.fixture(scope="module")
def workspaces(rag_server: ServerProcess) -> tuple[str, str]:
    import anyio

    a, b = "ans-a-" + uuid.uuid4().hex[:6], "ans-b-" + uuid.uuid4().hex[:6]
    anyio.run(
        _seed,
        rag_server.url,
        token(workspaces=[a]),
        a,
        {"finance": "Invoices are approved by the CFO. Payment runs on Fridays."},
    )
    anyio.run(
        _seed,
        rag_server.url,
        token(workspaces=[b]),
        b,
        {"secret": "Invoices in project Nightjar are approved by Mallory."},
    )
    return a, b


def client(server: ServerProcess, tok: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key=tok, default_headers=headers, max_retries=0, timeout=20
    )


def test_the_openai_client_gets_a_cited_answer_built_from_its_workspace_only(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    a, _ = workspaces
    Upstream.received.clear()
    response = client(rag_server, token(workspaces=[a])).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}]
    )
    assert response.choices[0].message.content == "Invoices are approved by the CFO [1]."
    assert response.model == "triptych-rag/fake-llm"
    extra = response.model_extra or {}
    assert extra["citations"] == [{"index": 1, "doc_label": "finance", "title": "finance", "url": None}]
    prompt = Upstream.received[-1]
    assert prompt["model"] == "fake-llm"
    system = prompt["messages"][0]["content"]
    assert "Invoices are approved by the CFO" in system and "[1]" in system
    assert "Mallory" not in json.dumps(prompt)  # another workspace's passages never reach the upstream


def test_streaming_relays_the_upstream_and_ends_with_citations(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    a, _ = workspaces
    stream = client(rag_server, token(workspaces=[a])).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Invoices are approved by the CFO [1]."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].model_extra or {})["citations"][0]["doc_label"] == "finance"


@pytest.mark.parametrize(
    ("answer", "indexes"),
    [
        ("The holidays are in August [2].", [2]),
        ("Parking is free [3] and invoices wait for the CFO [1][3].", [1, 3]),
        ("Both [1, 2] say so.", [1, 2]),
        ("I do not know.", []),
        ("A marker past the passages [9] cites nothing.", []),
    ],
    ids=["one", "adjacent", "comma", "none", "out-of-range"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_citations_list_only_the_passages_the_answer_cites(
    rag_server: ServerProcess, answer: str, indexes: list[int], stream: bool
) -> None:
    import anyio

    workspace = "cite-" + uuid.uuid4().hex[:6]
    tok = token(workspaces=[workspace])
    docs = {
        "finance": "Invoices are approved by the CFO.",
        "holidays": "The office closes for holidays in August.",
        "parking": "Parking is free on weekends.",
    }
    anyio.run(_seed, rag_server.url, tok, workspace, docs)
    ask = {"model": "triptych-rag", "messages": [{"role": "user", "content": "office ANSWER: " + answer}]}
    if stream:
        chunks = list(client(rag_server, tok).chat.completions.create(**ask, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        extra = chunks[-1].model_extra or {}
    else:
        response = client(rag_server, tok).chat.completions.create(**ask)
        text, extra = response.choices[0].message.content or "", response.model_extra or {}
    assert text == answer
    assert extra["retrieval"]["passages"] == 3  # every passage was retrieved; not every one is cited
    assert [c["index"] for c in extra["citations"]] == indexes


def test_x_workspace_id_selects_a_granted_workspace_and_refuses_others(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    a, b = workspaces
    Upstream.received.clear()
    both = token(workspaces=[a, b])
    client(rag_server, both, **{"X-Workspace-Id": b}).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}]
    )
    assert "Mallory" in Upstream.received[-1]["messages"][0]["content"]
    with pytest.raises(openai.PermissionDeniedError):
        client(rag_server, token(workspaces=[a]), **{"X-Workspace-Id": b}).chat.completions.create(
            model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}]
        )


def test_errors_are_openai_style(rag_server: ServerProcess, workspaces: tuple[str, str]) -> None:
    a, _ = workspaces
    good = client(rag_server, token(workspaces=[a]))
    with pytest.raises(openai.AuthenticationError):
        client(rag_server, "not-a-jwt").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError) as bad:
        good.chat.completions.create(model="m", messages=[])
    assert bad.value.status_code == 400 and "messages" in str(bad.value)
    with pytest.raises(openai.APIStatusError) as failed:
        good.chat.completions.create(
            model="triptych-rag", messages=[{"role": "user", "content": "UPSTREAM-FAIL invoices"}]
        )
    assert failed.value.status_code == 502 and "HTTP 500" in str(failed.value)
    with pytest.raises(openai.APIStatusError) as slow:
        good.chat.completions.create(
            model="triptych-rag", messages=[{"role": "user", "content": "UPSTREAM-SLOW invoices"}]
        )
    assert slow.value.status_code == 504


def test_a_client_disconnect_cancels_the_upstream_call(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    a, _ = workspaces
    body = {"model": "triptych-rag", "messages": [{"role": "user", "content": "UPSTREAM-SLOW invoices"}]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            rag_server.url + "/v1/chat/completions",
            json=body,
            headers=bearer(token(workspaces=[a])),
            timeout=0.5,
        )
    deadline = time.monotonic() + 5
    while "cancelling the upstream call" not in rag_server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "client disconnected: cancelling the upstream call" in rag_server.log()


def test_models_lists_the_rag_and_extractive_models(rag_server: ServerProcess) -> None:
    models = client(rag_server, token()).models.list()
    assert [m.id for m in models.data] == ["triptych-rag", "triptych-extractive"]


@pytest.mark.engines("sqlite", "two-machines")
def test_without_an_llm_the_answer_is_extractive_and_only_quotes_passages(
    open_server: ServerProcess, tmp_path: Path
) -> None:
    import anyio

    workspace = "extr-" + uuid.uuid4().hex[:6]
    text = (
        "The office opens at 9. Parking is free on weekends. The cafeteria serves lunch from noon until two."
    )
    anyio.run(_seed, open_server.url, "", workspace, {"handbook": text})
    response = client(open_server, "unused", **{"X-Workspace-Id": workspace}).chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "When does the cafeteria serve lunch?"}]
    )
    answer = response.choices[0].message.content or ""
    assert response.model == "triptych-extractive"
    assert answer.startswith("The cafeteria serves lunch from noon until two. [1]")
    for sentence in answer.replace("[1]", "").split(". "):
        assert sentence.strip(" .") in text
    assert (response.model_extra or {})["citations"][0]["doc_label"] == "handbook"


def test_an_empty_workspace_answers_with_a_hint_and_never_asks_the_upstream(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    empty = "ans-empty-" + uuid.uuid4().hex[:6]
    Upstream.received.clear()
    response = client(rag_server, token(workspaces=[empty])).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}]
    )
    answer = response.choices[0].message.content or ""
    assert f"workspace '{empty}' holds no documents yet" in answer
    assert f"triptych kb import PATH --workspace {empty}" in answer and "X-Workspace-Id" in answer
    extra = response.model_extra or {}
    assert extra["retrieval"]["workspace_id"] == empty and extra["retrieval"]["empty_workspace"] is True
    assert extra["citations"] == []
    assert Upstream.received == []  # nothing to ground an answer on: the LLM is not asked to guess
    stream = client(rag_server, token(workspaces=[empty])).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == answer


def test_with_auth_the_token_grant_chooses_the_workspace_and_says_which(
    rag_server: ServerProcess, workspaces: tuple[str, str]
) -> None:
    a, b = workspaces
    Upstream.received.clear()
    # No X-Workspace-Id: the token's first granted workspace answers (never "default").
    response = client(rag_server, token(workspaces=[b, a])).chat.completions.create(
        model="triptych-rag", messages=[{"role": "user", "content": "Who approves invoices?"}]
    )
    assert (response.model_extra or {})["retrieval"]["workspace_id"] == b
    assert "Mallory" in Upstream.received[-1]["messages"][0]["content"]


@pytest.mark.engines("sqlite", "two-machines")
def test_without_auth_the_header_chooses_and_the_default_workspace_is_named(
    open_server: ServerProcess,
) -> None:
    response = client(open_server, "unused").chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "Is anything stored?"}]
    )
    assert (response.model_extra or {})["retrieval"]["workspace_id"] == "default"
    chosen = "ans-hdr-" + uuid.uuid4().hex[:6]
    named = client(open_server, "unused", **{"X-Workspace-Id": chosen}).chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "Is anything stored?"}]
    )
    assert (named.model_extra or {})["retrieval"] == {
        **(named.model_extra or {})["retrieval"],
        "workspace_id": chosen,
        "empty_workspace": True,
    }
