"""Session fixtures: the `triptych serve` processes the contract tests share (auth off, auth on, Metergraph,
the Hadron world), one per session (per xdist worker) and engine, and the engines themselves.

Besides one server per engine, each can be two machines (``two-machines``): two `triptych serve` processes
with data directories of their own, sharing only PostgreSQL and ClickHouse, behind the round-robin balancer
of tests/balancer.py (tests/machines.py), whose URL is the server's. A module joins with
``@pytest.mark.engines(..., "two-machines")`` (``open_server``, ``auth_server``, ``shared_hadron_world``)
or ``@pytest.mark.metergraph_engines(..., "two-machines")`` (``shared_metergraph``); a test that reads a
server's data directory or log, or runs the CLI on it, names the engines it keeps (decision 0350)."""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import crashed_workers
import file_times
import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from harness import SECRET, ServerProcess
from postgres import PostgresCluster
from provider_server import ProviderServer
from shared_metergraph import shared_metergraph_env

if TYPE_CHECKING:  # imported where used: machines.py imports Metergraph and Hadron, which few files need
    from machines import Machines

# The default data directory is the user's (core/datadir.py): a test that forgets to pass its own never
# writes into the real home, and every process the tests start inherits this.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="triptych-test-xdg-")
atexit.register(shutil.rmtree, os.environ["XDG_DATA_HOME"], True)
# The test worlds hold an encrypted memory (acme.com:vault): every server the tests start gets the key
# it is sealed with, unless a test passes its own (or "" for none).
os.environ.setdefault("TRIPTYCH_HADRON_KEY", base64.urlsafe_b64encode(bytes(range(32))).decode())


TWO_MACHINES = "two-machines"  # PostgreSQL and ClickHouse shared by two servers behind a balancer
ENGINES = ("sqlite", "postgresql", TWO_MACHINES)
METERGRAPH_ENGINES = ("sqlite", "clickhouse", TWO_MACHINES)
# The files that run through two machines in every run, a few per surface; every other test marked for
# two machines runs there with TRIPTYCH_TWO_MACHINES=all (all of them cost minutes of CI: decision 0350).
TWO_MACHINES_ALWAYS = {
    "test_metronix_kb.py",
    "test_metronix_rest.py",
    "test_metronix_auth.py",
    "test_hadron_nodes.py",
    "test_hadron_live_tools.py",
    "test_metergraph_workloads.py",
    "test_metergraph_analysis.py",
}


def pytest_configure(config: pytest.Config) -> None:
    file_times.configure(config)
    crashed_workers.no_worker_restart(config)  # a crashed worker fails the run, never hangs it
    config.addinivalue_line(
        "markers",
        "engines(*names): run the test against each storage engine named (sqlite, postgresql, two-machines) "
        "through the `storage_engine` fixture and the servers that depend on it; unmarked tests run on sqlite only",
    )
    config.addinivalue_line(
        "markers",
        "metergraph_engines(*names): the engines `shared_metergraph` runs the module on (sqlite, clickhouse, "
        "two-machines); unmarked modules run on sqlite and clickhouse",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only in an xdist worker: the controller schedules whole files in the order the workers collected
    # them (tasks.py passes --no-loadscope-reorder), and a serial run gains nothing from the order.
    if hasattr(config, "workerinput"):
        file_times.longest_first(items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Session scope: each engine's servers start once, whichever tests share them.
    # Its own name: tests/metergraph has an `engine` fixture of its own (sqlite, clickhouse).
    if "storage_engine" in metafunc.fixturenames:
        names = _engines(metafunc, "engines", ("sqlite",), ENGINES)
        metafunc.parametrize("storage_engine", names, indirect=True, scope="session")
    if "shared_metergraph" in metafunc.fixturenames:
        names = _engines(metafunc, "metergraph_engines", ("sqlite", "clickhouse"), METERGRAPH_ENGINES)
        metafunc.parametrize("shared_metergraph", names, indirect=True, scope="module")


def _engines(
    metafunc: pytest.Metafunc, marker: str, default: tuple[str, ...], known: tuple[str, ...]
) -> list[str]:
    """The engines a test's closest ``marker`` names (``default`` without one); two machines only for the
    files that always run there, or for all with TRIPTYCH_TWO_MACHINES=all."""
    mark = metafunc.definition.get_closest_marker(marker)
    names = list(mark.args if mark else default)
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"unknown engines {sorted(unknown)}; known: {known}")
    everywhere = os.environ.get("TRIPTYCH_TWO_MACHINES") == "all"
    if not everywhere and metafunc.definition.path.name not in TWO_MACHINES_ALWAYS:
        names = [n for n in names if n != TWO_MACHINES]
    return names


@pytest.fixture(scope="session")
def storage_engine(request: pytest.FixtureRequest) -> str:
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
    # two-machines: its PostgreSQL is the same cluster's, so a test's own database is made alike.
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    return {"TRIPTYCH_DATABASE_URL": cluster.create_database()}


class ServerPool:
    """The session's shared servers, one per configuration and engine, started on first use.

    Under ``--dist loadfile`` a worker runs whole files one after another, and each file runs its sqlite
    tests before its postgresql ones: a session fixture parametrized by ``storage_engine`` is torn down each
    time the engine changes, which restarted ``open_server``/``auth_server`` twice per file. Held here,
    outside the parametrized fixtures, each starts once per worker and engine (docs/decisions/0232)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.servers: dict[tuple[str, str], ServerProcess] = {}

    def get(self, name: str, engine: str, env: Callable[[], dict[str, str]]) -> ServerProcess:
        key = (name, engine)
        if key not in self.servers:
            data = self.tmp_path_factory.mktemp(f"{name}-{engine}") / "data"
            self.servers[key] = ServerProcess(data, env()).start()
        return self.servers[key]

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path_factory)
    yield pool
    pool.stop()


@pytest.fixture(scope="session")
def open_server(
    request: pytest.FixtureRequest, storage_engine: str, server_pool: ServerPool
) -> ServerProcess:
    """Auth disabled: the local development configuration."""
    if storage_engine == TWO_MACHINES:
        machines: ServerProcess = request.getfixturevalue("two_machines_open")
        return machines
    return server_pool.get(
        "open",
        storage_engine,
        lambda: {"TRIPTYCH_AUTH_ENABLED": "false", **engine_env(request, storage_engine)},
    )


@pytest.fixture(scope="session")
def auth_server(
    request: pytest.FixtureRequest, storage_engine: str, server_pool: ServerPool
) -> ServerProcess:
    """Auth enabled with the upstream product's variable names (AUTH_ENABLED, METRONIX_SECRET_KEY)."""
    if storage_engine == TWO_MACHINES:
        machines: ServerProcess = request.getfixturevalue("two_machines_shared").machines
        return machines
    return server_pool.get(
        "auth",
        storage_engine,
        lambda: {
            "AUTH_ENABLED": "true",
            "METRONIX_SECRET_KEY": SECRET,
            **engine_env(request, storage_engine),
        },
    )


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


# The shared Hadron world and Metergraph servers (docs/decisions/0300) survive an engine switch as
# ``server_pool``'s do, as session fixtures of their own per engine, started on first use; not in the pool,
# because each depends on its engine's fixture (``postgres``, ``clickhouse``) and so stops before it, and
# the world is more than its server (keys, ids). The fixture a module names picks its engine's.
def _hadron_world(tmp_path_factory: pytest.TempPathFactory, engine: str, url: str | None) -> Iterator[Any]:
    from hadron.world import start_world

    world = start_world(tmp_path_factory.mktemp(f"hadron-shared-{engine}"), url)
    yield world
    world.server.stop()


@pytest.fixture(scope="session")
def shared_hadron_world_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from _hadron_world(tmp_path_factory, "sqlite", None)


@pytest.fixture(scope="session")
def shared_hadron_world_postgresql(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresCluster
) -> Iterator[Any]:
    yield from _hadron_world(tmp_path_factory, "postgresql", postgres.create_database())


@pytest.fixture(scope="session")
def shared_hadron_world_two_machines(two_machines_shared: TwoMachinesShared) -> Any:
    from hadron.world import World

    pair = two_machines_shared
    return World(pair.machines, pair.hadron_keys[0], pair.hadron_keys[1], database_url=pair.database_url)


@pytest.fixture(scope="module")
def shared_hadron_world(request: pytest.FixtureRequest, storage_engine: str) -> Any:
    """The Hadron world of tests/hadron/world.py behind one server per session (per xdist worker) and
    storage engine, for modules whose tests each write under locations of their own (``fresh()``) and
    never list or count what the world holds as a whole (docs/decisions/0300-shared-test-servers.md)."""
    return request.getfixturevalue(f"shared_hadron_world_{storage_engine.replace('-', '_')}")


@pytest.fixture(scope="session")
def replay_provider() -> Iterator[ProviderServer]:
    """The local OpenAI and Anthropic APIs the shared Metergraph servers replay on, one per session."""
    with ProviderServer() as provider:
        yield provider


def _shared_metergraph(
    tmp_path_factory: pytest.TempPathFactory,
    provider: ProviderServer,
    engine: str,
    engine_env: dict[str, str],
) -> Iterator[ServerProcess]:
    env = {**shared_metergraph_env(provider.openai_url, provider.anthropic_url), **engine_env}
    server = ServerProcess(tmp_path_factory.mktemp(f"mg-shared-{engine}") / "data", env).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_metergraph_sqlite(
    tmp_path_factory: pytest.TempPathFactory, replay_provider: ProviderServer
) -> Iterator[ServerProcess]:
    """The session's shared Metergraph server on the embedded engine (tests/shared_metergraph.py)."""
    yield from _shared_metergraph(tmp_path_factory, replay_provider, "sqlite", {})


@pytest.fixture(scope="session")
def shared_metergraph_clickhouse(
    tmp_path_factory: pytest.TempPathFactory, replay_provider: ProviderServer, clickhouse: ClickHouseEndpoint
) -> Iterator[ServerProcess]:
    """The session's shared Metergraph server on ClickHouse, a database of the session's endpoint (it
    depends on the endpoint, so it stops before the endpoint closes)."""
    env = {"TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": clickhouse.database_url()}
    yield from _shared_metergraph(tmp_path_factory, replay_provider, "clickhouse", env)


@pytest.fixture(scope="module")
def shared_metergraph(request: pytest.FixtureRequest) -> ServerProcess:
    """Each Metergraph engine's shared server in turn (``metergraph_engines`` chooses), started on first
    use and kept for the session: for a module whose tests each take a workspace of their own (a fresh
    tenant, no process of its own). A module that needs other settings, a restart or its own data
    directory uses ``metergraph_engine``."""
    if request.param == TWO_MACHINES:
        machines: ServerProcess = request.getfixturevalue("two_machines_shared").machines
        return machines
    server: ServerProcess = request.getfixturevalue(f"shared_metergraph_{request.param}")
    return server


# -- two machines --------------------------------------------------------------------------------------
# Two pairs per session (per xdist worker), each started on first use: auth off (``open_server``), and one
# for everything with auth on (``auth_server``, the Hadron world, the Metergraph server), whose settings
# are the union of those three's and change nothing another surface sees (the JWT secret is the same
# ``SECRET``; the Metergraph settings are read by Metergraph alone). Four server starts, not eight. Each
# request goes to the next machine (``per_request``), so consecutive calls of one client cross machines.


@dataclass
class TwoMachinesShared:
    machines: Machines
    database_url: str
    hadron_keys: tuple[str, str]  # the Hadron world's two app keys (hadron/world.py)


@pytest.fixture(scope="session")
def two_machines_open(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresCluster, clickhouse: ClickHouseEndpoint
) -> Iterator[Machines]:
    from machines import start_machines

    machines = start_machines(
        tmp_path_factory.mktemp("two-machines-open"),
        postgres.create_database(),
        clickhouse.database_url(),
        hadron_world=False,
        env={"TRIPTYCH_AUTH_ENABLED": "false"},
        per_request=True,
    )
    yield machines
    machines.stop()
    _both_served(machines)


@pytest.fixture(scope="session")
def two_machines_shared(
    tmp_path_factory: pytest.TempPathFactory,
    postgres: PostgresCluster,
    clickhouse: ClickHouseEndpoint,
    replay_provider: ProviderServer,
) -> Iterator[TwoMachinesShared]:
    from hadron.world import build_world
    from machines import start_machines

    root = tmp_path_factory.mktemp("two-machines-shared")
    database_url = postgres.create_database()
    keys = build_world(root, database_url)  # in PostgreSQL, before the machines start
    env = {
        "AUTH_ENABLED": "true",
        "METRONIX_SECRET_KEY": SECRET,
        **shared_metergraph_env(replay_provider.openai_url, replay_provider.anthropic_url),
    }
    machines = start_machines(
        root, database_url, clickhouse.database_url(), hadron_world=False, env=env, per_request=True
    )
    yield TwoMachinesShared(machines, database_url, keys)
    machines.stop()
    _both_served(machines)


def _both_served(machines: Machines) -> None:
    """The tests went through both machines (what the mode is for), unless too few requests were made."""
    served = machines.balancer.served
    assert len(served) < 2 or set(served) == {0, 1}, f"one machine served every request: {set(served)}"


@pytest.fixture
def database_url(request: pytest.FixtureRequest, storage_engine: str) -> str | None:
    """None on sqlite; on postgresql a fresh empty database of the session's cluster, one per test (for
    stores and services a test opens in process, e.g. ``Hadron.open(path, database_url=...)``)."""
    return engine_env(request, storage_engine).get("TRIPTYCH_DATABASE_URL")


@pytest.fixture(scope="module")
def module_database_url(request: pytest.FixtureRequest, storage_engine: str) -> str | None:
    """``database_url`` shared by a module (a contract module's world and the server over it)."""
    return engine_env(request, storage_engine).get("TRIPTYCH_DATABASE_URL")
