"""The Metronix REST doors, driven over HTTP and by the upstream `hermes-memory-metronix` client, unchanged."""

from __future__ import annotations

import uuid

import httpx
import pytest
from harness import ServerProcess, bearer, mcp_session, token
from hermes_metronix import drive_hermes

# The same answers on both storage engines (server mode, issue 16).
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")


def ws() -> str:
    return "rest-" + uuid.uuid4().hex[:8]


def test_the_hermes_client_works_unchanged_against_triptych(auth_server: ServerProcess) -> None:
    workspace = ws()
    coffee = "The user prefers espresso over filter coffee."
    steps: list[tuple[str, str, dict[str, object]]] = [
        ("client", "ping", {}),
        ("client", "create_memory", {
            "content": coffee, "agent_id": "hermes", "scope": "global", "kind": "preference",
            "source_type": "hermes_memory_write", "tags": ["hermes", "user"], "metadata": {"target": "user"},
        }),
        ("client", "create_memory", {
            "content": "We talked about the trip to Lisbon.", "agent_id": "hermes", "scope": "session",
            "kind": "fact", "source_type": "hermes_turn_user", "session_id": "s-1", "metadata": {"role": "user"},
        }),
        ("client", "search_memory", {"query": "what coffee does the user like", "top_k": 8, "agent_id": "hermes"}),
        ("client", "store_document", {"content": "Onboarding checklist: laptop, badge, accounts.", "title": "Onboarding"}),
    ]  # fmt: skip
    client = {
        "base_url": auth_server.url,
        "workspace_id": workspace,
        "auth_token": token(workspaces=[workspace]),
    }
    results, _ = drive_hermes(steps, client=client)
    ping, created, session, search, stored = (r["ok"] for r in results)
    assert ping["status"] == "ok"
    assert created["content"] == coffee
    assert (
        created["kind"] == "preference"
        and created["scope"] == "global"
        and created["workspace_id"] == workspace
    )
    assert session["session_id"] == "s-1" and session["ttl_expires_at"] is not None
    assert search[0]["record"]["id"] == created["id"]
    assert {"score", "dense_score", "sparse_score", "graph_score", "rank"} <= set(search[0])
    assert stored["success"] is True and stored["chunks_stored"] == 1

    delete = ("client", "delete_memory", {"record_id": created["id"], "agent_id": "hermes"})
    (deleted, again), _ = drive_hermes([delete, delete], client=client)
    assert "error" not in deleted
    assert again == {"error": "HTTPError", "status": 404}


def test_rest_writes_are_visible_to_mcp_and_the_other_way_round(auth_server: ServerProcess) -> None:
    workspace = ws()
    headers = bearer(token(workspaces=[workspace]))
    created = httpx.post(
        f"{auth_server.url}/api/v1/memory/records?workspace_id={workspace}",
        json={"content": "Deploys happen on Tuesdays.", "agent_id": "ops"},
        headers=headers,
    )
    assert created.status_code == 201
    record_id = created.json()["id"]

    async def via_mcp() -> dict[str, object]:
        async with mcp_session(auth_server.url + "/mcp", headers) as mcp:
            return (await mcp.call("memory_list", agent_id="ops", workspace_id=workspace)).data

    import anyio

    listed = anyio.run(via_mcp)
    assert [r["id"] for r in listed["records"]] == [record_id]  # type: ignore[index]

    got = httpx.get(
        f"{auth_server.url}/api/v1/memory/records/{record_id}?workspace_id={workspace}", headers=headers
    )
    assert got.status_code == 200 and got.json()["content"] == "Deploys happen on Tuesdays."


def test_rest_list_pages_honestly_and_shows_every_status_by_default(auth_server: ServerProcess) -> None:
    workspace = ws()
    headers = bearer(token(workspaces=[workspace]))
    base = f"{auth_server.url}/api/v1/memory/records"
    for i in range(5):
        httpx.post(
            f"{base}?workspace_id={workspace}",
            json={
                "content": f"Fact number {i} about the garden.",
                "agent_id": "a",
                "tags": ["g"] if i % 2 else [],
            },
            headers=headers,
        )
    page = httpx.get(
        base, params={"workspace_id": workspace, "agent_id": "a", "limit": 2, "offset": 1}, headers=headers
    ).json()
    assert (page["count"], page["total"], page["limit"], page["offset"], page["has_more"]) == (
        2,
        5,
        2,
        1,
        True,
    )
    tagged = httpx.get(
        base, params={"workspace_id": workspace, "agent_id": "a", "tags": "g"}, headers=headers
    ).json()
    assert tagged["total"] == 2


def test_rest_search_default_excludes_archived_and_superseded_only(auth_server: ServerProcess) -> None:
    workspace = ws()
    headers = bearer(token(workspaces=[workspace]))
    url = auth_server.url

    async def setup() -> tuple[str, str]:
        async with mcp_session(url + "/mcp", headers) as mcp:
            first = await mcp.call(
                "memory_store", content="User prefers dark mode", agent_id="a", workspace_id=workspace
            )
            second = await mcp.call(
                "memory_store", content="User prefers light mode", agent_id="a", workspace_id=workspace
            )
            return str(first.data["id"]), str(second.data["id"])

    import anyio

    first_id, second_id = anyio.run(setup)
    search = {"query": "which mode does the user prefer", "agent_id": "a", "top_k": 10}
    rest = httpx.post(
        f"{url}/api/v1/memory/search?workspace_id={workspace}", json=search, headers=headers
    ).json()
    statuses = {r["record"]["id"]: r["record"]["status"] for r in rest["results"]}
    assert statuses == {first_id: "active", second_id: "conflicted"}  # REST shows the conflicted record

    review = httpx.get(
        f"{url}/api/v1/memory/review", params={"workspace_id": workspace}, headers=headers
    ).json()
    assert review["total"] == 1 and review["entries"][0]["reason"] == "possible_contradiction"
    resolved = httpx.post(
        f"{url}/api/v1/memory/review/{review['entries'][0]['id']}?workspace_id={workspace}",
        json={"action": "archive", "notes": "light mode was a typo"},
        headers=headers,
    )
    assert resolved.status_code == 204
    rest = httpx.post(
        f"{url}/api/v1/memory/search?workspace_id={workspace}", json=search, headers=headers
    ).json()
    assert [r["record"]["id"] for r in rest["results"]] == [first_id]
    explicit = httpx.post(
        f"{url}/api/v1/memory/search?workspace_id={workspace}",
        json={**search, "status_filter": ["archived"]},
        headers=headers,
    ).json()
    assert [r["record"]["id"] for r in explicit["results"]] == [second_id]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/api/v1/auth/me", None, 401),
        ("POST", "/api/v1/memory/search", {"query": "x", "agent_id": "a"}, 401),
    ],
)
def test_rest_without_a_token_is_401_with_www_authenticate(
    auth_server: ServerProcess, method: str, path: str, body: dict[str, str] | None, status: int
) -> None:
    response = httpx.request(method, auth_server.url + path, json=body)
    assert response.status_code == status
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "AUTH_REQUIRED"


def test_rest_status_codes_for_forbidden_missing_and_invalid(auth_server: ServerProcess) -> None:
    workspace = ws()
    url = auth_server.url
    editor, viewer = bearer(token(workspaces=[workspace])), bearer(token("v", "viewer", [workspace]))
    other = httpx.get(
        f"{url}/api/v1/memory/records",
        params={"workspace_id": "someone-else", "agent_id": "a"},
        headers=editor,
    )
    assert other.status_code == 403 and other.json()["error"]["code"] == "WORKSPACE_NOT_FOUND"
    write = httpx.post(
        f"{url}/api/v1/memory/records?workspace_id={workspace}",
        json={"content": "x", "agent_id": "a"},
        headers=viewer,
    )
    assert write.status_code == 403
    assert write.json()["error"]["code"] == "WORKSPACE_NOT_FOUND"
    assert write.json()["error"]["details"] == {"reason": "FORBIDDEN", "role": "viewer"}
    missing = httpx.get(f"{url}/api/v1/memory/records/nope?workspace_id={workspace}", headers=editor)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "DOCUMENT_NOT_FOUND"
    invalid = httpx.post(
        f"{url}/api/v1/memory/records?workspace_id={workspace}", json={"content": "x"}, headers=editor
    )
    assert invalid.status_code == 422 and "agent_id" in invalid.json()["error"]["message"]
    not_json = httpx.post(
        f"{url}/api/v1/memory/search?workspace_id={workspace}", content=b"{nope", headers=editor
    )
    assert not_json.status_code == 422 and "JSON" in not_json.json()["error"]["message"]
    bad_limit = httpx.get(
        f"{url}/api/v1/memory/records",
        params={"workspace_id": workspace, "agent_id": "a", "limit": "many"},
        headers=editor,
    )
    assert bad_limit.status_code == 422
    resolve = httpx.post(
        f"{url}/api/v1/memory/review/review_missing?workspace_id={workspace}",
        json={"action": "keep"},
        headers=editor,
    )
    assert resolve.status_code == 404


def test_auth_me_describes_the_caller(auth_server: ServerProcess) -> None:
    me = httpx.get(
        auth_server.url + "/api/v1/auth/me", headers=bearer(token("zoe", "viewer", ["W1", "W2"]))
    ).json()
    assert me == {
        "status": "ok",
        "user_id": "zoe",
        "role": "viewer",
        "workspace_ids": ["W1", "W2"],
        "all_workspaces": False,
        "auth_enabled": True,
    }
