"""Session fixtures: one auth-disabled and one auth-enabled `triptych serve`, shared by the contract tests."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from harness import SECRET, ServerProcess
from postgres import PostgresCluster

# The default data directory is the user's (core/datadir.py): a test that forgets to pass its own never
# writes into the real home, and every process the tests start inherits this.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="triptych-test-xdg-")
atexit.register(shutil.rmtree, os.environ["XDG_DATA_HOME"], True)


ENGINES = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "engines(*names): run the test against each storage engine named (sqlite, postgresql) through the "
        "`engine` fixture and the servers that depend on it; unmarked tests run on sqlite only",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Session scope: each engine's servers start once, whichever tests share them.
    if "engine" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("engines")
        names = marker.args if marker else ("sqlite",)
        unknown = set(names) - set(ENGINES)
        if unknown:
            raise ValueError(f"unknown engines {sorted(unknown)}; known: {ENGINES}")
        metafunc.parametrize("engine", names, indirect=True, scope="session")


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> str:
    """The storage engine the servers of this test use (``@pytest.mark.engines`` chooses)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A real PostgreSQL with pgvector on 127.0.0.1 for the whole session, removed at the end."""
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


def engine_env(request: pytest.FixtureRequest, engine: str) -> dict[str, str]:
    """The environment that points a server at ``engine`` (a fresh PostgreSQL database, if that)."""
    if engine == "sqlite":
        return {}
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    return {"TRIPTYCH_DATABASE_URL": cluster.create_database()}


@pytest.fixture(scope="session")
def open_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, engine: str
) -> Iterator[ServerProcess]:
    """Auth disabled: the local development configuration."""
    env = {"TRIPTYCH_AUTH_ENABLED": "false", **engine_env(request, engine)}
    server = ServerProcess(tmp_path_factory.mktemp(f"open-{engine}") / "data", env).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def auth_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, engine: str
) -> Iterator[ServerProcess]:
    """Auth enabled with the upstream product's variable names (AUTH_ENABLED, METRONIX_SECRET_KEY)."""
    env = {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, **engine_env(request, engine)}
    server = ServerProcess(tmp_path_factory.mktemp(f"auth-{engine}") / "data", env).start()
    yield server
    server.stop()
