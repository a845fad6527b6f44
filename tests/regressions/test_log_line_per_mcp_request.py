"""At the default log level every `/mcp` request logged the MCP SDK's ``Terminating session: None`` (640 lines
in 90 s of use) and every relayed request an ``httpx`` line. Fixed in ``cli._log_to_stderr``: those libraries'
request lines show only at ``TRIPTYCH_LOG_LEVEL=debug``."""

from __future__ import annotations

from harness import ServerProcess, mcp_session


async def test_default_log_level_writes_no_line_per_mcp_request(open_server: ServerProcess) -> None:
    async with mcp_session(open_server.url + "/mcp") as session:
        for _ in range(3):
            await session.call("metronix_status")
    async with mcp_session(open_server.url + "/hadron/mcp") as session:
        assert "hadron_server_info" in await session.tool_names()
    log = open_server.log()
    assert "Terminating session" not in log
    assert "httpx" not in log
    assert "Uvicorn running" in log, log[-2000:]  # the log was read, not empty
