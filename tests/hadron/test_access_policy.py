"""The access policy, decided in one place: every caller kind against every memory kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.world import build_world

from triptych.hadron.identity import ANONYMOUS, HadronCaller
from triptych.hadron.surface import Hadron

MEMORIES = (
    "acme.com:specs acme.com:team acme.com:botmem acme.com:catalog acme.com:vault globex.com:plans "
    "erin:notes alice:journal"
).split()
RW, RO, NO = "read-write", "read-only", None

# Engine-neutral rules over the tenancy store: tests/hadron/store_contract/test_tenancy_store.py proves
# that store on every engine, so these run on the embedded one.
pytestmark = pytest.mark.engines("sqlite")

# What each caller gets on each memory, in MEMORIES order.
EXPECTED = {
    "alice": (RW, RW, RW, RW, RW, NO, NO, RW),  # acme OWNER; her own journal
    "bob": (RO, RO, RW, RO, RO, NO, NO, RO),  # acme READER; team grant ro; bot app CONTRIBUTOR; share
    "carol": (RW, RW, NO, RW, RW, RW, NO, NO),  # acme + globex CONTRIBUTOR; team grant rw
    "dave": (NO, NO, NO, NO, NO, RW, NO, NO),  # globex ADMIN
    "erin": (NO, NO, NO, NO, NO, NO, RW, NO),  # no org; her private notes
    "mallory": (NO,) * 8,  # a valid JWT subject with no user row
}


@pytest.fixture(scope="module")
def hadron(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[Hadron]:
    data = tmp_path_factory.mktemp("access")
    build_world(data, module_database_url)
    h = Hadron.open(data / "hadron.db", database_url=module_database_url)
    yield h
    h.close()


def user(hadron: Hadron, handle: str) -> HadronCaller:
    return HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))


@pytest.mark.parametrize("handle", sorted(EXPECTED))
def test_each_user_gets_exactly_the_expected_access(hadron: Hadron, handle: str) -> None:
    caller = user(hadron, handle)
    got = tuple(hadron.access.memory_level(caller, hadron.admin().memory(ref)) for ref in MEMORIES)
    assert got == EXPECTED[handle]


def test_app_keys_reach_their_app_memory_and_their_orgs_knowledge_read_only(hadron: Hadron) -> None:
    bot = hadron.admin().app("hrn:app:acme.com:bot")
    helper = hadron.admin().app("hrn:app:globex.com:helper")
    levels = {
        name: tuple(
            hadron.access.memory_level(HadronCaller("app", app.urn, app=app), hadron.admin().memory(m))
            for m in MEMORIES
        )
        for name, app in (("bot", bot), ("helper", helper))
    }
    assert levels["bot"] == (RO, NO, RW, RO, RO, NO, NO, NO)
    assert levels["helper"] == (NO, NO, NO, NO, NO, RO, NO, NO)


def test_a_private_memory_ignores_grants(hadron: Hadron) -> None:
    notes = hadron.admin().memory("hrn:mem:erin:notes")
    alice = user(hadron, "alice")
    hadron.tenancy.grant(notes.id, "user", alice.user.id if alice.user else "", "read-write")
    assert hadron.access.memory_level(alice, notes) is None


def test_anonymous_reads_nothing(hadron: Hadron) -> None:
    assert hadron.access.readable(ANONYMOUS) == []
    assert hadron.access.visible_apps(ANONYMOUS) == []


def test_grants_add_to_ownership_never_take_away(hadron: Hadron, tmp_path: Path) -> None:
    specs = hadron.admin().memory("hrn:mem:acme.com:specs")
    alice = user(hadron, "alice")
    hadron.tenancy.grant(specs.id, "user", alice.user.id if alice.user else "", "read-only")
    assert hadron.access.memory_level(alice, specs) == RW
