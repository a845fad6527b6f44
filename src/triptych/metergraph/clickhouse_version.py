"""The ClickHouse server's version, asked before anything else.

Debian's ``clickhouse-server`` is 18.16: against it, the client's own handshake and the schema failed with
"not reachable or refused the schema" and the server's error text, which never said the server was too
old. ``SELECT version()`` over the plain HTTP interface works on every version, so it is asked first
and a server older than ``MINIMUM`` is refused naming the version found and the version needed.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from triptych.core.errors import StorageUnavailable

# The schema's Map columns, TTLs, JSON functions, query parameters and asynchronous inserts (README,
# Metergraph on ClickHouse); the tests run against 26.9.
MINIMUM = (22, 1)
TESTED = "26.9"


def server_version(options: dict[str, Any]) -> str | None:
    """The server's ``version()``, or None when it cannot be asked (the caller's own connection then
    says what is wrong)."""
    host = f"[{options['host']}]" if ":" in options["host"] else options["host"]
    url = f"{'https' if options['secure'] else 'http'}://{host}:{options['port']}/"
    headers = {"X-ClickHouse-User": options["username"], "X-ClickHouse-Key": options["password"]}
    try:
        response = httpx.get(url, params={"query": "SELECT version()"}, headers=headers, timeout=10.0)
    except httpx.HTTPError:
        return None
    text = response.text.strip()
    return text if response.status_code == 200 and re.fullmatch(r"\d+(\.\d+)+", text) else None


def refuse_if_too_old(options: dict[str, Any]) -> str | None:
    """The server's version; ``StorageUnavailable`` if it is older than ``MINIMUM``."""
    version = server_version(options)
    if version is None:
        return None
    found = tuple(int(part) for part in version.split(".")[:2])
    if found < MINIMUM:
        needed = ".".join(map(str, MINIMUM))
        raise StorageUnavailable(
            f"ClickHouse at {options['host']}:{options['port']} is version {version}; Metergraph needs"
            f" ClickHouse {needed} or newer (tested with {TESTED})",
            hint="Upgrade the ClickHouse server (Debian's clickhouse-server is 18.16: use the ClickHouse"
            " project's packages), or unset TRIPTYCH_METERGRAPH_CLICKHOUSE_URL to keep Metergraph's calls"
            " in the data directory",
            details={"reason": "clickhouse_too_old", "version": version, "needed": needed},
        )
    return version
