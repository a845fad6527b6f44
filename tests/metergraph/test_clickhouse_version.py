"""An old ClickHouse is refused naming the version found and the version needed, before any schema
statement: Debian's own clickhouse-server (18.16) had got "not reachable or refused the schema" and a
server error about an unknown identifier. The old server is the real one, Debian's package, started here
on 127.0.0.1 (tasks.py installs it; without it the test is skipped, as the browser tests are without
Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from harness import TRIPTYCH, free_port

from triptych.metergraph.clickhouse_client import parse_url
from triptych.metergraph.clickhouse_version import MINIMUM, refuse_if_too_old

DEBIAN_CLICKHOUSE = "/usr/sbin/clickhouse-server"
CONFIG = """<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http}</http_port><tcp_port>{tcp}</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>{root}/data/</path><tmp_path>{root}/tmp/</tmp_path><users_config>users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
</yandex>"""
USERS = """<yandex><profiles><default></default></profiles><quotas><default></default></quotas>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile>
  <quota>default</quota></default></users></yandex>"""


@pytest.fixture
def old_clickhouse(tmp_path: Path) -> Iterator[str]:
    """Debian's clickhouse-server (18.16) on 127.0.0.1, its URL; stopped and removed afterwards."""
    if not Path(DEBIAN_CLICKHOUSE).exists():
        pytest.skip("Debian's clickhouse-server is not installed (python3 tasks.py test installs it)")
    http = free_port()
    (tmp_path / "config.xml").write_text(CONFIG.format(http=http, tcp=free_port(), root=tmp_path))
    (tmp_path / "users.xml").write_text(USERS)
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [DEBIAN_CLICKHOUSE, f"--config-file={tmp_path / 'config.xml'}"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{http}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (
                tmp_path / "server.log"
            ).read_text()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{http}/metergraph"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_serve_against_an_old_clickhouse_names_the_version_found_and_the_version_needed(
    old_clickhouse: str, tmp_path: Path
) -> None:
    env = {"TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": old_clickhouse, "TRIPTYCH_DATA_DIR": str(tmp_path / "d")}
    started = subprocess.run(
        [TRIPTYCH, "serve", "--port", "0"], env={**os.environ, **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert started.returncode == 1
    assert "Traceback" not in started.stderr, started.stderr
    needed = ".".join(map(str, MINIMUM))
    assert f"is version 18.16.1; Metergraph needs ClickHouse {needed} or newer" in started.stderr
    # Refused before any statement: the old server holds no Metergraph database.
    tables = httpx.get(old_clickhouse.rsplit("/", 1)[0], params={"query": "SHOW DATABASES"}).text.split()
    assert "metergraph" not in tables


def test_a_current_clickhouse_passes_the_version_check(clickhouse: ClickHouseEndpoint) -> None:
    options = parse_url(clickhouse.database_url())
    version = refuse_if_too_old(options)
    assert version is not None and tuple(int(p) for p in version.split(".")[:2]) >= MINIMUM


def test_an_unreachable_clickhouse_is_left_to_the_connection_to_report() -> None:
    assert refuse_if_too_old(parse_url(f"http://127.0.0.1:{free_port()}/metergraph")) is None
