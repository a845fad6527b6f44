"""The Metergraph server the contract modules share, one per session (per xdist worker) and engine.

A module that only needs a tenant of its own takes ``shared_metergraph`` (tests/conftest.py) instead of
starting a server: each of its tests mints keys for a fresh workspace, which isolates it as well as a
process of its own did, for a fraction of the cost (a start imports the whole product). The settings
below are the union of what those modules asked of their own servers; none of them changes what another
module sees (docs/decisions/0300-shared-test-servers.md says which modules share and which keep theirs).
"""

from __future__ import annotations

from harness import SECRET

# App links start here (the analysis and reports modules assert it).
PUBLIC_URL = "https://metergraph.example.test"
# A static ingest token for MG_WORKSPACE (the conformance module's static door).
STATIC_INGEST = "static-ingest-token-for-conformance"
STATIC_WORKSPACE = "static-ws"


def shared_metergraph_env(openai_url: str, anthropic_url: str) -> dict[str, str]:
    """The environment of a shared server whose replays go to a local provider at these URLs."""
    return {
        "AUTH_ENABLED": "true",
        "METRONIX_SECRET_KEY": SECRET,
        "TRIPTYCH_PUBLIC_URL": PUBLIC_URL,
        "MG_TOKENS": STATIC_INGEST,
        "MG_WORKSPACE": STATIC_WORKSPACE,
        # Unlimited agent reads: every key is a module's own, and no sharing module tests the limit
        # (test_metergraph_mcp, which does, keeps its own server).
        "MG_AGENT_RATE_PER_MINUTE": "0",
        # Incidents are swept when they are read; a long tick keeps background sweeps out of the way.
        "MG_INCIDENT_TICK_SECONDS": "3600",
        "MG_INCIDENT_COST_MIN_USD": "0.5",
        "MG_REPLAY_OPENAI_BASE_URL": openai_url,
        "MG_REPLAY_OPENAI_API_KEY": "sk-local",
        "MG_REPLAY_ANTHROPIC_BASE_URL": anthropic_url,
        "MG_REPLAY_ANTHROPIC_API_KEY": "sk-ant-local",
    }
