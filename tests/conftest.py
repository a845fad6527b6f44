"""Session fixtures: one auth-disabled and one auth-enabled `triptych serve`, shared by the contract tests."""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from harness import SECRET, ServerProcess

# The default data directory is the user's (core/datadir.py): a test that forgets to pass its own never
# writes into the real home, and every process the tests start inherits this.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="triptych-test-xdg-")
atexit.register(shutil.rmtree, os.environ["XDG_DATA_HOME"], True)
# The test worlds hold an encrypted memory (acme.com:vault): every server the tests start gets the key
# it is sealed with, unless a test passes its own (or "" for none).
os.environ.setdefault("TRIPTYCH_HADRON_KEY", base64.urlsafe_b64encode(bytes(range(32))).decode())


@pytest.fixture(scope="session")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Auth disabled: the local development configuration."""
    server = ServerProcess(
        tmp_path_factory.mktemp("open") / "data", {"TRIPTYCH_AUTH_ENABLED": "false"}
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Auth enabled with the upstream product's variable names (AUTH_ENABLED, METRONIX_SECRET_KEY)."""
    env = {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET}
    server = ServerProcess(tmp_path_factory.mktemp("auth") / "data", env).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def clickhouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseEndpoint]:
    """ClickHouse's HTTP interface over chdb on 127.0.0.1 (tests/clickhouse_endpoint.py), one per session;
    each test takes a database of its own (``database_url``)."""
    endpoint = ClickHouseEndpoint(tmp_path_factory.mktemp("clickhouse"))
    yield endpoint
    endpoint.close()


@pytest.fixture(scope="module", params=("sqlite", "clickhouse"))
def metergraph_engine(request: pytest.FixtureRequest) -> dict[str, str]:
    """The server environment selecting each Metergraph engine in turn (a module's server per engine):
    the Metergraph contract suite runs against both."""
    if request.param == "sqlite":
        return {}
    endpoint: ClickHouseEndpoint = request.getfixturevalue("clickhouse")
    return {"TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": endpoint.database_url()}
