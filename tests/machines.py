"""Two simulated machines: two `triptych serve` processes, each with a data directory of its own, sharing
nothing but the engines (``TRIPTYCH_DATABASE_URL``, ``TRIPTYCH_METERGRAPH_CLICKHOUSE_URL``) and the
settings every machine of one deployment is given alike (the JWT secret, Hadron's key, Metergraph's two
secrets), behind the round-robin balancer of ``balancer.py``. Used by tests/contract/test_two_machines.py,
bench/two_machines.py, and the shared servers of tests/conftest.py in their ``two-machines`` mode, where a
``Machines`` stands in for one ``ServerProcess`` (``url``, ``port``, ``env``, ``data_dir``, ``log()``,
``stop()``: decision record 0350)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from balancer import Balancer
from hadron.team_world import build_team
from hadron.world import HADRON_KEY
from harness import SECRET, ServerProcess, free_port, run_threads

from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

WEBHOOK_KEY = base64.b64encode(bytes(range(64, 96))).decode()


@dataclass
class Machines:
    servers: list[ServerProcess]
    balancer: Balancer
    database_url: str
    hadron_key: str  # the Hadron world's app key (hadron/team_world.py)

    @property
    def url(self) -> str:
        return self.balancer.url

    @property
    def port(self) -> int:
        return self.balancer.port

    @property
    def env(self) -> dict[str, str]:
        """What every machine was given alike (the engines' URLs among it)."""
        return self.servers[0].env

    @property
    def data_dir(self) -> Path:
        """The first machine's data directory: where a test opens the services in process (what lives
        there in server mode is per machine; everything shared is in the engines)."""
        return self.servers[0].data_dir

    def log(self) -> str:
        return "\n".join(f"--- machine {i} ---\n{s.log()}" for i, s in enumerate(self.servers))

    def metergraph(self, machine: int) -> Metergraph:
        """Metergraph's services as ``machine`` opens them: its own data directory, the shared engines."""
        server = self.servers[machine]
        return Metergraph.open(
            server.data_dir,
            load_metergraph_settings(clickhouse_url=server.env["TRIPTYCH_METERGRAPH_CLICKHOUSE_URL"]),
            database_url=self.database_url,
        )

    def stop(self) -> None:
        self.balancer.stop()
        for server in self.servers:
            server.stop()


def start_machines(
    root: Path,
    database_url: str,
    clickhouse_url: str,
    hadron_world: bool = True,
    count: int = 2,
    env: dict[str, str] | None = None,
    per_request: bool = False,
) -> Machines:
    """``count`` machines started at once (each knows the others' URLs), the balancer in front (each
    request to the next machine with ``per_request``, else each connection); ``env`` is added to (or
    overrides) what every machine is given."""
    dirs = [root / f"machine-{chr(ord('a') + i)}" / "data" for i in range(count)]
    for d in dirs:
        d.mkdir(parents=True)
    key = build_team(dirs[0], database_url)[0] if hadron_world else ""
    ports = [free_port() for _ in range(count)]
    shared = {
        "TRIPTYCH_DATABASE_URL": database_url,
        "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": clickhouse_url,
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),
        "MG_WEB_SECRET": "one-web-secret-for-every-machine",
        "MG_WEBHOOK_KEY": WEBHOOK_KEY,
        **(env or {}),
    }
    servers = []
    for i in range(count):
        peers = ",".join(f"http://127.0.0.1:{p}" for p in ports if p != ports[i])
        own = {**shared, "TRIPTYCH_PEERS": peers} if peers else shared
        servers.append(ServerProcess(dirs[i], own, fixed_port=ports[i]))
    errors = run_threads(lambda i: servers[i].start(), count)
    if errors:
        for server in servers:
            server.stop()
        raise RuntimeError(f"the machines did not start: {[str(e) for e in errors]}")
    balancer = Balancer([("127.0.0.1", s.port) for s in servers], per_request).start()
    return Machines(servers, balancer, database_url, key)
