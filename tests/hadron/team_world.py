"""A team world for contract tests, on top of ``world.build_world``: two team Apps of acme.com, each
with a Team Agent and role agents, an App key, and people at different roles. Set up through the admin
services the CLI runs (``triptych hadron agent install ...``).

acme.com:crew — alice (org OWNER), bob (AppMember CONTRIBUTOR), carol (org CONTRIBUTOR),
erin (AppMember READER); agents: team (Team Agent), backend (backend-engineer), android
(android-engineer); an App key; an AI service config.
acme.com:ops — bob (AppMember READER); agents: team (Team Agent), sre (site-reliability).
acme.com:bot (from world.py) has no agents at all; acme.com:twins has two Team Agents.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hadron.world import Session, World, build_world, engine
from harness import SECRET, TRIPTYCH, ServerProcess

from triptych.hadron.cli import TeamAdmin
from triptych.hadron.engines import open_stores

CREW = "hrn:app:acme.com:crew"
OPS = "hrn:app:acme.com:ops"


def cli(data_dir: Path, *args: str, database_url: str | None = None) -> str:
    """Run ``triptych hadron ...`` against the data directory (or ``database_url``); its stdout."""
    done = subprocess.run(
        [TRIPTYCH, "hadron", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **engine(database_url)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def build_team(data_dir: Path, database_url: str | None = None) -> tuple[str, str, str]:
    """In process, through the admin services the CLI runs (tests/hadron/test_team_cli.py runs the CLI)."""
    key, other = build_world(data_dir, database_url)
    stores = open_stores(data_dir / "hadron.db", database_url, None, None)
    try:
        admin = TeamAdmin(stores)
        tenancy, agents = admin.tenancy, admin.agents
        for slug, name in (("crew", "Crew"), ("ops", "Ops"), ("twins", "Twins")):
            tenancy.create_app(slug, name, "acme.com", None)
        tenancy.add_app_member(CREW, "bob", "CONTRIBUTOR")
        tenancy.add_app_member(CREW, "erin", "READER")
        tenancy.add_app_member(OPS, "bob", "READER")
        agents.install(CREW, "team", team=True)
        agents.install(
            CREW, "backend", persona_role="backend-engineer",
            system_prompt="You are {{name}}, the {{role}} of {{app}}. Ship small PRs.",
        )  # fmt: skip
        agents.install(CREW, "android", persona_role="android-engineer")
        agents.install(OPS, "team", team=True)
        agents.install(OPS, "sre", persona_role="site-reliability")
        agents.install("hrn:app:acme.com:twins", "one", team=True)
        agents.install("hrn:app:acme.com:twins", "two", team=True)
        agents.add_ai_config(CREW, "claude-main", "anthropic", "claude-sonnet")
        _, crew_key = tenancy.create_app_key(CREW, "tests")
    finally:
        stores.close()
    return key, other, crew_key


def start_team_world(tmp: Path, database_url: str | None = None) -> tuple[World, str]:
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    key, other, crew_key = build_team(data_dir, database_url)
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET, **engine(database_url)}
    server = ServerProcess(data_dir, env).start()
    return World(server, key, other, database_url=database_url), crew_key


async def worker_session(s: Session, app: str, name: str, role: str) -> str:
    """Cast ``name`` in ``app`` if needed and bind it; the session id."""
    await s.ok("hadron_set_active_app", app=app)
    if (await s.call("hadron_get_worker", workerRef=name)).is_error:
        await s.ok("hadron_cast_worker", name=name, role=role)
    started = await s.ok("hadron_start_session", description=f"{name} stint", workerRef=name)
    return str(started.data["sessionId"])
