"""The ``TenancyStore`` contract on every engine: orgs, users, apps, keys, memories, grants, selections."""

from __future__ import annotations

import pytest
from hadron.store_contract.conftest import Seed, add_memory

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def test_orgs_and_users_read_back_by_id_and_by_their_unique_names(seed: Seed) -> None:
    t = seed.stores.tenancy
    assert t.org(seed.org.id) == seed.org == t.org_by_root("acme.com")
    assert t.user(seed.user.id) == seed.user == t.user_by_handle("alice")
    assert t.org("nope") is None and t.org_by_root("nope") is None
    assert t.user("nope") is None and t.user_by_handle("nope") is None


def test_membership_roles_are_upserted_and_listed_by_root_and_handle(seed: Seed) -> None:
    t = seed.stores.tenancy
    globex = t.add_org("globex.com", "Globex")
    bob = t.add_user("bob", "Bob")
    t.set_org_member(globex.id, seed.user.id, "READER")
    t.set_org_member(globex.id, seed.user.id, "ADMIN")  # a second role replaces the first
    t.set_org_member(globex.id, bob.id, "CONTRIBUTOR")
    assert t.org_memberships(seed.user.id) == [(seed.org, "OWNER"), (globex, "ADMIN")]
    assert t.org_role(globex.id, seed.user.id) == "ADMIN"
    assert t.org_role(seed.org.id, bob.id) is None
    assert [u.handle for u in t.users_in_orgs([seed.org.id, globex.id])] == ["alice", "bob"]
    assert t.users_in_orgs([]) == []


def test_apps_read_by_urn_in_root_then_slug_order_with_members_and_keys(seed: Seed) -> None:
    t = seed.stores.tenancy
    mine = t.add_app("aaa", "Mine", None, seed.user)
    assert mine.root == "alice" and t.app(mine.id) == mine
    assert t.app_by_urn("acme.com", "bot") == seed.app and t.app_by_urn("acme.com", "aaa") is None
    assert [(a.root, a.slug) for a in t.apps()] == [("acme.com", "bot"), ("alice", "aaa")]
    t.set_app_member(seed.app.id, seed.user.id, "READER")
    t.set_app_member(seed.app.id, seed.user.id, "CONTRIBUTOR")
    assert t.app_role(seed.app.id, seed.user.id) == "CONTRIBUTOR"
    assert t.app_member_ids(seed.app.id) == [seed.user.id] and t.app_member_ids(mine.id) == []
    t.add_app_key(seed.app.id, "hk_secret_1234", "ci")
    assert t.app_for_key("hk_secret_1234") == seed.app
    assert t.app_for_key("hk_secret_9999") is None


def test_memories_keep_their_schema_policy_and_are_listed_by_root_and_slug(seed: Seed) -> None:
    t = seed.stores.tenancy
    notes = add_memory(seed.stores, seed.org, "notes", policy="content")
    assert t.memory(notes.id) == notes and t.memory_by_key("acme.com", "notes") == notes
    assert [m.slug for m in t.memories()] == ["notes", "specs"]
    schema = {"collections": {"x": {"type": "object", "properties": {"é": {"type": "string"}}}}}
    t.set_memory_schema(notes.id, schema)
    t.set_embedding_policy(notes.id, "none")
    again = t.memory(notes.id)
    assert again is not None and again.schema == schema and again.embedding_policy == "none"
    t.set_memory_schema(notes.id, None)
    cleared = t.memory(notes.id)
    assert cleared is not None and cleared.schema is None
    assert t.memory("nope") is None and t.memory_by_key("acme.com", "nope") is None


def test_grants_are_upserted_per_principal_and_read_for_several_memories(seed: Seed) -> None:
    t = seed.stores.tenancy
    notes = add_memory(seed.stores, seed.org, "notes")
    t.grant(seed.memory.id, "user", seed.user.id, "read-only")
    t.grant(seed.memory.id, "user", seed.user.id, "read-write")
    t.grant(seed.memory.id, "app", seed.app.id, "read-only")
    assert t.grants(seed.memory.id) == {
        ("user", seed.user.id): "read-write",
        ("app", seed.app.id): "read-only",
    }
    assert t.grants(notes.id) == {}
    assert t.grants_of([seed.memory.id, notes.id]) == {seed.memory.id: t.grants(seed.memory.id)}


def test_attached_memories_keep_their_order_and_attach_twice_changes_nothing(seed: Seed) -> None:
    t = seed.stores.tenancy
    notes = add_memory(seed.stores, seed.org, "notes")
    t.attach_memory(seed.app.id, notes.id)
    t.attach_memory(seed.app.id, seed.memory.id)
    t.attach_memory(seed.app.id, notes.id)
    assert t.attached_memories(seed.app.id) == [notes.id, seed.memory.id]


def test_a_selection_is_saved_per_user_and_client_and_replaced_whole(seed: Seed) -> None:
    t = seed.stores.tenancy
    assert t.load_selection(seed.user.id, "c1") is None
    t.save_selection(seed.user.id, "c1", {"app_id": seed.app.id, "memory_id": seed.memory.id})
    t.save_selection(seed.user.id, "c2", {"org_id": seed.org.id})
    assert t.load_selection(seed.user.id, "c1") == {
        "app_id": seed.app.id, "memory_id": seed.memory.id, "org_id": None, "scope_id": None, "session_id": None,
    }  # fmt: skip
    t.save_selection(seed.user.id, "c1", {"session_id": "s"})
    assert t.load_selection(seed.user.id, "c1") == {
        "app_id": None, "memory_id": None, "org_id": None, "scope_id": None, "session_id": "s",
    }  # fmt: skip


def test_a_failed_write_inside_atomic_leaves_nothing(seed: Seed) -> None:
    t = seed.stores.tenancy
    with pytest.raises(RuntimeError), t.atomic():
        t.add_org("initech.com", "Initech")
        raise RuntimeError("boom")
    assert t.org_by_root("initech.com") is None
