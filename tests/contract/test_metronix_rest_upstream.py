"""The REST doors driven the way the upstream product's own route tests and the Hermes plugin drive them.

Upstream (mtrnix/metronix-memory, ``tests/unit/api/test_memory_routes.py`` and its routes): ``agent_id``
is optional on search and list (the whole workspace), ``session_id`` lists a session, ``GET /facets`` and
``POST /records/batch-delete`` exist, ``status_filter: ["all"]`` is MCP-only (422 here) and a review's
``target_record_id`` belongs to ``merge_into`` alone (422 otherwise).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import ServerProcess, bearer, token
from hermes_metronix import drive_hermes


def ws() -> str:
    return "up-" + uuid.uuid4().hex[:8]


class Rest:
    """A workspace's REST doors with an editor's token."""

    def __init__(self, server: ServerProcess, workspace: str, role: str = "editor") -> None:
        self.base = f"{server.url}/api/v1/memory"
        self.workspace = workspace
        self.headers = bearer(token(workspaces=[workspace], role=role))

    def store(self, content: str, agent_id: str, **fields: Any) -> str:
        response = httpx.post(
            f"{self.base}/records",
            params={"workspace_id": self.workspace},
            json={"content": content, "agent_id": agent_id, **fields},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(
            f"{self.base}{path}", params={"workspace_id": self.workspace, **params}, headers=self.headers
        )

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.base}{path}", params={"workspace_id": self.workspace}, json=body, headers=self.headers
        )


def test_search_and_list_without_agent_id_cover_the_whole_workspace(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    mine = rest.store("Ana prefers tea in the afternoon.", "agent-a")
    theirs = rest.store("Ana drinks tea without sugar.", "agent-b")
    shared = rest.store("Ana's office is on the third floor.", "agent-b", scope="global")
    other = Rest(auth_server, ws())
    other.store("Ana prefers tea in the morning.", "agent-a")  # another tenant: never seen

    found = rest.post("/search", {"query": "what tea does Ana like", "top_k": 10})
    assert found.status_code == 200, found.text
    assert {r["record"]["id"] for r in found.json()["results"]} >= {mine, theirs}
    assert {r["record"]["workspace_id"] for r in found.json()["results"]} == {rest.workspace}

    listed = rest.get("/records").json()
    assert {r["id"] for r in listed["records"]} == {mine, theirs, shared}
    assert listed["total"] == 3 and listed["has_more"] is False
    # With an agent, its own view as before: its per-agent records and the workspace's global ones.
    assert {r["id"] for r in rest.get("/records", agent_id="agent-a").json()["records"]} == {mine, shared}


def test_list_by_session_ignores_agent_and_scope(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    asked = rest.store("User asked about the Lisbon trip.", "hermes", scope="session", session_id="s-1")
    answered = rest.store("Assistant suggested the train.", "helper", scope="session", session_id="s-1")
    rest.store("Unrelated session note.", "hermes", scope="session", session_id="s-2")
    rest.store("A persistent fact.", "hermes")

    listed = rest.get("/records", session_id="s-1", agent_id="someone-else", scope="global").json()
    assert {r["id"] for r in listed["records"]} == {asked, answered}
    assert listed["total"] == 2 and {r["session_id"] for r in listed["records"]} == {"s-1"}


def test_list_filters_by_source_type_and_facets_name_what_is_there(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    assert rest.get("/facets").json() == {"kinds": [], "source_types": []}
    turn = rest.store("User said hello.", "hermes", source_type="hermes_turn_user")
    write = rest.store("User likes jazz.", "hermes", source_type="hermes_memory_write", kind="preference")
    rest.store("Plain note.", "hermes")

    only_turns = rest.get("/records", source_type_filter="hermes_turn_user").json()
    assert [r["id"] for r in only_turns["records"]] == [turn]
    both = rest.get("/records", source_type_filter=["hermes_turn_user", "hermes_memory_write"]).json()
    assert {r["id"] for r in both["records"]} == {turn, write}

    facets = rest.get("/facets")
    assert facets.status_code == 200
    assert facets.json() == {
        "kinds": ["fact", "preference"],
        "source_types": ["hermes_memory_write", "hermes_turn_user"],
    }


def test_batch_delete_reports_deleted_and_not_found(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    first = rest.store("First fact to forget.", "hermes")
    second = rest.store("Second fact to forget.", "hermes")
    kept = rest.store("A fact to keep.", "hermes")
    foreign = Rest(auth_server, ws()).store("Another tenant's fact.", "hermes")

    response = rest.post(
        "/records/batch-delete", {"record_ids": [first, second, "missing-id", foreign], "agent_id": "hermes"}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": [first, second], "not_found": ["missing-id", foreign]}
    assert [r["id"] for r in rest.get("/records").json()["records"]] == [kept]
    # The other tenant's record is untouched.
    assert rest.post("/records/batch-delete", {"record_ids": [first]}).json() == {
        "deleted": [],
        "not_found": [first],
    }

    empty = rest.post("/records/batch-delete", {"record_ids": []})
    assert empty.status_code == 422 and "record_ids" in empty.json()["error"]["message"]
    viewer = Rest(auth_server, rest.workspace, role="viewer")
    refused = viewer.post("/records/batch-delete", {"record_ids": [kept]})
    assert refused.status_code == 403
    assert [r["id"] for r in rest.get("/records").json()["records"]] == [kept]


def test_the_all_status_sentinel_is_refused_at_rest(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    searched = rest.post("/search", {"query": "anything", "status_filter": ["all"]})
    assert searched.status_code == 422
    assert searched.json()["error"]["code"] == "INVALID_PARAMS"
    assert "status_filter" in searched.json()["error"]["message"]
    listed = rest.get("/records", status_filter="all")
    assert listed.status_code == 422


def test_review_resolve_takes_a_target_only_with_merge_into(auth_server: ServerProcess) -> None:
    rest = Rest(auth_server, ws())
    rest.store("User prefers dark mode", "a")
    rest.store("User prefers light mode", "a")
    entry = rest.get("/review").json()["entries"][0]["id"]

    keep_with_target = rest.post(f"/review/{entry}", {"action": "keep", "target_record_id": "x"})
    assert keep_with_target.status_code == 422
    assert "only valid when action=merge_into" in keep_with_target.json()["error"]["message"]
    merge_without = rest.post(f"/review/{entry}", {"action": "merge_into"})
    assert merge_without.status_code == 422
    assert rest.get("/review").json()["total"] == 1  # nothing was resolved by the refused calls
    assert rest.post(f"/review/{entry}", {"action": "keep"}).status_code == 204


# -- the hermes-memory-metronix plugin, in its default configuration -------------------------------


@pytest.mark.engines("sqlite", "postgresql")
def test_the_hermes_plugin_default_configuration_end_to_end(
    auth_server: ServerProcess, tmp_path: Path
) -> None:
    workspace = ws()
    # What the plugin's README asks for: a base URL, a workspace and a token; everything else default.
    env = {
        "METRONIX_BASE_URL": auth_server.url,
        "METRONIX_WORKSPACE_ID": workspace,
        "METRONIX_AUTH_TOKEN": token(workspaces=[workspace]),
        "HERMES_HOME": str(tmp_path),
    }
    # Another agent's memory in the same workspace: the workspace-scope read finds it too.
    Rest(auth_server, workspace).store("The user's laptop is a ThinkPad X1.", "planner")
    editor = "which editor does the user prefer"
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("provider", "is_available", {}),
        ("provider", "initialize", {"session_id": "session-1", "hermes_home": str(tmp_path)}),
        ("provider", "on_memory_write", {"action": "add", "target": "user",
                                         "content": "The user prefers the Helix editor over Vim."}),
        ("provider", "sync_turn", {"user_content": "Which editor should I install?",
                                   "assistant_content": "Helix, as you prefer it.", "session_id": "session-1"}),
        ("provider", "queue_prefetch", {"query": editor, "session_id": "session-1"}),
        # Waits for the plugin's background worker: writes first, then the prefetch.
        ("provider", "shutdown", {}),
        ("provider", "prefetch", {"query": editor, "session_id": "session-1"}),
        # The plugin's client in workspace-scope mode sends no agent_id: the whole workspace answers.
        ("provider._client", "search_memory", {"query": "what laptop does the user have", "top_k": 8}),
    ]  # fmt: skip
    results, warnings = drive_hermes(steps, env=env)
    assert [r for r in results if "error" in r] == [] and warnings == []
    available, context, found = results[0]["ok"], results[6]["ok"], results[7]["ok"]
    assert available is True
    assert context.startswith("<memory-context>") and "Helix editor" in context

    rest = Rest(auth_server, workspace)
    stored = rest.get("/records").json()["records"]
    by_source = {r["source_type"]: r for r in stored}
    assert by_source["hermes_memory_write"]["scope"] == "global"
    assert by_source["hermes_memory_write"]["kind"] == "preference"
    assert {r["session_id"] for r in rest.get("/records", session_id="session-1").json()["records"]} == {
        "session-1"
    }
    assert len(rest.get("/records", session_id="session-1").json()["records"]) == 2

    assert found and found[0]["record"]["content"] == "The user's laptop is a ThinkPad X1."
