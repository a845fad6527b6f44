"""Authentication, workspace grants, roles and isolation on a server with auth enabled."""

from __future__ import annotations

import base64
import json
import time
import uuid

import httpx
import jwt
import pytest
from harness import SECRET, ServerProcess, bearer, mcp_session, token

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _unsigned() -> str:
    claims = {"sub": "mallory", "role": "admin", "workspace_ids": [], "exp": int(time.time()) + 600}
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."


INVALID_TOKEN = 'Bearer error="invalid_token"'
# Every Metronix door behind the bearer JWT: method, path, body, extra headers.
DOORS = {
    "mcp": ("POST", "/mcp", INITIALIZE, MCP_HEADERS),
    "rest-search": ("POST", "/api/v1/memory/search", {"query": "x", "agent_id": "a"}, {}),
    "rest-me": ("GET", "/api/v1/auth/me", None, {}),
    "chat-completions": (
        "POST",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}]},
        {},
    ),
    "models": ("GET", "/v1/models", None, {}),
}


@pytest.mark.engines("sqlite", "postgresql", "two-machines")  # server mode's /mcp is another endpoint class
@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        # No bearer token at all (RFC 6750 section 3.1: the challenge names no error)...
        (None, "Bearer"),
        ("Basic dXNlcjpwYXNz", "Bearer"),
        # ... and a token that was sent and refused.
        ("Bearer not-a-jwt", INVALID_TOKEN),
        (
            "Bearer "
            + jwt.encode({"sub": "a", "exp": int(time.time()) + 600}, "wrong-secret-wrong-secret-32bytes!"),
            INVALID_TOKEN,
        ),
        ("Bearer " + token(ttl=-30), INVALID_TOKEN),
        ("Bearer " + _unsigned(), INVALID_TOKEN),
    ],
    ids=["missing", "basic", "malformed", "bad-signature", "expired", "alg-none"],
)
def test_every_door_without_a_valid_bearer_jwt_is_401_with_the_references_challenge(
    auth_server: ServerProcess, door: str, authorization: str | None, challenge: str
) -> None:
    method, path, body, extra = DOORS[door]
    headers = {**extra, **({"Authorization": authorization} if authorization else {})}
    response = httpx.request(method, auth_server.url + path, json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == challenge
    error = response.json()["error"]
    # The chat doors answer in OpenAI's error shape, the others in Metronix's.
    assert error["code"] == ("invalid_api_key" if path.startswith("/v1/") else "AUTH_REQUIRED")


@pytest.mark.engines("sqlite", "two-machines")
def test_hadron_keeps_its_own_challenge_on_the_same_server(auth_server: ServerProcess) -> None:
    # Hadron never answers 401 without credentials (an anonymous caller may ask hadron_server_info), and
    # every 401 it sends is for a header it was given: its challenge stays error="invalid_token".
    url = auth_server.url + "/hadron/mcp"
    anonymous = httpx.post(url, json=INITIALIZE, headers=MCP_HEADERS)
    refused = httpx.post(url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer not-a-jwt"})
    assert anonymous.status_code == 200
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == INVALID_TOKEN


@pytest.mark.engines("sqlite", "two-machines")
def test_a_valid_token_opens_the_endpoint(auth_server: ServerProcess) -> None:
    headers = {**MCP_HEADERS, **bearer(token(workspaces=["A"]))}
    response = httpx.post(auth_server.url + "/mcp", json=INITIALIZE, headers=headers)
    assert response.status_code == 200


@pytest.mark.engines("sqlite", "postgresql", "two-machines")  # tenancy holds inside every query of both
async def test_an_ungranted_workspace_is_refused_without_revealing_whether_it_exists(
    auth_server: ServerProcess,
) -> None:
    existing, missing = "exists-" + uuid.uuid4().hex[:6], "missing-" + uuid.uuid4().hex[:6]
    async with mcp_session(auth_server.url + "/mcp", bearer(token(workspaces=[existing]))) as owner:
        await owner.call("metronix_store", content="Private roadmap.", workspace_id=existing)
    async with mcp_session(auth_server.url + "/mcp", bearer(token(user="eve", workspaces=["other"]))) as eve:
        refusals = [
            await eve.call("metronix_search_fast", query="roadmap", workspace_id=w)
            for w in (existing, missing)
        ]
        stores = [await eve.call("metronix_store", content="x", workspace_id=w) for w in (existing, missing)]
    for result in refusals + stores:
        assert result.error_code == "WORKSPACE_NOT_FOUND"
    # Same answer whether or not the workspace exists, apart from echoing the requested id.
    assert refusals[0].data["error"]["message"].replace(existing, "W") == refusals[1].data["error"][
        "message"
    ].replace(missing, "W")


@pytest.mark.engines("sqlite", "postgresql", "two-machines")  # tenancy holds inside every query of both
async def test_nothing_stored_in_workspace_a_reaches_a_caller_of_workspace_b(
    auth_server: ServerProcess,
) -> None:
    a, b = "iso-a-" + uuid.uuid4().hex[:6], "iso-b-" + uuid.uuid4().hex[:6]
    async with mcp_session(auth_server.url + "/mcp", bearer(token(workspaces=[a]))) as alice:
        await alice.call(
            "metronix_store", content="Quarterly revenue grew by 12 percent.", doc_label="fin", workspace_id=a
        )
    async with mcp_session(auth_server.url + "/mcp", bearer(token(user="bob", workspaces=[b]))) as bob:
        await bob.call(
            "metronix_store", content="The cafeteria opens at noon.", doc_label="misc", workspace_id=b
        )
        search = await bob.call(
            "metronix_search_fast", query="quarterly revenue grew", workspace_id=b, top_k=50
        )
        implicit = await bob.call("metronix_search_fast", query="quarterly revenue grew")
        get_same_label = await bob.call("metronix_get", doc_label="fin", workspace_id=b)
        get_default = await bob.call("metronix_get", doc_label="fin")
        status = await bob.call("metronix_status", workspace_id=b)
    labels = {r["doc_label"] for r in search.data["results"]} | {
        r["doc_label"] for r in implicit.data["results"]
    }
    assert labels == {"misc"}
    assert (
        get_same_label.error_code == "DOCUMENT_NOT_FOUND" and get_default.error_code == "DOCUMENT_NOT_FOUND"
    )
    assert status.data["documents"] == {"total": 1}


@pytest.mark.engines("sqlite", "two-machines")
async def test_an_omitted_workspace_selects_the_first_granted_one(auth_server: ServerProcess) -> None:
    first, second = "first-" + uuid.uuid4().hex[:6], "second-" + uuid.uuid4().hex[:6]
    async with mcp_session(auth_server.url + "/mcp", bearer(token(workspaces=[first, second]))) as mcp:
        await mcp.call("metronix_store", content="Lands in the first grant.", doc_label="x")
        # The schema advertises the reference's default "default", but an omitted (or null) workspace
        # still means the token's first grant, never a workspace "default" it does not grant.
        await mcp.call("memory_store", content="Also in the first grant.", agent_id="a", workspace_id=None)
        in_first = await mcp.call("metronix_get", doc_label="x", workspace_id=first)
        in_second = await mcp.call("metronix_get", doc_label="x", workspace_id=second)
        memories = await mcp.call("memory_list", agent_id="a", workspace_id=first)
        named = await mcp.call("memory_list", agent_id="a", workspace_id="default")
    assert in_first.data["content"] == "Lands in the first grant."
    assert in_second.error_code == "DOCUMENT_NOT_FOUND"
    assert [r["content"] for r in memories.data["records"]] == ["Also in the first grant."]
    assert named.error_code == "WORKSPACE_NOT_FOUND"  # naming "default" explicitly is asking for it


@pytest.mark.engines("sqlite", "postgresql", "two-machines")  # tenancy holds inside every query of both
async def test_a_viewer_may_read_but_not_write(auth_server: ServerProcess) -> None:
    workspace = "view-" + uuid.uuid4().hex[:6]
    async with mcp_session(auth_server.url + "/mcp", bearer(token(workspaces=[workspace]))) as editor:
        await editor.call(
            "metronix_store", content="Readable by viewers.", doc_label="doc", workspace_id=workspace
        )
    async with mcp_session(auth_server.url + "/mcp", bearer(token("vic", "viewer", [workspace]))) as viewer:
        read = await viewer.call("metronix_get", doc_label="doc", workspace_id=workspace)
        write = await viewer.call(
            "metronix_store", content="Overwrite!", doc_label="doc", workspace_id=workspace
        )
        again = await viewer.call("metronix_get", doc_label="doc", workspace_id=workspace)
    assert read.data["content"] == "Readable by viewers."
    assert write.error_code == "WORKSPACE_NOT_FOUND"
    assert write.data["error"]["details"] == {"reason": "FORBIDDEN", "role": "viewer"}
    assert "may read but not write" in write.data["error"]["message"]
    assert again.data["content"] == "Readable by viewers."


@pytest.mark.engines("sqlite", "postgresql", "two-machines")  # tenancy holds inside every query of both
async def test_an_admin_token_without_workspaces_reaches_every_workspace(auth_server: ServerProcess) -> None:
    workspace = "adm-" + uuid.uuid4().hex[:6]
    async with mcp_session(auth_server.url + "/mcp", bearer(token(workspaces=[workspace]))) as editor:
        await editor.call(
            "metronix_store", content="Seen by the admin.", doc_label="d", workspace_id=workspace
        )
    async with mcp_session(auth_server.url + "/mcp", bearer(token("root", "admin", []))) as admin:
        got = await admin.call("metronix_get", doc_label="d", workspace_id=workspace)
    assert got.data["content"] == "Seen by the admin."


def test_the_token_secret_is_the_one_the_cli_signs_with() -> None:
    claims = jwt.decode(token("u", "viewer", ["W"]), SECRET, algorithms=["HS256"])
    assert {k: claims[k] for k in ("sub", "role", "workspace_ids")} == {
        "sub": "u",
        "role": "viewer",
        "workspace_ids": ["W"],
    }
    assert claims["exp"] > claims["iat"]
