"""The ``MemoryStore`` and ``ReviewStore`` protocols' contract, written once and run against every engine
that implements them (issue 29, item 1): the embedded SQLite store and the PostgreSQL one of server mode.

The service and contract suites drive the stores through the rules above them; this suite states what
any engine must do itself: dedup, tenancy, visibility, search, the change logs of the in-process caches
(a second store on the same database stands for another worker), and the review queue beside the
records. Vectors are small and hand-made so each ranking is known in advance.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from triptych.core import partitions
from triptych.core.db import Database
from triptych.core.pg import PgDatabase
from triptych.metronix.attributes import Visibility
from triptych.metronix.memory_model import DuplicateContent, Filing, MemoryRecord, Resolution
from triptych.metronix.memory_store import MemoryStore, PostgresMemoryStore, SqliteMemoryStore
from triptych.metronix.store import utcnow

pytestmark = pytest.mark.engines("sqlite", "postgresql")

DIM = 8
WS = "contract-ws"


def _open(db: Database | PgDatabase) -> MemoryStore:
    """The store of ``db``'s engine (the one place this suite names the implementations)."""
    if isinstance(db, PgDatabase):
        return PostgresMemoryStore(db, DIM)
    return SqliteMemoryStore(db, DIM)


@pytest.fixture
def databases(
    tmp_path: Path, storage_engine: str, request: pytest.FixtureRequest
) -> Iterator[list[Database | PgDatabase]]:
    """Two connections to one fresh database (two workers' worth), of the engine under test."""
    dbs: list[Database | PgDatabase]
    if storage_engine == "postgresql":
        url = request.getfixturevalue("postgres").create_database()
        dbs = [PgDatabase(url, max_size=4) for _ in range(2)]
    else:
        dbs = [Database(tmp_path / "metronix.db", []) for _ in range(2)]
    yield dbs
    for db in dbs:
        db.close()


@pytest.fixture
def st(databases: list[Database | PgDatabase]) -> MemoryStore:
    return _open(databases[0])


@pytest.fixture
def other(databases: list[Database | PgDatabase], st: MemoryStore) -> MemoryStore:
    """Another worker's store on the same database (opened after ``st`` migrated it)."""
    return _open(databases[1])


def vec(*weights: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(weights)] = weights
    return v / np.linalg.norm(v)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def record(content: str, agent: str = "hermes", **fields: Any) -> MemoryRecord:
    now = fields.pop("created_at", utcnow())
    return MemoryRecord(
        id=str(uuid.uuid4()),
        workspace_id=fields.pop("workspace_id", WS),
        agent_id=agent,
        scope=fields.pop("scope", "per_agent"),
        session_id=fields.pop("session_id", None),
        kind=fields.pop("kind", "fact"),
        content=content,
        content_hash=fields.pop("content_hash", "h-" + content),
        tags=fields.pop("tags", []),
        importance_score=fields.pop("importance_score", 0.5),
        source_type=fields.pop("source_type", ""),
        metadata=fields.pop("metadata", {}),
        status=fields.pop("status", "active"),
        created_at=now,
        updated_at=now,
        **fields,
    )


def put(st: MemoryStore, rec: MemoryRecord, v: np.ndarray | None = None, **kw: Any) -> MemoryRecord:
    kw.setdefault("enqueue", False)
    stored, deduped = st.insert(rec, vec(1.0) if v is None else v, kw.pop("entities", set()), **kw)
    assert not deduped
    return stored


def view(agent: str | None = "hermes", **kw: Any) -> Visibility:
    return Visibility(
        workspace_id=kw.pop("workspace_id", WS),
        agent_id=agent,
        statuses=kw.pop("statuses", ("active",)),
        **kw,
    )


# -- records --------------------------------------------------------------------------------------


def test_an_inserted_record_reads_back_whole_by_id_and_by_seq(st: MemoryStore) -> None:
    rec = record("the deploy runs on fridays", tags=["ops"], metadata={"k": [1, 2]}, importance_score=0.9)
    stored = put(st, rec, entities={"deploy"})
    assert stored.seq > 0
    assert st.get(WS, rec.id) == stored
    assert st.by_seqs([stored.seq]) == {stored.seq: stored}
    assert st.by_seqs([stored.seq], WS) == {stored.seq: stored}  # from the attribute cache
    assert st.entities([stored.seq]) == {stored.seq: {"deploy"}}
    assert st.count_records() == 1


def test_tenancy_another_workspace_sees_nothing(st: MemoryStore) -> None:
    stored = put(st, record("alpha fact"))
    assert st.get("elsewhere", stored.id) is None
    assert st.by_seqs([stored.seq], "elsewhere") == {}
    assert st.dense_search(view(workspace_id="elsewhere"), vec(1.0), 5) == []
    assert st.keyword_search(view(workspace_id="elsewhere"), "alpha", 5) == []
    assert st.list_records(view(workspace_id="elsewhere"), 10, 0) == ([], 0)
    assert st.delete("elsewhere", stored.id) is False
    assert st.get(WS, stored.id) == stored


def test_the_same_dedup_key_returns_the_stored_record_and_writes_nothing(st: MemoryStore) -> None:
    first = put(st, record("same words"))
    twin, deduped = st.insert(record("same words"), vec(0.0, 1.0), set())
    assert deduped and twin == first
    assert st.count_records() == 1
    found = st.find_duplicate(WS, "hermes", "per_agent", None, "h-same words")
    assert found == first
    assert st.find_duplicate(WS, "athena", "per_agent", None, "h-same words") is None
    # another agent, scope or session is another key
    put(st, record("same words", agent="athena"))
    put(st, record("same words", scope="global"))
    assert st.count_records() == 3


def test_a_session_twin_slides_its_ttl(st: MemoryStore) -> None:
    soon, later = iso(datetime.now(UTC) + timedelta(minutes=5)), iso(datetime.now(UTC) + timedelta(hours=3))
    first = put(st, record("note", scope="session", session_id="s1", ttl_expires_at=soon))
    twin, deduped = st.insert(
        record("note", scope="session", session_id="s1", ttl_expires_at=later), vec(1.0), set()
    )
    assert deduped and twin.id == first.id and twin.ttl_expires_at == later
    assert st.get(WS, first.id).ttl_expires_at == later  # type: ignore[union-attr]
    assert st.by_seqs([first.seq], WS)[first.seq].ttl_expires_at == later


def test_a_wrong_embedding_shape_is_refused_and_writes_nothing(st: MemoryStore) -> None:
    with pytest.raises(ValueError, match="shape"):
        st.insert(record("x"), np.zeros(DIM + 1, dtype=np.float32), set())
    assert st.count_records() == 0


def test_update_changes_fields_search_and_caches_and_refuses_a_twin(st: MemoryStore) -> None:
    a = put(st, record("apples are red", tags=["fruit"]), vec(1.0))
    b = put(st, record("bananas are yellow"), vec(0.0, 1.0))
    updated = st.update(
        a,
        {
            "content": "cherries are dark",
            "content_hash": "h-cherries",
            "tags": ["berry"],
            "importance_score": 0.2,
        },
        vec(0.0, 0.0, 1.0),
        {"cherries"},
        enqueue=True,
    )
    assert st.get(WS, a.id) == updated
    assert updated.tags == ["berry"] and updated.importance_score == 0.2
    assert [s for s, _ in st.keyword_search(view(), "cherries", 5)] == [a.seq]
    assert st.keyword_search(view(), "apples", 5) == []
    assert st.dense_search(view(), vec(0.0, 0.0, 1.0), 1)[0][0] == a.seq
    assert "tag:berry" in st.entities([a.seq])[a.seq] and "cherries" in st.entities([a.seq])[a.seq]
    assert (WS, a.id) in st.reviews.pending_checks()
    with pytest.raises(DuplicateContent):
        st.update(
            b, {"content": "cherries are dark", "content_hash": "h-cherries"}, vec(0.0, 1.0), None, False
        )
    assert st.get(WS, b.id) == b  # nothing half-written


def test_delete_removes_the_record_its_queued_check_and_its_reviews(st: MemoryStore) -> None:
    a = put(st, record("to go"), vec(1.0), enqueue=True)
    b = put(st, record("to stay"), vec(0.9, 0.1))
    assert st.reviews.file_review(b, Filing("possible_duplicate", a.id, 0.9, None))
    assert st.delete(WS, a.id) is True
    assert st.get(WS, a.id) is None and st.delete(WS, a.id) is False
    assert st.reviews.pending_checks() == []
    assert st.reviews.list_reviews(WS, None, None, 10, 0) == ([], 0)
    assert [s for s, _ in st.dense_search(view(), vec(1.0), 5)] == [b.seq]
    assert st.keyword_search(view(), "go", 5) == []


def test_purge_and_touch_act_on_session_records_only(st: MemoryStore) -> None:
    past, future = iso(datetime.now(UTC) - timedelta(minutes=1)), iso(datetime.now(UTC) + timedelta(hours=1))
    live = put(st, record("live", scope="session", session_id="s", ttl_expires_at=future))
    kept = put(st, record("persistent"))
    # Last: a session write purges the expired ones before it.
    gone = put(st, record("expired", scope="session", session_id="s", ttl_expires_at=past))
    assert st.purge_expired(utcnow()) == 1
    assert st.get(WS, gone.id) is None
    later = iso(datetime.now(UTC) + timedelta(hours=5))
    st.touch(WS, [live.seq, kept.seq], later)
    assert st.get(WS, live.id).ttl_expires_at == later  # type: ignore[union-attr]
    assert st.get(WS, kept.id).ttl_expires_at is None  # type: ignore[union-attr]
    st.touch("elsewhere", [live.seq], future)  # another workspace's call changes nothing here
    assert st.get(WS, live.id).ttl_expires_at == later  # type: ignore[union-attr]


# -- visibility, listing, facets -----------------------------------------------------------------


def _mixed(st: MemoryStore) -> dict[str, MemoryRecord]:
    future = iso(datetime.now(UTC) + timedelta(hours=1))
    past = iso(datetime.now(UTC) - timedelta(hours=1))
    return {
        "mine": put(st, record("mine", tags=["a"], kind="preference", source_type="chat")),
        "global": put(st, record("global", agent="athena", scope="global", tags=["a", "b"])),
        "theirs": put(st, record("theirs", agent="athena")),
        "session": put(st, record("sess", scope="session", session_id="s1", ttl_expires_at=future)),
        "expired": put(st, record("old", scope="session", session_id="s1", ttl_expires_at=past)),
        "archived": put(st, record("arch", status="archived", source_type="import")),
    }


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, {"mine", "global", "session"}),
        ({"agent": None}, {"mine", "global", "theirs", "session"}),
        ({"statuses": None}, {"mine", "global", "session", "archived"}),
        ({"statuses": None, "exclude_statuses": ("archived",)}, {"mine", "global", "session"}),
        ({"scope": "global"}, {"global"}),
        ({"tags": ("a",)}, {"mine", "global"}),
        ({"tags": ("a", "b")}, {"global"}),
        ({"kind": "preference"}, {"mine"}),
        ({"source_types": ("chat", "import"), "statuses": None}, {"mine", "archived"}),
        ({"session_id": "s2"}, {"mine", "global"}),
    ],
)
def test_every_read_applies_the_same_visibility(
    st: MemoryStore, filters: dict[str, Any], expected: set[str]
) -> None:
    named = _mixed(st)
    by_seq = {r.seq: name for name, r in named.items()}
    filters = dict(filters)
    v = view(filters.pop("agent", "hermes"), **filters)
    listed, total = st.list_records(v, 100, 0)
    assert {by_seq[r.seq] for r in listed} == expected and total == len(expected)
    assert {by_seq[s] for s in st.visible_subset(v, list(by_seq))} == expected
    assert {by_seq[s] for s, _ in st.dense_search(v, vec(1.0), 10)} == expected


def test_list_pages_newest_first_with_the_total(st: MemoryStore) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [put(st, record(f"r{i}", created_at=iso(start + timedelta(days=i)))).id for i in range(5)]
    page, total = st.list_records(view(), 2, 1)
    assert total == 5 and [r.id for r in page] == [ids[3], ids[2]]


def test_facets_list_the_kinds_and_source_types_of_live_records(st: MemoryStore) -> None:
    _mixed(st)
    assert st.facets(WS, utcnow()) == (["fact", "preference"], ["chat", "import"])
    assert st.facets("elsewhere", utcnow()) == ([], [])


# -- search ---------------------------------------------------------------------------------------


def test_dense_search_ranks_nearest_first_and_keyword_search_by_bm25(st: MemoryStore) -> None:
    a = put(st, record("the cat sat on the mat"), vec(1.0))
    b = put(st, record("a dog in the fog"), vec(0.0, 1.0))
    c = put(st, record("cat and dog and cat"), vec(0.7, 0.7))
    assert [s for s, _ in st.dense_search(view(), vec(1.0, 0.1), 3)] == [a.seq, c.seq, b.seq]
    hits = st.keyword_search(view(), "cat", 5)
    assert [s for s, _ in hits] == [c.seq, a.seq] and hits[0][1] >= hits[1][1] > 0
    assert np.allclose(st.vectors(WS, [b.seq])[b.seq], vec(0.0, 1.0))


def test_a_selective_filter_still_finds_every_visible_record(st: MemoryStore) -> None:
    wanted = put(st, record("needle word", tags=["rare"]), vec(0.0, 1.0))
    for i in range(30):  # nearer records the filter hides
        put(st, record(f"hay word {i}"), vec(1.0, 0.01 * i))
    v = view(tags=("rare",))
    assert [s for s, _ in st.dense_search(v, vec(1.0), 3)] == [wanted.seq]
    assert [s for s, _ in st.keyword_search(v, "word", 3)] == [wanted.seq]


def test_records_written_in_turn_lend_each_other_context(st: MemoryStore) -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    turns = []
    for i in range(3):
        turns.append(put(st, record(f"turn {i}", created_at=iso(start + timedelta(minutes=i)))))
        # another agent writing in between is not part of this conversation
        put(
            st, record(f"aside {i}", agent="athena", created_at=iso(start + timedelta(minutes=i, seconds=30)))
        )
    far = put(st, record("a day later", created_at=iso(start + timedelta(days=1))))
    seqs = [t.seq for t in turns]
    assert st.adjacent(WS, [seqs[1]]) == {seqs[1]: {seqs[0], seqs[2]}}
    lent = st.context(WS, {seqs[0]: 1.0}, 2)
    assert lent.get(seqs[1], 0) > 0 and lent.get(seqs[2], 0) > 0
    assert far.seq not in lent and set(lent) <= set(seqs)


# -- caches across workers, snapshots, model ----------------------------------------------------------


def test_another_worker_s_writes_reach_this_worker_s_reads(st: MemoryStore, other: MemoryStore) -> None:
    a = put(st, record("shared alpha"), vec(1.0))
    assert [s for s, _ in other.keyword_search(view(), "alpha", 5)] == [a.seq]  # loads
    b = put(other, record("shared beta"), vec(0.0, 1.0))
    assert [s for s, _ in st.keyword_search(view(), "beta", 5)] == [b.seq]
    assert st.dense_search(view(), vec(0.0, 1.0), 1)[0][0] == b.seq
    other.update(b, {"status": "archived"}, None, None, False)
    assert st.visible_subset(view(), [a.seq, b.seq]) == {a.seq}
    assert st.by_seqs([b.seq], WS)[b.seq].status == "archived"
    other.delete(WS, a.id)
    assert st.keyword_search(view(), "alpha", 5) == [] and st.by_seqs([a.seq], WS) == {}


def test_a_snapshot_reads_the_counters_once_and_shares_them(st: MemoryStore) -> None:
    put(st, record("one"))
    assert st.pinned() == {}
    with st.snapshot():
        st.keyword_search(view(), "one", 5)
        pinned = st.pinned()
        assert set(pinned) == {WS}
        with st.snapshot(pinned):  # nested: the outer reading stays
            assert st.pinned() == pinned
    assert st.pinned() == {}


def test_warm_loads_every_workspace_and_the_model_is_recorded(st: MemoryStore, other: MemoryStore) -> None:
    put(st, record("w1"))
    put(st, record("w2", workspace_id="ws-two"))
    other.warm()
    assert other.embedding_model() is None
    st.set_embedding_model("model-a", DIM)
    assert other.embedding_model() == ("model-a", DIM)
    st.set_embedding_model("model-b", DIM)
    assert other.embedding_model() == ("model-b", DIM)


def test_re_embedding_replaces_vectors_for_every_worker(st: MemoryStore, other: MemoryStore) -> None:
    a = put(st, record("first"), vec(1.0))
    b = put(st, record("second"), vec(0.0, 1.0))
    assert other.dense_search(view(), vec(1.0), 1)[0][0] == a.seq
    batches = list(st.iter_contents(batch=1))
    assert batches == [[(a.seq, "first")], [(b.seq, "second")]]
    st.replace_embeddings([(a.seq, vec(0.0, 1.0)), (b.seq, vec(1.0))])
    assert other.dense_search(view(), vec(1.0), 1)[0][0] == b.seq


# -- the review store ---------------------------------------------------------------------------------


def test_a_filing_is_filed_once_changes_the_status_and_links_the_records(st: MemoryStore) -> None:
    a = put(st, record("the release is on monday"), vec(1.0))
    b = put(st, record("the release is on tuesday"), vec(1.0, 0.1), enqueue=True)
    filing = Filing("possible_contradiction", a.id, 0.8, "conflicted", link="contradicts")
    assert st.reviews.finish_check(b, filing) is True
    assert st.reviews.file_review(b, filing) is False  # idempotent
    assert st.get(WS, b.id).status == "conflicted"  # type: ignore[union-attr]
    assert st.by_seqs([b.seq], WS)[b.seq].status == "conflicted"
    assert st.links([b.seq]) == {b.seq: {a.id}} == st.links([b.seq], WS)
    assert st.reviews.pending_checks() == [] and st.reviews.queued_checks() == 0
    entries, total = st.reviews.list_reviews(WS, None, None, 10, 0)
    assert total == 1 and entries[0].target_id == b.id and entries[0].related_record_id == a.id
    assert entries[0].content == b.content and entries[0].confidence == 0.8


def test_a_check_without_a_filing_is_dequeued(st: MemoryStore) -> None:
    a = put(st, record("queued"), enqueue=True)
    assert st.reviews.queued_checks() == 1 and st.reviews.pending_checks() == [(WS, a.id)]
    assert st.reviews.finish_check(a, None) is False
    assert st.reviews.queued_checks() == 0
    b = put(st, record("queued too"), enqueue=True)
    st.reviews.check_done(b.id)
    assert st.reviews.pending_checks() == []


def test_reviews_list_by_reason_and_record_and_page_within_the_workspace(st: MemoryStore) -> None:
    recs = [put(st, record(f"r{i}"), vec(1.0, 0.1 * i)) for i in range(3)]
    foreign = put(st, record("f", workspace_id="ws-two"))
    st.reviews.file_review(recs[1], Filing("possible_duplicate", recs[0].id, 0.9, None))
    st.reviews.file_review(recs[2], Filing("low_confidence_decision", recs[0].id, 0.5, None))
    st.reviews.file_review(foreign, Filing("possible_duplicate", None, 0.9, None))
    assert st.reviews.list_reviews(WS, None, None, 10, 0)[1] == 2
    assert [e.target_id for e in st.reviews.list_reviews(WS, "possible_duplicate", None, 10, 0)[0]] == [
        recs[1].id
    ]
    assert st.reviews.list_reviews(WS, None, recs[0].id, 10, 0)[1] == 2  # as the related record
    page, total = st.reviews.list_reviews(WS, None, None, 1, 1)
    assert total == 2 and len(page) == 1
    entry = st.reviews.list_reviews("ws-two", None, None, 10, 0)[0][0]
    assert entry.related_record_id is None
    assert st.reviews.get_review(WS, entry.id) is None
    assert st.reviews.get_review("ws-two", entry.id) == entry


def test_resolving_applies_the_resolution_once_and_records_the_event(st: MemoryStore) -> None:
    a = put(st, record("kept"), vec(1.0))
    b = put(st, record("merged"), vec(1.0, 0.1))
    st.reviews.file_review(b, Filing("possible_duplicate", a.id, 0.9, "review_needed"))
    entry = st.reviews.list_reviews(WS, None, None, 10, 0)[0][0]
    current = st.get(WS, b.id)
    assert current is not None and current.status == "review_needed"
    resolution = Resolution("superseded", "merged_via_review", a.id, "tester", {"action": "merge"})
    event = st.reviews.resolve_review(entry, current, resolution)
    assert event is not None and event.startswith("evt_")
    assert st.reviews.resolve_review(entry, current, resolution) is None  # already resolved
    after = st.get(WS, b.id)
    assert after is not None
    assert (after.status, after.verification_state, after.superseded_by) == (
        "superseded",
        "merged_via_review",
        a.id,
    )
    assert st.by_seqs([b.seq], WS)[b.seq] == after
    assert a.id in st.links([b.seq], WS)[b.seq]
    events = st.reviews.events(WS, b.id)
    assert [(e["id"], e["event_type"], e["actor"], e["payload"]) for e in events] == [
        (event, "freshness_review_resolved", "tester", {"action": "merge"})
    ]
    assert st.reviews.events("ws-two", b.id) == []
    assert st.reviews.list_reviews(WS, None, None, 10, 0) == ([], 0)


def test_a_resolution_reaches_another_worker_s_cache(st: MemoryStore, other: MemoryStore) -> None:
    a = put(st, record("flagged"), vec(1.0))
    b = put(st, record("other"), vec(0.0, 1.0))
    assert other.visible_subset(view(), [a.seq, b.seq]) == {a.seq, b.seq}
    st.reviews.file_review(a, Filing("possible_duplicate", b.id, 0.9, "review_needed"))
    assert other.visible_subset(view(), [a.seq, b.seq]) == {b.seq}
    entry = other.reviews.list_reviews(WS, None, None, 10, 0)[0][0]
    current = replace(a, status="review_needed")
    other.reviews.resolve_review(entry, current, Resolution("active", "keep_resolved", None, "t", {}))
    assert st.visible_subset(view(), [a.seq, b.seq]) == {a.seq, b.seq}


def test_a_workspace_forgotten_by_the_memory_budget_is_searched_alike(
    databases: list[Database | PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent memory's per-workspace indexes (vectors, keywords, links, attributes with the content) join
    the process's memory budget: with room for one workspace, searching another forgets the first, and
    its next search loads it back with the same hits."""
    budget = partitions.MemoryBudget()
    monkeypatch.setattr(partitions, "BUDGET", budget)  # the store's caches join this one
    st = _open(databases[0])
    for workspace in ("ws-a", "ws-b"):
        for i, word in enumerate(("cat", "dog", "cat dog", "fish")):
            put(st, record(f"{workspace} {word} {i}", workspace_id=workspace), vec(1.0, 0.3 * i))

    def searches(workspace: str) -> tuple[list[int], list[int]]:
        seen = view(workspace_id=workspace)
        return [s for s, _ in st.dense_search(seen, vec(1.0, 0.5), 3)], [
            s for s, _ in st.keyword_search(seen, "cat", 3)
        ]

    before = {workspace: searches(workspace) for workspace in ("ws-a", "ws-b")}
    kinds = {kind for kind, _, _ in budget.entries()}
    assert {"vectors", "keywords", "attributes"} <= kinds
    sizes = {w: sum(b for _, key, b in budget.entries() if key == w) for w in before}
    budget.limit = max(sizes.values()) + 1
    budget.enforce(None)  # ws-a, the least recently used, goes
    assert all(key == "ws-b" for _, key, _ in budget.entries())
    assert searches("ws-a") == before["ws-a"]  # loaded back
    assert budget.total <= budget.limit and all(key == "ws-a" for _, key, _ in budget.entries())
