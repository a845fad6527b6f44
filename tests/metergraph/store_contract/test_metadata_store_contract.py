"""The ``MetadataStore`` contract, on every engine: workspaces, keys, sessions, routes, ingest batch
records, the call-id sequence and import identities."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from mg_support import NOW

from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.metadata_store import BATCH_HEALTH, MetadataStore

ISO = NOW.isoformat()
NOW_MS = int(NOW.timestamp() * 1000)
BATCH = {"received_ms": NOW_MS, "processed_ms": NOW_MS + 5, "ignored": 1, "dropped": 2, "transport_errors": 0,
         "unknown_attributes": 3, "content_dropped": 0}  # fmt: skip


def test_a_workspace_exists_from_its_first_write_and_keeps_its_content_choice(
    metadata_store: MetadataStore,
) -> None:
    assert metadata_store.workspace("w1") is None
    metadata_store.set_retain_content("w1", True, ISO)
    row = metadata_store.workspace("w1")
    assert row is not None and row["retain_content"] and row["created_at"] == ISO
    metadata_store.set_retain_content("w1", False, "later")
    row = metadata_store.workspace("w1")
    assert row is not None and not row["retain_content"] and row["created_at"] == ISO
    assert metadata_store.workspace("w2") is None


def test_keys_are_found_by_hash_until_revoked(metadata_store: MetadataStore) -> None:
    metadata_store.insert_key("k1", "w1", "app", None, None, "hash-1", ISO)
    metadata_store.insert_key("k2", "w1", "agent", "debug", ["prod", "dev"], "hash-2", ISO)
    metadata_store.insert_key("k3", "w2", "agent", "metadata", None, "hash-3", ISO)
    agent = metadata_store.key_by_hash("hash-2")
    assert agent is not None and (agent["id"], agent["workspace"], agent["role"]) == ("k2", "w1", "debug")
    assert json.loads(agent["environments"]) == ["prod", "dev"]
    assert metadata_store.workspace("w1") is not None  # a key creates its workspace
    assert [k["id"] for k in metadata_store.list_keys("w1")] == ["k1", "k2"]
    assert {k["id"] for k in metadata_store.list_keys()} == {"k1", "k2", "k3"}
    assert "token_hash" not in metadata_store.list_keys("w2")[0]
    assert metadata_store.revoke_key("k2", "later") is True
    assert metadata_store.revoke_key("k2", "again") is False
    assert metadata_store.revoke_key("nope", "later") is False
    assert metadata_store.key_by_hash("hash-2") is None
    assert metadata_store.list_keys("w1")[1]["revoked_at"] == "later"


def test_sessions_are_found_by_hash_and_long_expired_ones_go(metadata_store: MetadataStore) -> None:
    metadata_store.insert_session("s-old", "w1", "app", "repo", "1.0", 1_000)
    metadata_store.insert_session("s-new", "w1", "app", "repo", "1.2", 1_000 + 8 * 86_400)
    session = metadata_store.session_by_hash("s-new")
    assert session is not None and (session["workspace"], session["sdk_version"]) == ("w1", "1.2")
    assert metadata_store.session_by_hash("s-old") is None  # over a week past its expiry
    assert metadata_store.session_by_hash("missing") is None


def test_a_route_is_configured_once_and_updated_in_place(metadata_store: MetadataStore) -> None:
    metadata_store.set_route("w1", "support", "answers", {"model": "m"}, ISO, {"pii": "forbidden"})
    metadata_store.set_route("w1", "alpha", None, {}, ISO)
    metadata_store.set_route("w1", "support", "answers customers", {"model": "m2"}, "later")
    assert metadata_store.route_config("w1") == {"support": {"model": "m2"}, "alpha": {}}
    assert metadata_store.configured_routes("w1") == [
        {"route": "alpha", "description": None, "constraints": {}, "updated_at": ISO},
        {"route": "support", "description": "answers customers", "constraints": {}, "updated_at": "later"},
    ]
    assert metadata_store.route_config("w2") == {} and metadata_store.configured_routes("w2") == []


def test_batch_records_add_up_to_the_workspace_health(metadata_store: MetadataStore) -> None:
    empty = metadata_store.batch_health("w1", 0)
    assert set(empty) == set(BATCH_HEALTH) and empty["processed"] is None
    metadata_store.record_batch("w1", "sdk", 10, BATCH, ISO)
    metadata_store.record_batch("w1", "otlp", 4, {**BATCH, "received_ms": NOW_MS + 10}, ISO)
    metadata_store.record_failed_batch("w1", "sdk", NOW_MS + 20, "permanent")
    metadata_store.record_batch("w2", "sdk", 99, BATCH, ISO)
    health = metadata_store.batch_health("w1", 0)
    assert (health["processed"], health["failed"], health["permanent"], health["recoverable"]) == (2, 1, 1, 0)
    assert (health["accepted"], health["ignored"], health["dropped"], health["unknown_attributes"]) == (
        14,
        2,
        2,
        6,
    )
    assert (health["last_received"], health["last_processed"]) == (NOW_MS + 20, NOW_MS + 5)
    assert not metadata_store.batch_health("w1", NOW_MS + 15)["processed"]  # 0 or None: none since
    assert metadata_store.recent_batches("w1", 2) == [("failed", NOW_MS + 20), ("processed", NOW_MS + 10)]
    assert metadata_store.workspace("w2") is not None  # a batch record creates its workspace


def test_call_ids_are_consecutive_and_never_handed_out_twice(metadata_store: MetadataStore) -> None:
    first = metadata_store.reserve_call_ids(3)
    assert metadata_store.reserve_call_ids(2) == first + 3
    got: list[int] = []

    def reserve() -> None:
        for _ in range(20):
            got.append(metadata_store.reserve_call_ids(5))

    threads = [threading.Thread(target=reserve) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ranges = sorted(got)
    assert all(b - a >= 5 for a, b in zip(ranges, ranges[1:], strict=False)) and ranges[0] >= first + 5


def test_two_stores_on_one_database_never_hand_out_the_same_call_id(
    open_metadata: Callable[[], MetadataStore],
) -> None:
    # Two workers (each its own store and connections) drawing ids at once, as ClickHouse ingest does.
    stores = [open_metadata(), open_metadata()]
    got: list[tuple[int, int]] = []

    def reserve(store: MetadataStore) -> None:
        for n in range(1, 16):
            got.append((store.reserve_call_ids(n), n))

    threads = [threading.Thread(target=reserve, args=(s,)) for s in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ranges = sorted(got)
    assert all(first + n <= following for (first, n), (following, _) in zip(ranges, ranges[1:], strict=False))
    assert len(ranges) == 60


def test_an_import_identity_is_claimed_once_released_on_failure_and_confirmed_with_the_record(
    metadata_store: MetadataStore,
) -> None:
    a, b = ImportKey("portkey", "ws", "e1"), ImportKey("portkey", "ws", "e2")
    assert metadata_store.claim_imports("w1", [a, None, a]) == [
        True,
        True,
        False,
    ]  # a repeat in the batch too
    assert metadata_store.claim_imports("w1", [a, b]) == [False, True]  # pending claims hold
    metadata_store.release_imports("w1", [b])
    assert metadata_store.claim_imports("w1", [b]) == [True]  # a failed write's rows come again
    metadata_store.record_batch("w1", "sdk", 2, BATCH, ISO, confirm=[a, b])
    assert metadata_store.claim_imports("w1", [a, b]) == [False, False]
    metadata_store.release_imports("w1", [a])  # only pending claims are released
    assert metadata_store.claim_imports("w1", [a]) == [False]
    assert metadata_store.claim_imports("w2", [a]) == [True]  # each workspace its own
