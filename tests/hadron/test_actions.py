"""hadron_run_action's rules on the service layer: declarations, argument schemas, dependency resolution
(transitive, cycles, access on every dependency), the template language and the run record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hadron.world import build_world, node
from harness import free_port

from triptych.core.config import Settings
from triptych.core.mcp_sources import Source, save_sources, sources_path
from triptych.hadron.domain.action import DepView, render
from triptych.hadron.errors import ActionRefusal, Forbidden, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.mcp_calls import McpToolCaller, ToolCallResult
from triptych.hadron.services.nodes import EdgeInput, NodeFields
from triptych.hadron.services.selection import SessionState
from triptych.hadron.surface import Hadron

SPECS = "hrn:mem:acme.com:specs"
JOURNAL = "hrn:mem:alice:journal"


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture
def hadron(tmp_path: Path, database_url: str | None) -> Iterator[Hadron]:
    build_world(tmp_path, database_url)
    opened = Hadron.open(
        tmp_path / "hadron.db", settings=Settings(data_dir=tmp_path), database_url=database_url
    )
    yield opened
    opened.close()


def who(hadron: Hadron, handle: str) -> tuple[HadronCaller, SessionState]:
    caller = HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))
    return caller, hadron.selections.session(caller, f"s-{handle}", None)


def put(
    hadron: Hadron,
    handle: str,
    urn: str,
    *,
    content: str = "",
    node_type: str = "info",
    action: dict[str, Any] | None = None,
    edges: list[EdgeInput] | None = None,
) -> str:
    caller, state = who(hadron, handle)
    values = {"name": urn.rsplit(":", 1)[-1], "nodeType": node_type, "content": content}
    if action is not None:
        values["data"] = {"action": action}
    fields = NodeFields(values, frozenset(values))
    hadron.nodes.create(caller, state, urn, fields, edges)
    return urn


def run(hadron: Hadron, handle: str, urn: str, args: dict[str, Any] | None = None) -> Any:
    caller, state = who(hadron, handle)
    return hadron.derived.actions.run(caller, state, urn, args or {})


def refusal(hadron: Hadron, handle: str, urn: str, args: dict[str, Any] | None = None) -> ActionRefusal:
    with pytest.raises(ActionRefusal) as caught:
        run(hadron, handle, urn, args)
    return caught.value


GREETING = {
    "kind": "template",
    "parameters": {
        "type": "object",
        "properties": {"who": {"type": "string", "minLength": 1}, "n": {"type": "integer"}},
        "required": ["who"],
        "additionalProperties": False,
    },
}


def test_a_template_action_renders_args_and_its_dependencies_and_records_the_run(hadron: Hadron) -> None:
    put(hadron, "alice", node(SPECS, "style"), content="Be brief.")
    action = put(
        hadron, "alice", node(SPECS, "greet"), node_type="action", action=GREETING,
        content="Hello {{ args.who }} x{{ args.n }}. Style: {{ deps.style }} ({{ deps.style.urn }}) by {{ node.name }}",
        edges=[EdgeInput("style")],
    )  # fmt: skip
    first = run(hadron, "alice", action, {"who": "Bob", "n": 2})
    again = run(hadron, "bob", action, {"who": "Bob", "n": 2})  # a READER runs a template action too
    expected = f"Hello Bob x2. Style: Be brief. ({node(SPECS, 'style')}) by greet"
    assert first.output == again.output == expected
    assert first.dependencies == [{"edge": "style", "urn": node(SPECS, "style"), "ran": False}]
    caller, state = who(hadron, "alice")
    memory, found = hadron.nodes.find(caller, state, action)
    runs = hadron.nodes.view(caller, memory, found)["runs"]
    assert [(r["actor"], r["outcome"], r["revision"], r["args"]) for r in runs] == [
        ("hrn:user:bob", "ok", 1, {"who": "Bob", "n": 2}),
        ("hrn:user:alice", "ok", 1, {"who": "Bob", "n": 2}),
    ]
    assert runs[0]["durationMs"] >= 0 and runs[0]["outputChars"] == len(expected)
    assert runs[0]["kind"] == "template" and runs[0]["at"] >= runs[1]["at"]


def test_args_are_checked_against_the_parameter_schema_before_anything_runs(hadron: Hadron) -> None:
    action = put(hadron, "alice", node(SPECS, "greet2"), node_type="action", action=GREETING,
                 content="Hi {{ args.who }}")  # fmt: skip
    for args, path in [
        ({}, ""),
        ({"who": ""}, "who"),
        ({"who": "x", "n": "two"}, "n"),
        ({"who": "x", "z": 1}, ""),
    ]:
        refused = refusal(hadron, "alice", action, args)
        assert refused.code == "ACTION_ARGS_INVALID" and refused.details["path"] == path, refused.message
    caller, state = who(hadron, "alice")
    memory, found = hadron.nodes.find(caller, state, action)
    outcomes = [r["outcome"] for r in hadron.nodes.view(caller, memory, found)["runs"]]
    assert outcomes == ["ACTION_ARGS_INVALID"] * 4


def test_runnable_action_dependencies_run_first_transitively_and_are_recorded(hadron: Hadron) -> None:
    put(hadron, "alice", node(SPECS, "fact"), content="water boils at 100 C")
    inner = put(hadron, "alice", node(SPECS, "inner"), node_type="action", action={"kind": "template"},
                content="[inner sees: {{ deps.fact }}]", edges=[EdgeInput("fact")])  # fmt: skip
    outer = put(hadron, "alice", node(SPECS, "outer"), node_type="action", action={"kind": "template"},
                content="outer <{{ deps.inner }}> template-of-inner: {{ deps.raw }}",
                edges=[EdgeInput("inner", is_runnable=True), EdgeInput("inner", loc="raw")])  # fmt: skip
    result = run(hadron, "alice", outer)
    assert result.output == (
        "outer <[inner sees: water boils at 100 C]> template-of-inner: [inner sees: {{ deps.fact }}]"
    )
    assert [d["ran"] for d in result.dependencies] == [True, False]
    inner_runs = hadron.derived.actions.history(hadron.graph.node_by_loc(result.run.memory_id, "inner").id)  # type: ignore[union-attr]
    assert inner_runs[0]["parentRunId"] == result.run.id and inner_runs[0]["outcome"] == "ok"
    assert inner  # the inner action runs on its own as well
    assert run(hadron, "alice", inner).output == "[inner sees: water boils at 100 C]"


def test_a_cycle_of_runnable_dependencies_is_refused_naming_it(hadron: Hadron) -> None:
    a, b = node(SPECS, "cyc-a"), node(SPECS, "cyc-b")
    put(hadron, "alice", a, node_type="action", action={"kind": "template"}, content="a")
    put(hadron, "alice", b, node_type="action", action={"kind": "template"}, content="b {{ deps.cyc-a }}",
        edges=[EdgeInput("cyc-a", is_runnable=True)])  # fmt: skip
    put(hadron, "alice", a, node_type="action", action={"kind": "template"}, content="a {{ deps.cyc-b }}",
        edges=[EdgeInput("cyc-b", is_runnable=True)])  # fmt: skip
    refused = refusal(hadron, "alice", a)
    assert refused.code == "ACTION_DEPENDENCY_CYCLE"
    assert refused.details["cycle"] == [a, b, a]
    itself = node(SPECS, "self")
    put(hadron, "alice", itself, node_type="action", action={"kind": "template"}, content="x",
        edges=[EdgeInput("self", is_runnable=True)])  # fmt: skip
    assert refusal(hadron, "alice", itself).details["cycle"] == [itself, itself]
    # The same loop without isRunnable is content, not a cycle.
    put(
        hadron,
        "alice",
        b,
        node_type="action",
        action={"kind": "template"},
        content="b",
        edges=[EdgeInput("cyc-a")],
    )
    assert run(hadron, "alice", a).output == "a b"


def test_every_dependency_needs_the_callers_read_access_and_missing_reads_the_same(hadron: Hadron) -> None:
    put(hadron, "alice", node(JOURNAL, "diary"), content="private thoughts")
    action = put(hadron, "alice", node(SPECS, "uses-journal"), node_type="action", action={"kind": "template"},
                 content="{{ deps.diary }}", edges=[EdgeInput(node(JOURNAL, "diary"), loc="diary")])  # fmt: skip
    assert run(hadron, "alice", action).output == "private thoughts"
    assert run(hadron, "bob", action).output == "private thoughts"  # the journal is shared with bob
    unreadable = refusal(hadron, "carol", action)  # carol reads specs, not alice's journal
    assert unreadable.code == "ACTION_DEPENDENCY_FAILED"
    assert unreadable.details == {"urn": action, "dependency": "diary", "reason": "missing-or-unreadable"}
    assert "private" not in unreadable.message and JOURNAL not in unreadable.message
    dangling = put(hadron, "alice", node(SPECS, "dangling"), node_type="action", action={"kind": "template"},
                   content="x", edges=[EdgeInput("nowhere:at-all", loc="gone")])  # fmt: skip
    missing = refusal(hadron, "alice", dangling)
    assert (
        missing.code == "ACTION_DEPENDENCY_FAILED"
        and missing.details["reason"] == unreadable.details["reason"]
    )
    with pytest.raises(NotFound):  # dave (globex) cannot even see the action
        run(hadron, "dave", action)


def test_a_failing_runnable_dependency_is_named_in_the_refusal(hadron: Hadron) -> None:
    needs = put(hadron, "alice", node(SPECS, "needs-arg"), node_type="action", action=GREETING, content="x")
    outer = put(hadron, "alice", node(SPECS, "outer2"), node_type="action", action={"kind": "template"},
                content="{{ deps.needs-arg }}", edges=[EdgeInput("needs-arg", is_runnable=True)])  # fmt: skip
    refused = refusal(hadron, "alice", outer)
    assert refused.code == "ACTION_DEPENDENCY_FAILED"
    assert refused.details["dependencyUrn"] == needs and refused.details["cause"] == "ACTION_ARGS_INVALID"


def test_what_is_not_a_runnable_action_is_refused_with_its_reason(hadron: Hadron) -> None:
    cases = [
        ("info", None, "not-an-action"),
        ("action", None, "no-declaration"),
        ("action", {"kind": "shell", "command": "rm -rf /"}, "unknown-kind"),
        ("action", {"kind": "template", "parameters": {"type": "nope"}}, "bad-parameters"),
        ("action", {"kind": "mcp-tool", "source": "s"}, "bad-tool"),
    ]
    for i, (node_type, action, reason) in enumerate(cases):
        urn = put(hadron, "alice", node(SPECS, f"bad{i}"), node_type=node_type, action=action, content="x")
        refused = refusal(hadron, "alice", urn)
        assert (refused.code, refused.details["reason"]) == ("ACTION_NOT_RUNNABLE", reason)
    template = put(hadron, "alice", node(SPECS, "code"), node_type="action", action={"kind": "template"},
                   content="{{ __import__('os').system('id') }}")  # fmt: skip
    assert refusal(hadron, "alice", template).code == "ACTION_TEMPLATE_INVALID"
    unknown = put(hadron, "alice", node(SPECS, "unknown"), node_type="action", action={"kind": "template"},
                  content="{{ args.missing }} {{ deps.nothing }}")  # fmt: skip
    refused = refusal(hadron, "alice", unknown)
    assert refused.code == "ACTION_TEMPLATE_INVALID" and refused.details["placeholder"] == "args.missing"


def test_an_mcp_tool_action_is_off_by_default_and_needs_write_access(
    hadron: Hadron, tmp_path: Path, database_url: str | None
) -> None:
    tool = put(hadron, "alice", node(SPECS, "tool"), node_type="action",
               action={"kind": "mcp-tool", "source": "docs", "tool": "lookup", "arguments": {"term": "x"}})  # fmt: skip
    disabled = refusal(hadron, "alice", tool)
    assert disabled.code == "ACTION_DISABLED" and disabled.details["source"] == "docs"
    assert "TRIPTYCH_HADRON_ACTION_SOURCES" in (disabled.hint or "")
    with pytest.raises(Forbidden):  # bob reads specs but may not make its actions reach outside
        run(hadron, "bob", tool)
    assert "action-mcp-tools" not in hadron.derived.capabilities()
    enabled = Hadron.open(
        tmp_path / "hadron.db",
        settings=Settings(data_dir=tmp_path, hadron_action_sources=["*"]),
        database_url=database_url,
    )
    try:
        assert "action-mcp-tools" in enabled.derived.capabilities()
        caller, state = who(enabled, "alice")
        with pytest.raises(ActionRefusal) as caught:  # enabled, but no source of that name is registered
            enabled.derived.actions.run(caller, state, tool, {})
        assert (
            caught.value.code == "ACTION_TOOL_FAILED" and caught.value.details["reason"] == "unknown-source"
        )
    finally:
        enabled.close()


def test_templates_substitute_only_and_are_deterministic() -> None:
    dep = DepView("Style", None, "Be brief.", "hrn:node:a.b:m:style", "style")
    me = DepView("me", None, "", "hrn:node:a.b:m:me", "me")
    args = {"who": "Bob", "list": [1, {"x": "y"}], "obj": {"b": 1, "a": 2}}
    text = "{{args.who}} {{ args.list.1.x }} {{ args.obj }} {{ deps.st.yle.description }}{{ deps.st.yle }}"
    out = render(text, args, {"st.yle": dep}, me, "u")
    assert out == 'Bob y {"a": 2, "b": 1} Be brief.'
    assert render(text, args, {"st.yle": dep}, me, "u") == out
    assert json.loads(render("{{ args.list }}", args, {}, me, "u")) == [1, {"x": "y"}]


class BrokenCaller(McpToolCaller):
    """A tool caller whose own code fails (not the source): the run must still be recorded."""

    def call(self, source: Source, tool: str, arguments: dict[str, Any]) -> ToolCallResult:
        raise RuntimeError("a bug in the caller")


def test_a_run_that_fails_unexpectedly_is_recorded_as_an_internal_error(
    hadron: Hadron, tmp_path: Path
) -> None:
    save_sources(sources_path(tmp_path), {"docs": Source("docs", url="http://127.0.0.1:9/mcp")})
    tool = put(hadron, "alice", node(SPECS, "broken"), node_type="action",
               action={"kind": "mcp-tool", "source": "docs", "tool": "lookup"})  # fmt: skip
    hadron.derived.actions.calls = BrokenCaller(sources_path(tmp_path), ["docs"])
    with pytest.raises(RuntimeError):
        run(hadron, "alice", tool)
    found = hadron.graph.node_by_loc(hadron.access.find_memory(SPECS).id, "broken")  # type: ignore[union-attr]
    assert found is not None
    [record] = hadron.derived.actions.history(found.id)
    assert (record["outcome"], record["error"]) == ("INTERNAL_ERROR", "RuntimeError")


def test_the_tool_caller_reports_an_unreachable_source_and_an_unreadable_registry(tmp_path: Path) -> None:
    registry = tmp_path / "mcp_servers.json"
    caller = McpToolCaller(registry, [" docs ", ""], timeout=5)
    assert caller.enabled and caller.allows("docs") and not caller.allows("wiki")
    assert caller.source("docs") is None  # no registry yet
    down = Source("down", url=f"http://127.0.0.1:{free_port()}/mcp")
    result = caller.call(down, "lookup", {})
    assert (result.ok, result.reason) == (False, "unreachable") and "Connect" in result.text
    registry.write_text("{not json")
    assert caller.source("docs") is None  # logged, and the action refuses as an unknown source
    assert not McpToolCaller(registry, []).enabled
