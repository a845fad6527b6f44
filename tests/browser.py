"""Headless Chromium for page tests: Debian's ``chromium`` driven by Playwright (no browser download).

``python3 tasks.py test`` installs the package when it is missing (as root on Debian); elsewhere the page
tests skip and say why. One browser per test module keeps CI time small.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
# What Chromium needs on these machines: no sandbox as root, and no background traffic to a closed network.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright ``Browser`` on Debian's chromium, or a skip that says what is missing."""
    if shutil.which(CHROMIUM) is None:
        pytest.skip(
            f"{CHROMIUM} not found: install Debian's chromium package (python3 tasks.py test does, as root)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: python3 tasks.py test installs the dev extra")
    profile = tempfile.mkdtemp(prefix="triptych-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
