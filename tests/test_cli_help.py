"""The CLI documents itself: every command has help text and a README mention, the stdio commands name
their environment variables in --help, and the docs quote no machine-local paths."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import ROOT, TRIPTYCH

from triptych.cli import build_parser

README = (ROOT / "README.md").read_text()
# docs/**: the decision records and the benchmark archives too.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), helps.get(name)
                yield from commands(sub, (*path, name))


ALL = list(commands(build_parser()))


def test_the_command_tree_is_walked() -> None:
    names = {" ".join(path) for path, _ in ALL}
    assert {"serve", "kb import", "hadron memory grant", "metergraph key create", "metergraph-mcp"} <= names


@pytest.mark.parametrize(("path", "help_text"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_has_help_text_and_a_readme_mention(
    path: tuple[str, ...], help_text: str | None
) -> None:
    assert help_text and help_text.strip(), f"`triptych {' '.join(path)}` has no help text"
    # A mention: a README line naming `triptych <command>` and every further word of the path (the
    # commands table groups subcommands on one row: `triptych metergraph key list|revoke`).
    mentioned = [
        line
        for line in README.splitlines()
        if f"triptych {path[0]}" in line and all(w in line for w in path[1:])
    ]
    assert mentioned, f"README.md does not mention `triptych {' '.join(path)}`"


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (
            ["mcp", "--help"],
            ["TRIPTYCH_AGENT_ID", "TRIPTYCH_DATA_DIR", "METERGRAPH_URL", "METERGRAPH_AGENT_TOKEN"],
        ),
        (["metergraph-mcp", "--help"], ["METERGRAPH_URL", "METERGRAPH_AGENT_TOKEN"]),
    ],
)
def test_the_stdio_commands_name_their_environment_in_help(argv: list[str], names: list[str]) -> None:
    out = subprocess.run([TRIPTYCH, *argv], capture_output=True, text=True, timeout=60, check=True).stdout
    for name in names:
        assert name in out, f"`triptych {' '.join(argv)}` does not name {name}"
    for name in re.findall(r"\b(?:TRIPTYCH|METERGRAPH|MG)_[A-Z_]+\b", out):
        assert name in README, f"{name} is in --help but not in README.md"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_docs_quote_no_machine_local_paths(doc: Path) -> None:
    # Scratch folders and checkouts of the machine a figure was measured on mean nothing elsewhere;
    # bench/README*.md may name the benchmarks' own default folders under /tmp/triptych-bench.
    text = re.sub(r"/tmp/triptych-bench[\w/<>.-]*", "", doc.read_text())
    found = re.findall(r"(?<![\w.])/(?:tmp|work|home|root|Users)/[\w./<>-]*", text)
    assert found == [], f"{doc.name} quotes machine-local paths: {found[:5]}"


@pytest.mark.parametrize(
    ("env", "name", "given"),
    [
        ({"TRIPTYCH_PORT": "abc"}, "TRIPTYCH_PORT", "'abc'"),
        ({"MG_MAX_ROWS": "-5"}, "MG_MAX_ROWS", "'-5'"),
        ({"MG_REPLAY_TIMEOUT_SECONDS": "soon"}, "MG_REPLAY_TIMEOUT_SECONDS", "'soon'"),
    ],
    ids=["core", "metergraph", "replay"],
)
def test_serve_names_a_bad_setting_in_one_line_without_a_traceback(
    tmp_path: Path, env: dict[str, str], name: str, given: str
) -> None:
    import os

    run = subprocess.run(
        [TRIPTYCH, "serve", "--data-dir", str(tmp_path)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("triptych:")]
    assert len(lines) == 1 and f"invalid setting {name}:" in lines[0] and given in lines[0], run.stderr
    assert "Traceback" not in run.stderr and "errors.pydantic.dev" not in run.stderr


def test_serve_on_a_port_another_server_holds_says_so_in_one_line_before_starting(tmp_path: Path) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = subprocess.run(
            [TRIPTYCH, "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"triptych: cannot listen on 127.0.0.1:{port}: Address already in use (another server holds that"
        " port, perhaps a triptych serve started earlier: stop it, or choose another port with --port)"
    ]
    # Refused before the start: no "serving on" line, no data directory made.
    assert not (tmp_path / "data").exists()


def _start_lines(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """The lines ``serve --host 0.0.0.0`` writes on stderr up to and including its start line, then stops it."""
    import os
    import signal

    from harness import free_port

    server = subprocess.Popen(
        [TRIPTYCH, "serve", "--host", "0.0.0.0", "--port", str(free_port()), "--data-dir", str(tmp_path)],
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    lines: list[str] = []
    try:
        for line in server.stderr:
            lines.append(line.rstrip("\n"))
            if "Application startup complete" in line:  # past the start line and what follows it
                break
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
    return [line for line in lines if line.startswith("triptych")]


def test_serve_beyond_this_machine_says_what_the_defaults_refuse_and_allow(tmp_path: Path) -> None:
    lines = _start_lines(tmp_path, {})
    assert lines[0].startswith("triptych 0.1.0: serving on http://0.0.0.0:"), lines
    assert lines[1] == (
        "triptych: listening on 0.0.0.0, beyond this machine: its MCP endpoints answer only the Host names in"
        " TRIPTYCH_ALLOWED_HOSTS (127.0.0.1:*,localhost:*,[::1]:*), others get 421 Invalid Host header: add"
        " the names clients use, e.g. TRIPTYCH_ALLOWED_HOSTS=127.0.0.1:*,localhost:*,triptych.internal:*;"
        " auth is off, so anyone who reaches the port reads and writes all its data: set"
        " TRIPTYCH_AUTH_ENABLED=true and TRIPTYCH_JWT_SECRET"
    ), lines


def test_serve_beyond_this_machine_with_its_names_allowed_and_auth_on_says_nothing_more(
    tmp_path: Path,
) -> None:
    env = {
        "TRIPTYCH_ALLOWED_HOSTS": "127.0.0.1:*,triptych.internal:*",
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": "a-secret-of-thirty-two-bytes-or-more!",
    }
    lines = _start_lines(tmp_path, env)
    assert len(lines) == 1 and lines[0].startswith("triptych 0.1.0: serving on http://0.0.0.0:"), lines


def test_serve_with_auth_on_and_a_short_jwt_secret_says_so_at_start(tmp_path: Path) -> None:
    env = {
        "TRIPTYCH_ALLOWED_HOSTS": "127.0.0.1:*,triptych.internal:*",
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": "hunter2",
    }
    lines = _start_lines(tmp_path, env)
    assert lines[1:] == [
        "triptych: TRIPTYCH_JWT_SECRET is 7 bytes, shorter than the 32 HS256 needs (RFC 7518): anyone holding"
        " one token could guess it and mint an admin's. Make one with `python3 -c 'import secrets;"
        " print(secrets.token_urlsafe(48))'` and mint tokens again"
    ], lines
    assert "hunter2" not in "\n".join(lines)
