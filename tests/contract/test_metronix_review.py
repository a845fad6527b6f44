"""The freshness pipeline and the memory review queue through the official MCP client on a real server.

Resolution side effects the tools do not return (verification_state, the machine_events audit row)
are read straight from the server's database (``metronix.db``, or its PostgreSQL database).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from typing import Any

import psycopg
import pytest
from harness import McpSession, ServerProcess, ToolResult, mcp_session
from psycopg.rows import dict_row

# The same answers on both storage engines (server mode, issue 16).
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")

DARK, LIGHT = "User prefers dark mode", "User prefers light mode"
NIGHTLY = "The deploy pipeline runs on GitHub Actions every night at 2am"
NIGHTLY_UTC = "The deploy pipeline runs on GitHub Actions every night at 2am UTC"
WIFI, WIFI_REWORDED = (
    "User works at Google.",
    "User works at Google on the Maps team.",
)
UNRELATED = "The cafeteria serves pasta on fridays"


def ws() -> str:
    return "rev-" + uuid.uuid4().hex[:8]


def ok(result: ToolResult) -> dict[str, Any]:
    assert not result.is_error, result.data
    return result.data


def rows(server: ServerProcess, sql: str, *params: Any) -> list[dict[str, Any]]:
    url = server.env.get("TRIPTYCH_DATABASE_URL")
    if url:
        with psycopg.connect(url, row_factory=dict_row) as pg:
            return pg.execute(sql.replace("?", "%s").encode(), params).fetchall()
    with closing(sqlite3.connect(server.data_dir / "metronix.db")) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql, params)]


def record_row(server: ServerProcess, record_id: str) -> dict[str, Any]:
    found = rows(
        server,
        "SELECT id, workspace_id, status, verification_state, superseded_by, content"
        " FROM memory_records WHERE id = ?",
        record_id,
    )
    assert len(found) == 1, f"record {record_id} is not in the database"
    return found[0]


async def store(mcp: McpSession, workspace: str, content: str, agent: str = "hermes") -> str:
    result = await mcp.call("memory_store", content=content, agent_id=agent, workspace_id=workspace)
    return str(ok(result)["id"])


async def statuses(mcp: McpSession, workspace: str, agent: str = "hermes") -> dict[str, str]:
    listed = ok(
        await mcp.call("memory_list", agent_id=agent, status=["all"], limit=100, workspace_id=workspace)
    )
    return {r["id"]: r["status"] for r in listed["records"]}


async def contradiction(mcp: McpSession, workspace: str) -> tuple[str, str, dict[str, Any]]:
    """Store dark then light mode: the light record is filed as contradicting the dark one."""
    dark = await store(mcp, workspace, DARK)
    light = await store(mcp, workspace, LIGHT)
    entries = ok(await mcp.call("memory_review_list", record_id=light, workspace_id=workspace))["entries"]
    assert len(entries) == 1
    return dark, light, entries[0]


# -- the detectors file reviews and move the new record's status -------------------------------------


async def test_a_near_duplicate_files_possible_duplicate_and_moves_the_new_record_to_review_needed(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        old = await store(mcp, w, NIGHTLY)
        new = await store(mcp, w, NIGHTLY_UTC)
        reviews = ok(await mcp.call("memory_review_list", workspace_id=w))
        status = await statuses(mcp, w)
        search = ok(
            await mcp.call(
                "memory_search", query="deploy pipeline nightly", agent_id="hermes", workspace_id=w
            )
        )
    assert reviews["total"] == reviews["count"] == 1
    entry = reviews["entries"][0]
    assert {
        k: entry[k] for k in ("workspace_id", "target_id", "target_kind", "reason", "related_record_id")
    } == {
        "workspace_id": w,
        "target_id": new,
        "target_kind": "memory_record",
        "reason": "possible_duplicate",
        "related_record_id": old,
    }
    assert entry["content"] == NIGHTLY_UTC
    assert 0.85 <= entry["confidence"] <= 1.0
    assert entry["id"].startswith("review_") and entry["created_at"]
    assert status == {old: "active", new: "review_needed"}
    # The default search shows active records only: the record under review stays out of it.
    assert [r["record"]["id"] for r in search["results"]] == [old]


async def test_dark_then_light_mode_files_possible_contradiction_and_moves_the_new_record_to_conflicted(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        dark, light, entry = await contradiction(mcp, w)
        status = await statuses(mcp, w)
    assert (entry["reason"], entry["target_id"], entry["related_record_id"]) == (
        "possible_contradiction",
        light,
        dark,
    )
    assert entry["content"] == LIGHT and 0 < entry["confidence"] <= 1
    assert status == {dark: "active", light: "conflicted"}


async def test_a_reworded_similar_record_files_low_confidence_decision(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        old = await store(mcp, w, WIFI)
        new = await store(mcp, w, WIFI_REWORDED)
        reviews = ok(await mcp.call("memory_review_list", workspace_id=w))
        status = await statuses(mcp, w)
    assert [(e["reason"], e["target_id"], e["related_record_id"]) for e in reviews["entries"]] == [
        ("low_confidence_decision", new, old)
    ]
    assert reviews["entries"][0]["confidence"] < 0.7
    assert status == {old: "active", new: "review_needed"}


async def test_unrelated_records_and_exact_duplicates_file_no_review(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await store(mcp, w, DARK)
        await store(mcp, w, UNRELATED)
        await store(mcp, w, DARK)  # deduped: the same record, nothing to check
        reviews = ok(await mcp.call("memory_review_list", workspace_id=w))
        status = await statuses(mcp, w)
    assert reviews["total"] == 0
    assert set(status.values()) == {"active"} and len(status) == 2


async def test_another_agents_private_record_is_never_compared(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await store(mcp, w, DARK, agent="athena")
        light = await store(mcp, w, LIGHT, agent="hermes")
        reviews = ok(await mcp.call("memory_review_list", workspace_id=w))
        status = await statuses(mcp, w, "hermes")
    assert reviews["total"] == 0
    assert status == {light: "active"}


async def test_filing_is_idempotent_per_target_related_record_and_reason(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        dark, light, entry = await contradiction(mcp, w)
        # Each content change re-runs the checks against the same neighbour, with the same verdict.
        for content in (LIGHT + ".", LIGHT + "!", LIGHT):
            ok(await mcp.call("memory_update", record_id=light, content=content, workspace_id=w))
        reviews = ok(await mcp.call("memory_review_list", workspace_id=w))
    assert reviews["total"] == 1
    assert [(e["id"], e["target_id"], e["related_record_id"], e["reason"]) for e in reviews["entries"]] == [
        (entry["id"], light, dark, "possible_contradiction")
    ]
    assert len(rows(open_server, "SELECT id FROM review_entries WHERE target_id = ?", light)) == 1


# -- resolution follows the contract's action table ------------------------------------------------------

TABLE = {
    "keep": ("active", "keep_resolved"),
    "archive": ("archived", "archived_via_review"),
    "merge_into": ("superseded", "merged_via_review"),
    "discard": ("archived", "discarded_via_review"),
}


@pytest.mark.parametrize("action", list(TABLE))
async def test_review_resolution_follows_the_contracts_action_table(
    open_server: ServerProcess, action: str
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        dark, light, entry = await contradiction(mcp, w)
        full_action = f"merge_into:{dark}" if action == "merge_into" else action
        resolved = ok(
            await mcp.call(
                "memory_review_resolve", review_id=entry["id"], action=full_action, notes="checked with the user",
                workspace_id=w,
            )
        )  # fmt: skip
        remaining = ok(await mcp.call("memory_review_list", workspace_id=w))
        status = await statuses(mcp, w)
    new_status, state = TABLE[action]
    merged_into = dark if action == "merge_into" else None
    assert resolved == {
        "success": True,
        "review_id": entry["id"],
        "target_id": light,
        "action": full_action,
        "old_status": "conflicted",
        "new_status": new_status,
        "superseded_by": merged_into,
        "machine_event_id": resolved["machine_event_id"],
    }
    assert remaining["total"] == 0
    assert rows(open_server, "SELECT id FROM review_entries WHERE id = ?", entry["id"]) == []
    # Soft transitions only: both records are still stored.
    assert status == {dark: "active", light: new_status}
    row = record_row(open_server, light)
    assert (row["status"], row["verification_state"], row["superseded_by"]) == (
        new_status,
        state,
        merged_into,
    )
    assert row["content"] == LIGHT
    assert record_row(open_server, dark)["status"] == "active"
    events = rows(
        open_server,
        "SELECT id, workspace_id, event_type, actor, target_id, payload FROM machine_events WHERE target_id = ?",
        light,
    )
    assert [(e["id"], e["workspace_id"], e["event_type"], e["actor"]) for e in events] == [
        (resolved["machine_event_id"], w, "freshness_review_resolved", "mcp_caller")
    ]
    payload = json.loads(events[0]["payload"])
    assert payload["notes"] == "checked with the user" and payload["action"] == full_action


async def test_resolution_notes_are_capped_at_1024_characters_in_the_audit_row(
    open_server: ServerProcess,
) -> None:
    w = ws()
    notes = "abcdefghij" * 300  # 3000 characters
    async with mcp_session(open_server.url + "/mcp") as mcp:
        _, light, entry = await contradiction(mcp, w)
        resolved = ok(
            await mcp.call(
                "memory_review_resolve", review_id=entry["id"], action="keep", notes=notes, workspace_id=w
            )
        )
    (event,) = rows(
        open_server, "SELECT payload FROM machine_events WHERE id = ?", resolved["machine_event_id"]
    )
    assert json.loads(event["payload"])["notes"] == notes[:1024]


async def test_a_resolved_record_is_visible_again_by_default_only_when_kept(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        _, light, entry = await contradiction(mcp, w)
        before = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
        ok(await mcp.call("memory_review_resolve", review_id=entry["id"], action="keep", workspace_id=w))
        after = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
    assert light not in {r["id"] for r in before["records"]}
    assert light in {r["id"] for r in after["records"]}


async def test_a_second_resolve_of_the_same_entry_is_document_not_found(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        _, light, entry = await contradiction(mcp, w)
        first = await mcp.call(
            "memory_review_resolve", review_id=entry["id"], action="archive", workspace_id=w
        )
        second = await mcp.call("memory_review_resolve", review_id=entry["id"], action="keep", workspace_id=w)
        unknown = await mcp.call(
            "memory_review_resolve", review_id="review_nope", action="keep", workspace_id=w
        )
    assert not first.is_error
    assert second.error_code == unknown.error_code == "DOCUMENT_NOT_FOUND"
    # The second call changed nothing: the record stays archived with one audit row.
    assert record_row(open_server, light)["status"] == "archived"
    assert len(rows(open_server, "SELECT id FROM machine_events WHERE target_id = ?", light)) == 1


async def test_a_bad_action_is_invalid_params_and_leaves_the_entry_pending(
    open_server: ServerProcess,
) -> None:
    w, other = ws(), ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        elsewhere = await store(mcp, other, DARK)
        _, light, entry = await contradiction(mcp, w)
        bad = {
            "empty-id": "merge_into:",
            "blank-id": "merge_into:   ",
            "missing-id": f"merge_into:{uuid.uuid4()}",
            "self": f"merge_into:{light}",
            "other-workspace": f"merge_into:{elsewhere}",
            "unknown": "delete",
            "wrong-case": "KEEP",
            "empty": "",
        }
        for name, action in bad.items():
            result = await mcp.call(
                "memory_review_resolve", review_id=entry["id"], action=action, workspace_id=w
            )
            assert result.error_code == "INVALID_PARAMS", name
        pending = ok(await mcp.call("memory_review_list", workspace_id=w))
    assert [e["id"] for e in pending["entries"]] == [entry["id"]]
    row = record_row(open_server, light)
    assert (row["status"], row["verification_state"], row["superseded_by"]) == ("conflicted", None, None)
    assert rows(open_server, "SELECT id FROM machine_events WHERE target_id = ?", light) == []


# -- memory_review_list ------------------------------------------------------------------------------------------


async def test_memory_review_list_filters_by_reason_and_record_with_an_honest_total(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        dark, light, _ = await contradiction(mcp, w)
        nightly = await store(mcp, w, NIGHTLY)
        nightly_utc = await store(mcp, w, NIGHTLY_UTC)
        wifi = await store(mcp, w, WIFI)
        wifi_reworded = await store(mcp, w, WIFI_REWORDED)
        unrelated = await store(mcp, w, UNRELATED)

        async def listing(**kw: Any) -> dict[str, Any]:
            return ok(await mcp.call("memory_review_list", workspace_id=w, **kw))

        every = await listing()
        page_one = await listing(limit=2)
        page_two = await listing(limit=2, offset=2)
        beyond = await listing(limit=2, offset=4)
        duplicates = await listing(reason="possible_duplicate")
        contradictions = await listing(reason="possible_contradiction")
        low = await listing(reason="low_confidence_decision")
        by_target = await listing(record_id=nightly_utc)
        by_target_and_reason = await listing(record_id=nightly_utc, reason="possible_contradiction")
        none = await listing(record_id=unrelated)
    assert (every["count"], every["total"], every["limit"], every["offset"]) == (3, 3, 20, 0)
    assert [(p["count"], p["total"]) for p in (page_one, page_two, beyond)] == [(2, 3), (1, 3), (0, 3)]
    paged = [e["id"] for p in (page_one, page_two) for e in p["entries"]]
    assert sorted(paged) == sorted(e["id"] for e in every["entries"])
    assert [(e["target_id"], e["related_record_id"]) for e in duplicates["entries"]] == [
        (nightly_utc, nightly)
    ]
    assert [(e["target_id"], e["related_record_id"]) for e in contradictions["entries"]] == [(light, dark)]
    assert [(e["target_id"], e["related_record_id"]) for e in low["entries"]] == [(wifi_reworded, wifi)]
    assert [(d["total"], d["count"]) for d in (duplicates, contradictions, low)] == [(1, 1)] * 3
    assert [e["reason"] for e in by_target["entries"]] == ["possible_duplicate"] and by_target["total"] == 1
    assert (by_target_and_reason["total"], none["total"]) == (0, 0)


async def test_memory_review_list_bad_arguments_are_invalid_params(open_server: ServerProcess) -> None:
    bad: dict[str, dict[str, Any]] = {
        "unknown-reason": {"reason": "stale"},
        "limit-0": {"limit": 0},
        "limit-101": {"limit": 101},
        "offset-negative": {"offset": -1},
    }
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for name, args in bad.items():
            result = await mcp.call("memory_review_list", workspace_id=ws(), **args)
            assert result.error_code == "INVALID_PARAMS", name


# -- workspaces -----------------------------------------------------------------------------------------------------


async def test_reviews_of_one_workspace_are_invisible_and_unresolvable_from_another(
    open_server: ServerProcess,
) -> None:
    a, b = ws(), ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        _, light, entry = await contradiction(mcp, a)
        b_record = await store(mcp, b, UNRELATED)
        listed = ok(await mcp.call("memory_review_list", workspace_id=b))
        by_record = ok(await mcp.call("memory_review_list", record_id=light, workspace_id=b))
        resolved = await mcp.call(
            "memory_review_resolve", review_id=entry["id"], action="archive", workspace_id=b
        )
        merged = await mcp.call(
            "memory_review_resolve", review_id=entry["id"], action=f"merge_into:{b_record}", workspace_id=b
        )
        still = ok(await mcp.call("memory_review_list", workspace_id=a))
    assert (listed["total"], by_record["total"]) == (0, 0)
    assert resolved.error_code == merged.error_code == "DOCUMENT_NOT_FOUND"
    assert [e["id"] for e in still["entries"]] == [entry["id"]]
    assert record_row(open_server, light)["status"] == "conflicted"
