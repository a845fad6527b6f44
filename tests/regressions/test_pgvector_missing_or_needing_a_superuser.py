"""A newcomer's PostgreSQL without pgvector, or a database owned by a normal user (``CREATE EXTENSION
vector`` needs a superuser), ended ``migrate --to`` and ``serve`` in a 30-line traceback. Now each says
in one line what is wrong and what to run; so does a user who may not create tables at all, and a
pgvector older than 0.8."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from harness import TRIPTYCH
from postgres import PostgresCluster

from triptych.core.errors import StorageUnavailable
from triptych.core.pg import ensure_extension


@pytest.fixture
def newcomer_url(postgres: PostgresCluster) -> Iterator[str]:
    """A database owned by a login role that is not a superuser, without the vector extension."""
    role, database = f"newcomer_{uuid.uuid4().hex[:8]}", f"nc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
        conn.execute(f"CREATE DATABASE {database} OWNER {role}".encode())
    yield f"postgresql://{role}@127.0.0.1:{postgres.port}/{database}"
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database} WITH (FORCE)".encode())
        conn.execute(f"DROP ROLE {role}".encode())


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPTYCH, *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )


def assert_one_line_naming_the_superuser_step(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "vector" in line]
    assert len(lines) == 1, stderr
    assert "needs a superuser once" in lines[0] and "psql -d nc_" in lines[0], lines[0]
    assert 'CREATE EXTENSION vector"' in lines[0], lines[0]


def test_serve_on_a_database_whose_user_may_not_create_the_extension_says_what_to_run(
    newcomer_url: str, tmp_path: Path
) -> None:
    started = run("serve", "--port", "0", env={"TRIPTYCH_DATABASE_URL": newcomer_url,
                                               "TRIPTYCH_DATA_DIR": str(tmp_path / "data")})  # fmt: skip
    assert started.returncode == 1
    assert_one_line_naming_the_superuser_step(started.stderr)
    assert "triptych: cannot start: The PostgreSQL database" in started.stderr


def test_migrate_to_a_database_whose_user_may_not_create_the_extension_says_what_to_run(
    newcomer_url: str, tmp_path: Path
) -> None:
    env = {"TRIPTYCH_DATA_DIR": str(tmp_path / "data")}
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nSomething to move.\n")
    assert run("kb", "import", str(note), env=env).returncode == 0
    moved = run("migrate", "--to", newcomer_url, env=env)
    assert moved.returncode == 1
    assert_one_line_naming_the_superuser_step(moved.stderr)


def test_the_extension_the_server_does_not_have_is_named_with_what_to_install(
    postgres: PostgresCluster,
) -> None:
    # The cluster's PostgreSQL has pgvector: an extension it lacks stands in for a server without it
    # (the same refusal from PostgreSQL, "extension ... is not available").
    url = postgres.create_database("noext")
    with psycopg.connect(url, autocommit=True) as conn, pytest.raises(StorageUnavailable) as refused:
        ensure_extension(conn, url, "triptych_absent")
    assert "has no triptych_absent extension installed" in refused.value.message
    assert "\n" not in refused.value.message and refused.value.hint is not None
    assert refused.value.details["reason"] == "extension_missing"


def test_serve_as_a_user_who_may_not_create_tables_says_what_to_grant(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    # PostgreSQL 15+: a database the user does not own, its extension created by a superuser, and no
    # CREATE on the public schema.
    role = f"reader_{uuid.uuid4().hex[:8]}"
    url = postgres.create_database("nocreate")
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
        conn.execute(b"CREATE EXTENSION vector")
    try:
        started = run("serve", "--port", "0", env={"TRIPTYCH_DATABASE_URL": url.replace("postgres@", f"{role}@"),
                                                   "TRIPTYCH_DATA_DIR": str(tmp_path / "data")})  # fmt: skip
    finally:
        with psycopg.connect(postgres.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)".encode())
            conn.execute(f"DROP ROLE {role}".encode())
    assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
    assert "may not create tables" in started.stderr
    assert f'psql -d {database} -c "GRANT CREATE ON SCHEMA public TO {role}"' in started.stderr


def test_serve_on_a_pgvector_older_than_0_8_names_the_versions_and_the_update(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    # Its iterative index scans keep a search of a large workspace within the workspace (decision 0330);
    # an older pgvector refused their settings in every such search. The catalog stands in for an old
    # installation (the server's library is 0.8; ALTER EXTENSION ... UPDATE moves what the catalog says).
    url = postgres.create_database("oldvec")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("UPDATE pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
    started = run("serve", "--port", "0", env={"TRIPTYCH_DATABASE_URL": url,
                                               "TRIPTYCH_DATA_DIR": str(tmp_path / "data")})  # fmt: skip
    assert started.returncode == 1
    assert "Traceback" not in started.stderr, started.stderr
    lines = [line for line in started.stderr.splitlines() if "pgvector" in line]
    assert len(lines) == 1, started.stderr
    assert "pgvector 0.7.4" in lines[0] and "0.8 or newer" in lines[0], lines[0]
    assert "ALTER EXTENSION vector UPDATE" in lines[0], lines[0]
