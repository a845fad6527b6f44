"""Bearer -> caller: user JWTs, app keys, anonymous (auth on) and the local user (auth off)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import SECRET, token

from triptych.core.config import Settings
from triptych.core.errors import AuthRequired
from triptych.hadron.identity import LOCAL_HANDLE, authenticator
from triptych.hadron.surface import Hadron

# Engine-neutral rules over the tenancy store: tests/hadron/store_contract/test_tenancy_store.py proves
# that store on every engine, so these run on the embedded one.
pytestmark = pytest.mark.engines("sqlite")


@pytest.fixture
def hadron(tmp_path: Path, database_url: str | None) -> Iterator[Hadron]:
    h = Hadron.open(tmp_path / "hadron.db", database_url=database_url)
    admin = h.admin()
    admin.create_org("acme.com")
    admin.create_user("alice")
    admin.create_app("bot", None, "acme.com", None)
    yield h
    h.close()


def test_with_auth_on(hadron: Hadron) -> None:
    _, key = hadron.admin().create_app_key("hrn:app:acme.com:bot")
    authenticate = authenticator(Settings(auth_enabled=True, jwt_secret=SECRET), hadron.tenancy)
    assert authenticate(None).kind == "anonymous"
    alice = authenticate(f"Bearer {token(user='alice')}")
    assert (alice.kind, alice.user is not None, alice.actor) == ("user", True, "hrn:user:alice")
    stranger = authenticate(f"Bearer {token(user='mallory')}")
    assert (stranger.kind, stranger.user) == ("user", None)  # a valid token, no access anywhere
    app = authenticate(f"Bearer {key}")
    assert (app.kind, app.actor) == ("app", "hrn:app:acme.com:bot")
    for bad in (f"Bearer {key}x", "Bearer not.a.jwt", f"Bearer {token(ttl=-10)}", "Basic abc"):
        with pytest.raises(AuthRequired):
            authenticate(bad)


def test_with_auth_off_the_caller_is_the_local_user(hadron: Hadron) -> None:
    authenticate = authenticator(Settings(auth_enabled=False), hadron.tenancy)
    local = authenticate(None)
    assert (local.kind, local.handle, local.user) == ("user", LOCAL_HANDLE, None)
    hadron.admin().create_user(LOCAL_HANDLE)
    assert authenticate(None).user is not None
    with pytest.raises(AuthRequired):  # no JWT key configured: a JWT cannot be checked
        authenticate(f"Bearer {token(user='alice')}")
