"""A crashed pytest-xdist worker fails the run instead of hanging it.

pytest-xdist (3.8.0, the latest release) replaces a crashed worker, up to four per worker. Under
``--dist loadfile`` (and loadscope, loadgroup) the replacement is sent the crashed worker's whole
workload again, the files it had finished included; those come back as empty work units that no worker
ever reports done, so the controller waits forever (pytest-xdist issues 784, 1323, 1327 and 1378; the
fixes were merged after 3.8.0). Without a restart a crash ends the run at once: the test the worker died
in is reported failed, and the run exits non-zero (decision 0390)."""

from __future__ import annotations

import pytest


def no_worker_restart(config: pytest.Config) -> None:
    """Unless the command line chose ``--max-worker-restart``, a crashed worker is not replaced (from
    ``pytest_configure``, before pytest-xdist reads the option)."""
    if getattr(config.option, "maxworkerrestart", "") is None:
        config.option.maxworkerrestart = "0"
