"""Regression: Metergraph's endpoint matched allowed hosts with ``fnmatch``, which reads the default
``[::1]:*`` as a character class, so a client on the IPv6 loopback got 421 there while the other two
MCP endpoints let it in. Every endpoint now runs the one guard of ``core.mcp``."""

from __future__ import annotations

import httpx
import pytest
from harness import ServerProcess

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("path", ["/mcp", "/hadron/mcp", "/v1/agent/mcp"])
def test_every_mcp_endpoint_admits_the_ipv6_loopback_and_refuses_a_foreign_host(
    open_server: ServerProcess, path: str
) -> None:
    url = open_server.url + path
    loopback = httpx.post(url, json=PING, headers={**HEADERS, "Host": f"[::1]:{open_server.port}"})
    foreign = httpx.post(url, json=PING, headers={**HEADERS, "Host": "evil.example:8000"})
    origin = httpx.post(url, json=PING, headers={**HEADERS, "Origin": "https://evil.example"})
    assert loopback.status_code not in (403, 421), loopback.text
    assert foreign.status_code == 421
    assert origin.status_code == 403
