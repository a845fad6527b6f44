"""Fixtures of the Hadron service and CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cli_database_url(database_url: str | None, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """``database_url``, set as ``TRIPTYCH_DATABASE_URL`` for the test: the admin CLI, in this process or
    another, reads its engine from the environment as `triptych hadron` does."""
    if database_url:
        monkeypatch.setenv("TRIPTYCH_DATABASE_URL", database_url)
    return database_url
