"""The tools this build registers are exactly the contract's (read from the spec: no Hadron tool of these sections
is deferred) plus an explicit list of the live server's tools the contract does not name (``LIVE_SERVER_TOOLS``),
each of them on the hosted server's generated tool list and documented in docs/hadron.md."""

from __future__ import annotations

import re
from pathlib import Path

from harness import shared_file

from triptych.hadron.surface import Hadron
from triptych.hadron.tools import (
    ACTION_TOOLS,
    GIT_TOOLS,
    ISSUE_5_TOOLS,
    ISSUE_6_TOOLS,
    ISSUE_14_TOOLS,
    LIVE_SERVER_TOOLS,
    NOT_SERVED,
    TOOLS,
)

# The hosted server's tools the contract does not name, as its generated tool list (shipped in the official
# CLI, hadron-memory/hadron-cli internal/cmd/spec/mcp-tools.txt, 2026-08-06) names them: the MCP tools this
# build serves beyond the contract, and those it judged runner-internal (docs/decisions/0059).
LIVE_SERVER_EXTRAS = {
    "hadron_update_edge",
    "hadron_delete_edge",
    "hadron_get_nodes",
    "hadron_read_node",
    "hadron_replace_text",
    "hadron_lock_memory",
    "hadron_unlock_memory",
    "hadron_run_task",
}

# Contract sections whose tools belong to this issue, and the tools of them that come later.
SECTIONS = {
    "Memory selection": set(),
    "Browse nodes": set(),
    "Search scopes": set(),
    "Mutate nodes": set(),
    "Object store": set(),
    "Validate & run": set(),
    "App selection": set(),
    "Organization selection": set(),
    "Server identity": set(),
    "Sessions": set(),
    "Workers — named team members": set(),
    "Team chat": set(),
    "Team worklog": set(),
    "Channels": set(),
}


def contract_tools() -> set[str]:
    text = shared_file("spec/hadron.md", "HADRON_SPEC").read_text(encoding="utf-8")
    lines = text.splitlines()
    names: set[str] = set()
    for title, later in SECTIONS.items():
        start = lines.index(title)
        section: set[str] = set()
        for line in lines[start + 1 :]:
            if line in SECTIONS or (
                line and not line.startswith("|") and section and line[0].isupper() and len(line) < 40
            ):
                break
            if m := re.match(r"\| (hadron_[a-z_]+) \|", line):
                section.add(m[1])
        assert section, title
        names |= section - later
    return names


def test_registered_tools_are_the_contracts_tools_of_these_issues(tmp_path: Path) -> None:
    hadron = Hadron.open(tmp_path / "hadron.db")
    try:
        registered = [tool.name for tool in hadron.tools()]
    finally:
        hadron.close()
    assert len(registered) == len(set(registered))
    contract = (
        set(ISSUE_5_TOOLS) | set(ISSUE_6_TOOLS) | set(ISSUE_14_TOOLS) | set(ACTION_TOOLS) | set(GIT_TOOLS)
    )
    assert contract == contract_tools()
    assert set(registered) == set(TOOLS) == contract | set(LIVE_SERVER_TOOLS)


def test_the_live_servers_extras_are_an_explicit_list_none_of_them_in_the_contract() -> None:
    assert set(LIVE_SERVER_TOOLS) | set(NOT_SERVED) == LIVE_SERVER_EXTRAS
    assert not set(LIVE_SERVER_TOOLS) & set(NOT_SERVED)
    assert not LIVE_SERVER_EXTRAS & contract_tools()
    assert all(reason for reason in NOT_SERVED.values())


def test_a_tool_judged_runner_internal_is_not_served_and_its_decision_is_recorded(tmp_path: Path) -> None:
    hadron = Hadron.open(tmp_path / "hadron.db")
    try:
        registered = {tool.name for tool in hadron.tools()}
    finally:
        hadron.close()
    decisions = Path(__file__).resolve().parents[2] / "docs" / "decisions"
    for name in NOT_SERVED:
        assert name not in registered
        assert any(name in record.read_text(encoding="utf-8") for record in decisions.glob("*.md")), name


def test_every_argument_model_refuses_unknown_arguments(tmp_path: Path) -> None:
    hadron = Hadron.open(tmp_path / "hadron.db")
    try:
        for tool in hadron.tools():
            assert tool.args.model_config.get("extra") == "forbid", tool.name
            assert tool.description, tool.name
    finally:
        hadron.close()


def test_every_tool_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "hadron.md").read_text(encoding="utf-8")
    assert [name for name in TOOLS if f"`{name}`" not in doc] == []
