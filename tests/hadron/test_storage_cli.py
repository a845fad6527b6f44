"""`triptych hadron source ...` and `triptych hadron key ...`: they do the job and print what they did, on
the engine the server would use (PostgreSQL when TRIPTYCH_DATABASE_URL is set)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hadron.gitrepos import Repo
from hadron.test_cli import hadron

from triptych.hadron.sealing import ServerKey, check_key
from triptych.hadron.surface import Hadron

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary"),
    pytest.mark.engines("sqlite", "postgresql"),
]


def hadron_process(data: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triptych.hadron.cli", "hadron", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def setup(data: Path) -> None:
    for args in (
        ("org", "create", "acme.com", "--name", "Acme"),
        ("memory", "create", "docs", "--class", "knowledge", "--org", "acme.com"),
    ):
        assert hadron(data, *args).returncode == 0


def test_attach_list_sync_and_detach_a_git_source(tmp_path: Path, cli_database_url: str | None) -> None:
    data = tmp_path / "data"
    setup(data)
    repo = Repo(tmp_path / "repo")
    repo.write("a.md", "alpha\n")
    head = repo.commit()
    attached = hadron(data, "source", "attach", "hrn:mem:acme.com:docs", repo.url, "--branch", "main")
    assert attached.returncode == 0, attached.stderr
    assert f"head {head[:12]}" in attached.stdout and "hadron_sync_graph" in attached.stdout
    assert "never synced" in hadron(data, "source", "list").stdout
    synced = hadron(data, "source", "sync", "hrn:mem:acme.com:docs")
    assert synced.returncode == 0 and "created 1" in synced.stdout
    assert f"synced {head[:12]}" in hadron(data, "source", "list").stdout
    assert "detached" in hadron(data, "source", "detach", "hrn:mem:acme.com:docs").stdout
    assert hadron(data, "source", "list").stdout.strip() == "no memory has a Git source"
    refused = hadron(data, "source", "attach", "hrn:mem:acme.com:docs", (tmp_path / "nowhere").as_uri())
    assert refused.returncode == 2 and "git ls-remote failed" in refused.stderr
    refused = hadron(data, "source", "sync", "hrn:mem:acme.com:docs")
    assert refused.returncode == 2 and "NO_GIT_SOURCE" in refused.stderr
    assert (data / "hadron.db").exists() == (cli_database_url is None)  # server mode writes no file


def test_key_new_and_rotate_as_processes(tmp_path: Path, cli_database_url: str | None) -> None:
    data = tmp_path / "data"
    setup(data)
    assert (
        hadron(
            data, "memory", "create", "vault", "--class", "knowledge", "--org", "acme.com", "--encrypted"
        ).returncode
        == 0
    )
    old_file, new_file = tmp_path / "old.key", tmp_path / "new.key"
    made = hadron(data, "key", "new", str(old_file))
    assert made.returncode == 0 and "TRIPTYCH_HADRON_KEY_FILE" in made.stdout
    assert old_file.stat().st_mode & 0o777 == 0o600
    assert hadron(data, "key", "new", str(old_file)).returncode == 2  # never overwrites a key
    hadron(data, "key", "new", str(new_file))
    old = ServerKey.parse(old_file.read_text(), "old")
    h = Hadron.open(data / "hadron.db", key=old, database_url=cli_database_url)
    check_key(h.db, old)
    h.close()
    env = {"TRIPTYCH_HADRON_KEY_FILE": str(old_file), "TRIPTYCH_HADRON_KEY": ""}
    rotated = hadron_process(data, "key", "rotate", "--new-key-file", str(new_file), env=env)
    assert rotated.returncode == 0, rotated.stderr
    assert "memory under key" in rotated.stdout and f"TRIPTYCH_HADRON_KEY_FILE={new_file}" in rotated.stdout
    again = hadron_process(data, "key", "rotate", "--new-key-file", str(new_file), env=env)
    assert again.returncode == 2 and "retired by a key rotation" in again.stderr
    rotated_to = ServerKey.parse(new_file.read_text(), "new")
    h = Hadron.open(data / "hadron.db", key=rotated_to, database_url=cli_database_url)
    try:
        check_key(h.db, rotated_to)  # the engine's key table names the new key as the one in use
    finally:
        h.close()
