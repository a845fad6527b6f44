"""The `triptych hadron` admin commands, run as real processes: they print what they made, and act on the
engine the server would use (PostgreSQL when TRIPTYCH_DATABASE_URL is set)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from triptych.hadron.cli import main
from triptych.hadron.surface import Hadron


def hadron_process(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a real process (`python -m triptych.hadron.cli` is `triptych hadron`)."""
    return subprocess.run(
        [sys.executable, "-m", "triptych.hadron.cli", "hadron", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def hadron(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command tree run in this process (fast), captured like a process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["hadron", *args, "--data-dir", str(data)])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


pytestmark = pytest.mark.engines("sqlite", "postgresql")


def test_admin_commands_set_up_a_world_and_print_it(tmp_path: Path, cli_database_url: str | None) -> None:
    data = tmp_path / "data"
    schema = tmp_path / "schema.json"
    schema.write_text('{"collections": {"task": {"type": "object", "required": ["title"]}}}')
    steps = [
        (("org", "create", "acme.com", "--name", "Acme"), "created organization hrn:org:acme.com (Acme)"),
        (("user", "create", "alice"), "created user hrn:user:alice"),
        (
            ("org", "member", "acme.com", "alice", "--role", "contributor"),
            "hrn:user:alice is CONTRIBUTOR of hrn:org:acme.com",
        ),
        (
            ("app", "create", "bot", "--org", "acme.com", "--name", "Bot"),
            "created app hrn:app:acme.com:bot (Bot)",
        ),
        (
            ("app", "member", "hrn:app:acme.com:bot", "alice", "--role", "READER"),
            "hrn:user:alice is READER of hrn:app:acme.com:bot",
        ),
        (
            ("memory", "create", "specs", "--class", "knowledge", "--org", "acme.com"),
            "created knowledge memory hrn:mem:acme.com:specs",
        ),
        (
            ("memory", "create", "notes", "--class", "private", "--user", "alice"),
            "created private memory hrn:mem:alice:notes",
        ),
        (
            (
                "memory",
                "grant",
                "hrn:mem:acme.com:specs",
                "--access",
                "read-only",
                "--app",
                "hrn:app:acme.com:bot",
            ),
            "granted: hrn:app:acme.com:bot has read-only on hrn:mem:acme.com:specs",
        ),
        (
            ("memory", "schema", "hrn:mem:acme.com:specs", "--file", str(schema)),
            "set the schema of hrn:mem:acme.com:specs",
        ),
        (
            ("app", "attach", "hrn:app:acme.com:bot", "hrn:mem:acme.com:specs"),
            "attached hrn:mem:acme.com:specs to hrn:app:acme.com:bot",
        ),
    ]
    for args, expected in steps:
        done = hadron(data, *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(expected), done.stdout
    key = hadron_process(data, "app", "key", "hrn:app:acme.com:bot")
    assert key.returncode == 0 and key.stdout.startswith("hak_") and "shown once" in key.stderr
    opened = Hadron.open(data / "hadron.db", database_url=cli_database_url)
    try:
        assert opened.tenancy.app_for_key(key.stdout.strip()) is not None
        assert opened.admin().memory("hrn:mem:acme.com:specs").schema is not None
    finally:
        opened.close()
    assert (data / "hadron.db").exists() == (cli_database_url is None)  # server mode writes no file


def test_admin_refusals_exit_2_with_the_reason(tmp_path: Path, cli_database_url: str | None) -> None:
    data = tmp_path / "data"
    assert hadron(data, "org", "create", "acme.com").returncode == 0
    refused = hadron_process(data, "org", "create", "acme.com")
    assert refused.returncode == 2 and "URN_ALREADY_EXISTS" in refused.stderr
    for args, reason in [
        (("org", "create", "acme.com"), "URN_ALREADY_EXISTS"),
        (("org", "create", "acme"), "org-root-not-dotted"),
        (("user", "create", "Bob"), "slug-not-lowercase"),
        (("memory", "create", "node", "--class", "knowledge", "--org", "acme.com"), "reserved-word-slug"),
        (("memory", "create", "x", "--class", "private", "--org", "acme.com"), "owned by a user"),
        (("org", "member", "acme.com", "ghost", "--role", "READER"), "user_not_found"),
    ]:
        done = hadron(data, *args)
        assert done.returncode == 2, args
        assert reason in done.stderr, done.stderr
    assert (data / "hadron.db").exists() == (cli_database_url is None)
