"""hadron_run_action and node abstracts through the official MCP client, against a real `triptych serve`
with two organizations, readers and writers, an app key, real MCP tool sources on 127.0.0.1 (streamable
HTTP and stdio) and a real OpenAI-compatible server for abstracts."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import psycopg
import pytest
from contract.test_hadron_clients import MCP1_PYTHON, run_1x
from hadron.llm_server import LlmServer, llm_server
from hadron.world import World, as_app, as_user, build_world, engine, node, user_headers
from harness import SECRET, TRIPTYCH, ServerProcess, free_port, http_server

from triptych.core.mcp_sources import Source, load_sources, save_sources, sources_path

SCRIPT = Path(__file__).parent / "scripts" / "tool_server.py"
SPECS = "hrn:mem:acme.com:specs"
PLANS = "hrn:mem:globex.com:plans"
JOURNAL = "hrn:mem:alice:journal"

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def fresh() -> str:
    return "a" + uuid.uuid4().hex[:8]


def write_behind_the_service(world: World, sql: str, *params: object) -> None:
    """Another writer changes the world's database straight in SQL (``?`` placeholders), on either engine."""
    if world.database_url:
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s").encode(), params)
    else:
        with sqlite3.connect(world.server.data_dir / "hadron.db") as db:
            db.execute(sql, params)


def register(data_dir: Path, *args: str) -> None:
    subprocess.run(
        [TRIPTYCH, "sources", "add", *args, "--data-dir", str(data_dir)], check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def tool_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tool-log") / "calls.jsonl"


@pytest.fixture(scope="module")
def http_tools(tool_log: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(tool_log), "--http", str(port)])
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def not_mcp() -> Iterator[str]:
    """An HTTP server that is no MCP server: every request gets a 404 page (issue 28)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_error(404, "no such page")

        do_GET = do_DELETE = do_POST

        def log_message(self, format: str, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield url + "/mcp"


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmServer]:
    with llm_server() as server:
        yield server


@pytest.fixture(scope="module")
def data_dir(
    tmp_path_factory: pytest.TempPathFactory,
    http_tools: str,
    not_mcp: str,
    tool_log: Path,
    module_database_url: str | None,
) -> tuple[Path, str, str]:
    data = tmp_path_factory.mktemp("hadron-actions") / "data"
    data.mkdir(parents=True)
    key, other = build_world(data, module_database_url)
    register(data, "tools", "--url", http_tools)  # as an operator does; the others straight into the registry
    path = sources_path(data)
    sources = load_sources(path)
    sources["local"] = Source("local", command=sys.executable, args=[str(SCRIPT), str(tool_log)])
    sources["down"] = Source("down", url=f"http://127.0.0.1:{free_port()}/mcp")
    sources["unlisted"] = Source("unlisted", url=http_tools)
    sources["notmcp"] = Source("notmcp", url=not_mcp)
    save_sources(path, sources)
    return data, key, other


@pytest.fixture(scope="module")
def world(
    data_dir: tuple[Path, str, str], llm: LlmServer, module_database_url: str | None
) -> Iterator[World]:
    data, key, other = data_dir
    env = {
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_HADRON_ACTION_SOURCES": "tools,local,down,notmcp",
        "TRIPTYCH_SYNC_TIMEOUT": "8",  # a stdio source starts a Python process: room for a loaded machine
        "TRIPTYCH_LLM_URL": llm.url,
        "TRIPTYCH_LLM_MODEL": "tiny",
        **engine(module_database_url),
    }
    w = World(ServerProcess(data, env).start(), key, other, database_url=module_database_url)
    yield w
    w.server.stop()


@pytest.fixture(scope="module")
def plain_world(shared_hadron_world: World) -> World:
    """A world like this module's with nothing enabled, the defaults an operator gets: the session's shared
    world (tests/conftest.py), whose server sets no action source and no LLM, on the same engine. Its
    test writes under a location of its own, as every test of the shared world does."""
    return shared_hadron_world


PARAMS = {
    "type": "object",
    "properties": {"who": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["who"],
}


async def test_a_template_action_runs_for_every_reader_and_is_recorded(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:tone"), name="Tone", content="Be kind.")
        made = await alice.ok(
            "hadron_create_node", loc=node(SPECS, f"{loc}:greet"), name="Greet", nodeType="action",
            content="Hello {{ args.who }} ({{ args.n }}). {{ deps.tone }}",
            data={"action": {"kind": "template", "parameters": PARAMS}},
            edges=[{"targetLoc": f"{loc}:tone", "loc": "tone"}],
        )  # fmt: skip
        ran = await alice.ok("hadron_run_action", loc=made.data["urn"], args={"who": "Ann", "n": 2})
        found = await alice.ok(
            "hadron_find_nodes", query="*", parentRel=node(SPECS, loc), isRunnable=True, brief=True
        )
    assert ran.text.startswith(f"Ran {made.data['urn']} (template, revision 1)")
    assert ran.data["output"] == "Hello Ann (2). Be kind." and ran.text.endswith("Hello Ann (2). Be kind.")
    assert ran.data["dependencies"] == [{"edge": "tone", "urn": node(SPECS, f"{loc}:tone"), "ran": False}]
    assert [h["urn"] for h in found.data["hits"]] == [made.data["urn"]]
    async with as_user(world, "bob") as bob:  # acme READER: a template action only reads
        await bob.ok("hadron_set_active_memory", memoryUrn=SPECS)
        by_loc = await bob.ok("hadron_run_action", loc=f"{loc}:greet", args={"who": "Bo", "n": 1})
        assert by_loc.data["output"] == "Hello Bo (1). Be kind."
    async with as_app(world) as app:  # the bot's key reads acme's knowledge
        await app.ok("hadron_run_action", loc=made.data["urn"], args={"who": "Bot", "n": 1})
    async with as_user(world, "dave") as dave:  # globex: acme's action is not there
        refused = await dave.refused(
            "hadron_run_action", "memory_not_found", loc=made.data["urn"], args={"who": "x"}
        )
        assert "acme.com" in refused.text
    async with as_app(world, world.other_app_key) as other:
        await other.refused("hadron_run_action", "memory_not_found", loc=made.data["urn"])
    async with as_user(world, "alice") as alice:
        got = await alice.ok("hadron_get_node", loc=made.data["urn"])
    runs = got.data["runs"]
    assert [r["actor"] for r in runs] == ["hrn:app:acme.com:bot", "hrn:user:bob", "hrn:user:alice"]
    assert {r["outcome"] for r in runs} == {"ok"} and runs[-1]["args"] == {"who": "Ann", "n": 2}
    assert "## runs (newest first)" in got.text


async def test_every_refusal_of_a_run_is_typed_and_names_what_failed(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        await alice.ok("hadron_create_node", loc=f"{loc}:greet", name="G", nodeType="action",
                       content="Hi {{ args.who }}", data={"action": {"kind": "template", "parameters": PARAMS}})  # fmt: skip
        bad_args = await alice.refused(
            "hadron_run_action", "ACTION_ARGS_INVALID", loc=f"{loc}:greet", args={"who": "x", "n": 0}
        )
        assert (
            bad_args.text.startswith("ACTION_ARGS_INVALID: args.n:")
            and bad_args.data["error"]["data"]["path"] == "n"
        )
        await alice.ok("hadron_create_node", loc=f"{loc}:note", name="Note", content="just text")
        not_action = await alice.refused("hadron_run_action", "ACTION_NOT_RUNNABLE", loc=f"{loc}:note")
        assert not_action.data["error"]["data"]["reason"] == "not-an-action"
        await alice.ok("hadron_create_node", loc=f"{loc}:tpl", name="T", nodeType="action",
                       content="{{ config.__class__ }}", data={"action": {"kind": "template"}})  # fmt: skip
        await alice.refused("hadron_run_action", "ACTION_TEMPLATE_INVALID", loc=f"{loc}:tpl")
        for me, other in (("x", "y"), ("y", "x")):
            await alice.ok("hadron_create_node", loc=f"{loc}:{me}", name=me, nodeType="action", content=me,
                           data={"action": {"kind": "template"}},
                           edges=[{"targetLoc": f"{loc}:{other}", "isRunnable": True}])  # fmt: skip
        cycle = await alice.refused("hadron_run_action", "ACTION_DEPENDENCY_CYCLE", loc=f"{loc}:x")
        assert cycle.data["error"]["data"]["cycle"] == [node(SPECS, f"{loc}:{n}") for n in ("x", "y", "x")]
        await alice.ok("hadron_create_node", loc=f"{loc}:broken", name="B", nodeType="action", content="{{ deps.gone }}",
                       data={"action": {"kind": "template"}}, edges=[{"targetLoc": f"{loc}:nothing", "loc": "gone"}])  # fmt: skip
        dep = await alice.refused("hadron_run_action", "ACTION_DEPENDENCY_FAILED", loc=f"{loc}:broken")
        assert dep.data["error"]["data"]["dependency"] == "gone"
        await alice.ok("hadron_create_node", loc=node(JOURNAL, loc), name="Diary", content="secret diary")
        await alice.ok("hadron_create_node", loc=f"{loc}:private", name="P", nodeType="action", content="{{ deps.d }}",
                       data={"action": {"kind": "template"}}, edges=[{"targetUrn": node(JOURNAL, loc), "loc": "d"}])  # fmt: skip
        assert (await alice.ok("hadron_run_action", loc=f"{loc}:private")).data["output"] == "secret diary"
        unknown = await alice.refused("hadron_run_action", "BAD_USER_INPUT", loc=f"{loc}:greet", arguments={})
        assert "unknown argument 'arguments'" in unknown.text
    async with as_user(world, "carol") as carol:  # reads specs, not alice's journal: same refusal as missing
        hidden = await carol.refused(
            "hadron_run_action", "ACTION_DEPENDENCY_FAILED", loc=node(SPECS, f"{loc}:private")
        )
        assert (
            "secret" not in hidden.text and hidden.data["error"]["data"]["reason"] == "missing-or-unreadable"
        )
    async with as_user(world, "alice") as alice:
        runs = (await alice.ok("hadron_get_node", loc=node(SPECS, f"{loc}:greet"))).data["runs"]
    assert runs[0]["outcome"] == "ACTION_ARGS_INVALID" and runs[0]["args"] == {"who": "x", "n": 0}


def calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_an_mcp_tool_action_calls_a_registered_source_only_for_writers(
    world: World, tool_log: Path
) -> None:
    loc = fresh()
    lookup = {
        "kind": "mcp-tool", "source": "tools", "tool": "lookup",
        "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}},
        "arguments": {"term": "{{ deps.topic }}"},
    }  # fmt: skip
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        await alice.ok("hadron_create_node", loc=f"{loc}:topic", name="Topic", content="invoices")
        await alice.ok("hadron_create_node", loc=f"{loc}:lookup", name="L", nodeType="action",
                       data={"action": lookup}, edges=[{"targetLoc": f"{loc}:topic", "loc": "topic"}])  # fmt: skip
        before = len(calls(tool_log))
        ran = await alice.ok("hadron_run_action", loc=f"{loc}:lookup", args={"limit": 3})
        assert ran.data["output"] == "found invoices (limit 3)" and ran.data["kind"] == "mcp-tool"
        assert calls(tool_log)[before:] == [{"tool": "lookup", "arguments": {"term": "invoices", "limit": 3}}]
        stdio = {**lookup, "source": "local"}
        await alice.ok("hadron_create_node", loc=f"{loc}:local", name="L2", nodeType="action",
                       data={"action": stdio}, edges=[{"targetLoc": f"{loc}:topic", "loc": "topic"}])  # fmt: skip
        assert (await alice.ok("hadron_run_action", loc=f"{loc}:local")).data[
            "output"
        ] == "found invoices (limit None)"
        # A template that runs the tool action first, then uses its output.
        await alice.ok("hadron_create_node", loc=f"{loc}:report", name="R", nodeType="action",
                       content="Report: {{ deps.lookup }}", data={"action": {"kind": "template"}},
                       edges=[{"targetLoc": f"{loc}:lookup", "loc": "lookup", "isRunnable": True}])  # fmt: skip
        report = await alice.ok("hadron_run_action", loc=f"{loc}:report")
        assert report.data["output"] == "Report: found invoices (limit None)"
        failures = {
            "fail": ({"kind": "mcp-tool", "source": "tools", "tool": "fail"}, "tool-error"),
            "down": ({"kind": "mcp-tool", "source": "down", "tool": "lookup"}, "unreachable"),
            # An HTTP server that answers, but not as an MCP server: no tool answered (issue 28).
            "notmcp": ({"kind": "mcp-tool", "source": "notmcp", "tool": "lookup"}, "unreachable"),
        }
        for name, (action, reason) in failures.items():
            await alice.ok(
                "hadron_create_node",
                loc=f"{loc}:{name}",
                name=name,
                nodeType="action",
                data={"action": action},
            )
            failed = await alice.refused("hadron_run_action", "ACTION_TOOL_FAILED", loc=f"{loc}:{name}")
            assert failed.data["error"]["data"]["reason"] == reason, failed.text
            assert failed.data["error"]["data"]["source"] == action["source"]
        unlisted = {"kind": "mcp-tool", "source": "unlisted", "tool": "lookup", "arguments": {"term": "x"}}
        await alice.ok(
            "hadron_create_node",
            loc=f"{loc}:unlisted",
            name="U",
            nodeType="action",
            data={"action": unlisted},
        )
        count = len(calls(tool_log))
        await alice.refused("hadron_run_action", "ACTION_DISABLED", loc=f"{loc}:unlisted")
        await alice.ok("hadron_create_node", loc=f"{loc}:wrap", name="W", nodeType="action", content="{{ deps.f }}",
                       data={"action": {"kind": "template"}},
                       edges=[{"targetLoc": f"{loc}:fail", "loc": "f", "isRunnable": True}])  # fmt: skip
        wrapped = await alice.refused("hadron_run_action", "ACTION_DEPENDENCY_FAILED", loc=f"{loc}:wrap")
        assert wrapped.data["error"]["data"]["cause"] == "ACTION_TOOL_FAILED"
        assert wrapped.data["error"]["data"]["dependencyUrn"] == node(SPECS, f"{loc}:fail")
    async with as_user(world, "bob") as bob:  # a READER may not make an action reach outside
        forbidden = await bob.refused("hadron_run_action", "FORBIDDEN", loc=node(SPECS, f"{loc}:lookup"))
        assert "read-only" in forbidden.text
    assert len(calls(tool_log)) == count + 1  # only the failing dependency of wrap reached the source
    async with as_user(world, "alice") as alice:
        runs = (await alice.ok("hadron_get_node", loc=node(SPECS, f"{loc}:lookup"))).data["runs"]
    assert [r["outcome"] for r in runs] == ["FORBIDDEN", "ok", "ok"]


# The source's answer time alone decides this failure, whatever engine records the run: it waits out the
# whole TRIPTYCH_SYNC_TIMEOUT, once, while the other failures above run on both engines.
@pytest.mark.engines("sqlite")
async def test_an_mcp_tool_action_whose_source_does_not_answer_in_time_fails_as_a_timeout(
    world: World,
) -> None:
    loc = fresh()
    action = {"kind": "mcp-tool", "source": "tools", "tool": "slow", "arguments": {"seconds": 30}}
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        await alice.ok("hadron_create_node", loc=f"{loc}:slow", name="slow", nodeType="action",
                       data={"action": action})  # fmt: skip
        failed = await alice.refused("hadron_run_action", "ACTION_TOOL_FAILED", loc=f"{loc}:slow")
    assert failed.data["error"]["data"]["reason"] == "timeout", failed.text
    assert failed.data["error"]["data"]["source"] == "tools"


async def test_server_info_advertises_what_is_enabled_and_the_defaults_stay_inside(
    world: World, plain_world: World
) -> None:
    async with as_user(world, "alice") as alice:
        caps = (await alice.ok("hadron_server_info")).data["capabilities"]
    assert {"run-action", "action-templates", "node-abstracts", "action-mcp-tools", "llm-abstracts"} <= set(
        caps
    )
    loc = fresh()
    async with as_user(plain_world, "alice") as alice:
        caps = (await alice.ok("hadron_server_info")).data["capabilities"]
        assert {"run-action", "action-templates", "node-abstracts"} <= set(caps)
        assert "action-mcp-tools" not in caps and "llm-abstracts" not in caps
        await alice.ok("hadron_create_node", loc=node(SPECS, loc), name="L", nodeType="action",
                       data={"action": {"kind": "mcp-tool", "source": "tools", "tool": "lookup"}})  # fmt: skip
        off = await alice.refused("hadron_run_action", "ACTION_DISABLED", loc=node(SPECS, loc))
        assert "TRIPTYCH_HADRON_ACTION_SOURCES" in off.text
        made = await alice.ok(
            "hadron_create_node", loc=node(SPECS, loc + "x"), name="N", content="Plain text here. More."
        )
        assert made.data["abstract"]["method"] == "extractive"


async def test_abstracts_are_written_shown_in_survey_and_reported_stale(world: World, llm: LlmServer) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        made = await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:doc"), name="Doc",
                              content="Invoices are approved by finance within two days.")  # fmt: skip
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:doc2"), name="Doc2",
                       content="Second document.")  # fmt: skip
        shown = await alice.ok("hadron_get_node", loc=node(SPECS, f"{loc}:doc"))
    assert made.data["abstract"]["text"] == "Summary: Invoices are approved by finance."
    assert made.data["abstract"]["method"] == "llm:tiny"
    assert "## abstract (llm:tiny)\nSummary: Invoices are approved by finance." in shown.text
    assert llm.requests and llm.requests[-1]["model"] == "tiny"
    # Another writer changes the content without going through the node service.
    write_behind_the_service(
        world, "UPDATE nodes SET content = 'Changed elsewhere.' WHERE loc = ?", f"{loc}:doc"
    )
    async with as_user(world, "bob") as bob:  # a READER may validate and survey
        report = await bob.ok("hadron_validate", memoryUrn=SPECS)
        survey = await bob.ok(
            "hadron_find_nodes", query="*", memoryUrn=SPECS, parentRel=node(SPECS, loc), brief=True
        )
    stale = [i["urn"] for i in report.data["staleAbstracts"]]
    assert stale == [node(SPECS, f"{loc}:doc")] and f"stale abstracts: 1\n- {stale[0]}" in report.text
    rows = {h["urn"]: h["abstract"] for h in survey.data["hits"]}
    assert rows[node(SPECS, f"{loc}:doc")]["stale"] is True
    assert rows[node(SPECS, f"{loc}:doc2")] == {**rows[node(SPECS, f"{loc}:doc2")], "stale": False}
    assert "abstract [stale]: Summary: Invoices are approved by finance." in survey.text
    async with as_user(world, "dave") as dave:  # globex cannot validate acme's memory
        await dave.refused("hadron_validate", "memory_not_found", memoryUrn=SPECS)
        await dave.ok("hadron_create_node", loc=node(PLANS, loc), name="P", content="Globex plans.")
        theirs = await dave.ok("hadron_find_nodes", query="*", memoryUrn=PLANS)
        assert all(h["urn"].startswith("hrn:node:globex.com") for h in theirs.data["hits"])


@pytest.mark.skipif(
    not MCP1_PYTHON.exists(), reason="the 1.x client venv is missing: run `python3 tasks.py test`"
)
def test_the_1x_client_runs_an_action_the_same_way(world: World) -> None:
    loc = fresh()
    done = run_1x(
        world,
        user_headers("alice"),
        [
            ("hadron_create_node", {"loc": node(SPECS, loc), "name": "A", "nodeType": "action",
                                    "content": "1.x says {{ args.word }}", "data": {"action": {"kind": "template"}}}),
            ("hadron_run_action", {"loc": node(SPECS, loc), "args": {"word": "hello"}}),
            ("hadron_run_action", {"loc": node(SPECS, loc), "args": "not an object"}),
        ],
    )  # fmt: skip
    assert [r["error"] for r in done] == [False, False, True]
    assert str(done[1]["text"]).endswith("\n1.x says hello")
    assert str(done[2]["text"]).startswith("BAD_USER_INPUT: args")


async def test_a_dependency_in_another_organization_runs_only_for_its_members(world: World) -> None:
    loc = fresh()
    async with as_user(world, "dave") as dave:  # globex ADMIN
        await dave.ok(
            "hadron_create_node", loc=node(PLANS, f"{loc}:plan"), name="Plan", content="Globex plan B"
        )
        own = await dave.ok("hadron_create_node", loc=node(PLANS, f"{loc}:act"), name="Act", nodeType="action",
                            content="{{ deps.plan }}", data={"action": {"kind": "template"}},
                            edges=[{"targetLoc": f"{loc}:plan", "loc": "plan"}])  # fmt: skip
        assert (await dave.ok("hadron_run_action", loc=own.data["urn"])).data["output"] == "Globex plan B"
    async with as_user(world, "carol") as carol:  # CONTRIBUTOR in both organizations
        both = await carol.ok("hadron_create_node", loc=node(SPECS, f"{loc}:both"), name="Both", nodeType="action",
                              content="acme sees: {{ deps.plan }}", data={"action": {"kind": "template"}},
                              edges=[{"targetUrn": node(PLANS, f"{loc}:plan"), "loc": "plan"}])  # fmt: skip
        assert (await carol.ok("hadron_run_action", loc=both.data["urn"])).data[
            "output"
        ] == "acme sees: Globex plan B"
    async with as_user(
        world, "alice"
    ) as alice:  # acme only: globex's action is not there, its node unreadable
        await alice.refused("hadron_run_action", "memory_not_found", loc=own.data["urn"])
        refused = await alice.refused("hadron_run_action", "ACTION_DEPENDENCY_FAILED", loc=both.data["urn"])
        assert "Globex" not in refused.text and "globex" not in refused.text
