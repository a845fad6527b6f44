"""Hadron team coordination through the official MCP client: workers, worker sessions (holds,
liveness, takeover, handoffs), the roster, whoami after a reconnect, and node attribution."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hadron.team_world import start_team_world
from hadron.world import World, as_user

CREW = "hrn:app:acme.com:crew"
OPS = "hrn:app:acme.com:ops"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    world, crew_key = start_team_world(tmp_path_factory.mktemp("hadron-team"))
    yield world, crew_key
    world.server.stop()


async def test_casting_returns_the_worker_and_its_boot_briefing(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        cast = await alice.ok(
            "hadron_cast_worker", name="Iris", role="backend-engineer", promptOverride="Terse."
        )
        worker = cast.data["worker"]
        assert worker["name"] == "Iris" and worker["role"] == "backend-engineer"
        assert worker["urn"] == "hrn:worker:acme.com:crew:iris"
        assert worker["agent"]["urn"] == "hrn:agent:acme.com:crew:backend"
        assert "You are Iris, the backend-engineer of Crew. Ship small PRs." in worker["bootBriefing"]
        assert "## Prompt override\nTerse." in worker["bootBriefing"]
        assert worker["heldBy"] is None and worker["neverDriven"] is True
        assert f"id {worker['id']}" in cast.text
