"""Selections on the service layer: the strict App requirement, the organization ladder and persistence."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hadron.world import build_world

from triptych.hadron.errors import Forbidden, NoActiveApp, NotFound, OrgRequired
from triptych.hadron.identity import HadronCaller
from triptych.hadron.surface import Hadron

# Engine-neutral rules over the tenancy store: tests/hadron/store_contract/test_tenancy_store.py proves
# that store on every engine, so these run on the embedded one.
pytestmark = pytest.mark.engines("sqlite")


@pytest.fixture(scope="module")
def hadron(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[Hadron]:
    data = tmp_path_factory.mktemp("selection")
    build_world(data, module_database_url)
    opened = Hadron.open(data / "hadron.db", database_url=module_database_url)
    yield opened
    opened.close()


def user(hadron: Hadron, handle: str) -> HadronCaller:
    return HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))


def test_strict_tools_need_an_active_app_but_an_app_key_carries_its_own(hadron: Hadron) -> None:
    bob = user(hadron, "bob")
    state = hadron.selections.session(bob, "s-app", None)
    with pytest.raises(NoActiveApp) as refused:
        hadron.selections.active_app(bob, state)
    assert refused.value.code == "no_active_app"
    hadron.selections.set_active_app(bob, state, "hrn:app:acme.com:bot")
    assert hadron.selections.active_app(bob, state).slug == "bot"
    bot = hadron.admin().app("hrn:app:acme.com:bot")
    key = HadronCaller("app", bot.urn, app=bot)
    assert hadron.selections.active_app(key, hadron.selections.session(key, "s-key", None)).id == bot.id


def test_the_org_ladder_rung_by_rung(hadron: Hadron) -> None:
    carol = user(hadron, "carol")
    state = hadron.selections.session(carol, "s-org", None)
    with pytest.raises(OrgRequired) as refused:
        hadron.selections.require_org(carol, state)
    assert refused.value.details["memberships"] == ["hrn:org:acme.com", "hrn:org:globex.com"]
    assert hadron.selections.require_org(carol, state, "hrn:org:globex.com").rung == "call"
    with pytest.raises(NotFound):
        hadron.selections.require_org(carol, state, "hrn:org:initech.com")
    hadron.selections.set_active_org(carol, state, "globex.com", False)
    assert (hadron.selections.resolve_org(carol, state).rung, state.org_id) == (
        "active-org",
        hadron.admin().org("globex.com").id,
    )
    hadron.selections.set_active_app(
        carol, state, "hrn:app:acme.com:bot"
    )  # the active App outranks the selection
    resolved = hadron.selections.resolve_org(carol, state)
    assert (resolved.rung, resolved.org.root if resolved.org else None) == ("active-app", "acme.com")
    hadron.selections.set_active_app(carol, state, "hrn:app:carol:scratch")  # a personal App has no org
    assert hadron.selections.resolve_org(carol, state).rung == "active-org"
    for handle, rung in (("dave", "single-membership"), ("erin", "personal")):
        caller = user(hadron, handle)
        assert (
            hadron.selections.resolve_org(caller, hadron.selections.session(caller, f"s-{handle}", None)).rung
            == rung
        )
    with pytest.raises(Forbidden):
        bot = hadron.admin().app("hrn:app:acme.com:bot")
        hadron.selections.set_active_org(HadronCaller("app", bot.urn, app=bot), state, "acme.com", False)


def test_selections_persist_per_user_and_client_id(hadron: Hadron) -> None:
    carol = user(hadron, "carol")
    first = hadron.selections.session(carol, "sess-1", "desk")
    hadron.selections.set_active_memory(carol, first, "hrn:mem:acme.com:team")
    second = hadron.selections.session(carol, "sess-2", "desk")
    assert second.replaced and second.memory_id == first.memory_id
    assert second.restored == ["active memory hrn:mem:acme.com:team"]
    other_user = hadron.selections.session(user(hadron, "dave"), "sess-3", "desk")
    assert other_user.memory_id is None and not other_user.replaced
