"""MemoryService over a real SQLite store in tmp_path with the real local model, and the pure freshness rules."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import count_loads, run_threads

from triptych.core.auth import Principal, local_principal
from triptych.core.db import Database
from triptych.core.embed import LocalEmbedder
from triptych.core.errors import EmbeddingMismatch, Forbidden, NotFound
from triptych.core.pg import PgDatabase
from triptych.metronix import memory_model, memory_schema_sqlite, memory_store_reads
from triptych.metronix.attributes import Visibility
from triptych.metronix.entities import extract_entities
from triptych.metronix.errors import InvalidParams, WorkspaceNotFound
from triptych.metronix.freshness import (
    decision_confidence,
    detect_contradiction,
    distinct_items,
    jaccard,
    judge_repeat,
    restatement,
)
from triptych.metronix.memory import REST_DEFAULTS, MemoryService, MemorySettings, content_hash
from triptych.metronix.memory_model import Filing, MemoryRecord, Resolution
from triptych.metronix.memory_store import SqliteMemoryStore, open_memory_store
from triptych.metronix.store import utcnow

LOCAL = local_principal()
WS = "svc"
# The service's rules hold on both engines (tests of one engine's files or internals say so).
pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    """The real local model, loaded once for this module."""
    local = LocalEmbedder(threads=1)
    local.warm_up()
    return local


@pytest.fixture
def db(tmp_path: Path, storage_engine: str, request: pytest.FixtureRequest) -> Iterator[Database]:
    """The memory database: a SQLite file, or (server mode) a fresh PostgreSQL database."""
    if storage_engine == "postgresql":
        pg = PgDatabase(request.getfixturevalue("postgres").create_database(), max_size=4)
        yield pg  # type: ignore[misc]
        pg.close()
        return
    database = Database(tmp_path / "metronix.db", [])
    yield database
    database.close()


@pytest.fixture
def service(db: Database, embedder: LocalEmbedder) -> MemoryService:
    return MemoryService(open_memory_store(db, embedder.dim), embedder)


def store(service: MemoryService, content: str, agent: str = "hermes", **kwargs: Any) -> dict[str, Any]:
    return service.store_record(
        LOCAL, workspace_id=kwargs.pop("workspace_id", WS), content=content, agent_id=agent, **kwargs
    )


def raw_record(content: str, agent: str = "hermes", status: str = "active", **fields: Any) -> MemoryRecord:
    now = utcnow()
    return MemoryRecord(
        id=str(uuid.uuid4()),
        workspace_id=fields.pop("workspace_id", WS),
        agent_id=agent,
        scope=fields.pop("scope", "per_agent"),
        session_id=None,
        kind="fact",
        content=content,
        content_hash=content_hash(content),
        tags=fields.pop("tags", []),
        importance_score=0.5,
        source_type="",
        metadata={},
        status=status,
        created_at=now,
        updated_at=now,
    )


# -- dedup ----------------------------------------------------------------------------------


# On every engine: test_memory_store_contract.py::test_the_same_dedup_key_returns_the_stored_record_and_writes_nothing
@pytest.mark.engines("sqlite")
def test_storing_the_same_content_again_returns_the_existing_id_with_deduped_true(
    service: MemoryService,
) -> None:
    first = store(service, "The build server is called hopper.")
    again = store(service, "The build server is called hopper.")
    assert first["deduped"] is False and again["deduped"] is True
    assert again["id"] == first["id"]
    assert first["content_hash"] == hashlib.sha256(b"The build server is called hopper.").hexdigest()


def test_a_duplicate_store_answers_without_embedding_the_content_again(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = store(service, "The release train leaves on Thursdays.")
    calls: list[list[str]] = []
    embed = service.embedder.embed

    def counting(texts: list[str]) -> Any:
        calls.append(list(texts))
        return embed(texts)

    monkeypatch.setattr(service.embedder, "embed", counting)
    again = store(service, "The release train leaves on Thursdays.")

    assert again == {**first, "deduped": True}
    assert calls == []


def test_a_duplicate_store_still_validates_every_argument(service: MemoryService) -> None:
    store(service, "The release train leaves on Thursdays.")
    with pytest.raises(InvalidParams):
        store(service, "The release train leaves on Thursdays.", kind="bogus")


# On every engine: test_memory_store_contract.py::test_the_same_dedup_key_returns_the_stored_record_and_writes_nothing
@pytest.mark.engines("sqlite")
def test_dedup_is_keyed_by_workspace_agent_scope_and_session(service: MemoryService) -> None:
    text = "Standups happen at nine."
    base = store(service, text)
    variants = [
        store(service, text, workspace_id="svc-other"),
        store(service, text, agent="athena"),
        store(service, text, scope="global"),
        store(service, text, scope="session", session_id="s1"),
        store(service, text, scope="session", session_id="s2"),
    ]
    assert all(v["deduped"] is False for v in variants)
    assert len({base["id"], *(v["id"] for v in variants)}) == 6
    assert store(service, text, scope="session", session_id="s1")["id"] == variants[3]["id"]


def test_concurrent_writers_of_the_same_content_leave_exactly_one_record(service: MemoryService) -> None:
    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(4)

    def write() -> None:
        barrier.wait()
        results.append(store(service, "Concurrent writers agree on one record."))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r["id"] for r in results}) == 1
    assert sorted(r["deduped"] for r in results) == [False, True, True, True]
    assert service.list_records(LOCAL, workspace_id=WS, agent_id="hermes")["total"] == 1


# -- lifecycle filters happen before top_k ----------------------------------------------------


def test_many_archived_matches_do_not_crowd_the_active_record_out_of_top_k(
    service: MemoryService, embedder: LocalEmbedder
) -> None:
    texts = [
        f"Archived note {i}: the quarterly invoice export runs on the finance cluster." for i in range(60)
    ]
    for text, vector in zip(texts, embedder.embed(texts), strict=True):
        service.store.insert(raw_record(text, status="archived"), vector, set(), False)
    store(service, "Invoices for the quarter are exported by a cron job.")
    found = service.search(
        LOCAL, workspace_id=WS, query="quarterly invoice export finance cluster", agent_id="hermes", top_k=1
    )
    assert [r["record"]["content"] for r in found["results"]] == [
        "Invoices for the quarter are exported by a cron job."
    ]
    every = service.search(
        LOCAL, workspace_id=WS, query="quarterly invoice export", agent_id="hermes", top_k=50, status=["all"]
    )
    assert every["count"] == 50
    listed = service.list_records(LOCAL, workspace_id=WS, agent_id="hermes", status=["archived"], limit=5)
    assert (listed["count"], listed["total"]) == (5, 60)


def test_rest_search_defaults_exclude_only_archived_and_superseded(
    service: MemoryService, embedder: LocalEmbedder
) -> None:
    statuses = ("active", "candidate", "stale", "superseded", "archived", "conflicted", "review_needed")
    texts = [f"Lifecycle probe record in status {status} about the vendor contract." for status in statuses]
    for status, text, vector in zip(statuses, texts, embedder.embed(texts), strict=True):
        service.store.insert(raw_record(text, status=status), vector, set(), False)
    rest = service.search(
        LOCAL,
        workspace_id=WS,
        query="vendor contract lifecycle probe",
        agent_id="hermes",
        top_k=50,
        defaults=REST_DEFAULTS,
    )
    mcp = service.search(
        LOCAL, workspace_id=WS, query="vendor contract lifecycle probe", agent_id="hermes", top_k=50
    )
    assert {r["record"]["status"] for r in rest["results"]} == {
        "active",
        "candidate",
        "stale",
        "conflicted",
        "review_needed",
    }
    assert {r["record"]["status"] for r in mcp["results"]} == {"active"}


# -- search scoring -------------------------------------------------------------------------------


def test_configured_weights_compose_the_score(db: Database, embedder: LocalEmbedder) -> None:
    settings = MemorySettings(dense_weight=0.2, graph_weight=0.5, session_weight=0.3)
    service = MemoryService(open_memory_store(db, embedder.dim), embedder, settings)
    store(service, "Priya reviews every pull request for MTRNIX-77.", scope="session", session_id="s9")
    store(service, "The coffee machine on floor two is broken.")
    found = service.search(
        LOCAL, workspace_id=WS, query="who reviews MTRNIX-77", agent_id="hermes", session_id="s9"
    )
    assert found["count"] == 2
    for hit in found["results"]:
        expected = 0.2 * hit["dense_score"] + 0.5 * hit["graph_score"] + 0.3 * hit["session_boost"]
        assert hit["score"] == pytest.approx(expected, abs=2e-4)
    top = found["results"][0]
    assert top["record"]["content"].startswith("Priya")
    assert top["graph_score"] == 1.0 and top["session_boost"] > 0.5


# -- update -------------------------------------------------------------------------------------


def test_updating_content_to_another_records_content_is_invalid_params_not_a_crash(
    service: MemoryService,
) -> None:
    store(service, "The release train leaves on Thursdays.")
    other = store(service, "Lunch is catered on Wednesdays.")
    with pytest.raises(InvalidParams):
        service.update(
            LOCAL, workspace_id=WS, record_id=other["id"], content="The release train leaves on Thursdays."
        )
    listed = service.list_records(LOCAL, workspace_id=WS, agent_id="hermes", status=["all"])
    assert sorted(r["content"] for r in listed["records"]) == [
        "Lunch is catered on Wednesdays.",
        "The release train leaves on Thursdays.",
    ]


# On every engine: test_memory_store_contract.py::test_tenancy_another_workspace_sees_nothing
@pytest.mark.engines("sqlite")
def test_updating_a_record_of_another_workspace_is_not_found(service: MemoryService) -> None:
    stored = store(service, "Only in the first workspace.")
    with pytest.raises(NotFound):
        service.update(LOCAL, workspace_id="svc-other", record_id=stored["id"], tags=["x"])


def test_an_expired_session_record_is_gone_for_update_too(db: Database, embedder: LocalEmbedder) -> None:
    now = [datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)]
    service = MemoryService(
        open_memory_store(db, embedder.dim), embedder, MemorySettings(session_ttl=60), clock=lambda: now[0]
    )
    stored = store(service, "Scratch note for this session only.", scope="session", session_id="s1")
    now[0] += timedelta(seconds=59)
    assert service.list_records(LOCAL, workspace_id=WS, agent_id="hermes", status=["all"])["total"] == 1
    # Listing slid the TTL: the record lives 60 s after its last touch, not after its creation.
    now[0] += timedelta(seconds=50)
    assert service.get_record(LOCAL, WS, stored["id"])["id"] == stored["id"]
    now[0] += timedelta(seconds=61)
    assert service.list_records(LOCAL, workspace_id=WS, agent_id="hermes", status=["all"])["total"] == 0
    with pytest.raises(NotFound):
        service.get_record(LOCAL, WS, stored["id"])
    with pytest.raises(NotFound):
        service.update(LOCAL, workspace_id=WS, record_id=stored["id"], tags=["revived"])


# -- roles ----------------------------------------------------------------------------------------


def test_a_viewer_searches_but_every_write_is_forbidden(service: MemoryService) -> None:
    stored = store(service, "Visible to viewers of the workspace.", scope="global")
    viewer = Principal(user="vic", role="viewer", workspace_ids=(WS,))
    found = service.search(viewer, workspace_id=WS, query="visible to viewers", agent_id="anyone")
    assert [r["record"]["id"] for r in found["results"]] == [stored["id"]]
    writes = [
        lambda: service.store_record(viewer, workspace_id=WS, content="nope", agent_id="vic"),
        lambda: service.batch_store(viewer, workspace_id=WS, records=[{"content": "nope"}], agent_id="vic"),
        lambda: service.update(viewer, workspace_id=WS, record_id=stored["id"], tags=["x"]),
        lambda: service.delete(viewer, WS, stored["id"]),
        lambda: service.review_resolve(viewer, WS, "review_x", "keep"),
    ]
    for write in writes:
        with pytest.raises(Forbidden):
            write()
    with pytest.raises(WorkspaceNotFound):
        service.search(viewer, workspace_id="svc-other", query="visible", agent_id="anyone")


# -- freshness pipeline: durable, idempotent, three detectors -----------------------------------------


def test_a_check_queued_before_a_crash_is_run_by_the_next_service_and_files_the_review(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    path = tmp_path / "crash.db"
    first_db = Database(path, [])
    first = MemoryService(open_memory_store(first_db, embedder.dim), embedder)
    old = store(first, "User prefers dark mode")
    record = raw_record("User prefers light mode")
    # The write commits with its queued check, then the process "dies" before running the check.
    first.store.insert(record, embedder.embed([record.content])[0], extract_entities(record.content), True)
    assert first.store.reviews.pending_checks() == [(WS, record.id)]
    assert first.review_list(LOCAL, WS)["total"] == 0
    first_db.close()

    second_db = Database(path, [])
    try:
        second = MemoryService(open_memory_store(second_db, embedder.dim), embedder)
        assert second.run_pending_checks() == 1
        reviews = second.review_list(LOCAL, WS)
        assert [(e["target_id"], e["related_record_id"], e["reason"]) for e in reviews["entries"]] == [
            (record.id, old["id"], "possible_contradiction")
        ]
        assert second.get_record(LOCAL, WS, record.id)["status"] == "conflicted"
        assert second.store.reviews.pending_checks() == []
        assert second.run_pending_checks() == 0
    finally:
        second_db.close()


# On every engine: test_memory_store_contract.py::test_delete_removes_the_record_its_queued_check_and_its_reviews
@pytest.mark.engines("sqlite")
def test_deleting_a_record_drops_its_queued_check(service: MemoryService, embedder: LocalEmbedder) -> None:
    record = raw_record("Ephemeral thought about the roadmap.")
    service.store.insert(record, embedder.embed([record.content])[0], set(), True)
    assert service.store.reviews.pending_checks() == [(WS, record.id)]
    service.store.delete(WS, record.id)
    assert service.run_pending_checks() == 0
    assert service.store.reviews.pending_checks() == []


# On every engine: test_memory_store_contract.py::test_a_check_without_a_filing_is_dequeued
@pytest.mark.engines("sqlite")
def test_a_completed_write_leaves_nothing_queued(service: MemoryService) -> None:
    store(service, "User prefers dark mode")
    store(service, "User prefers light mode")
    assert service.store.reviews.pending_checks() == []


# On every engine: test_memory_store_contract.py::test_a_filing_is_filed_once_changes_the_status_and_links_the_records
@pytest.mark.engines("sqlite")
def test_filing_the_same_review_twice_keeps_one_entry(service: MemoryService) -> None:
    old = store(service, "User prefers dark mode")
    new = store(service, "User prefers light mode")
    record = service.store.get(WS, new["id"])
    assert record is not None
    assert (
        service.store.reviews.file_review(
            record, Filing("possible_contradiction", old["id"], 0.7, "conflicted")
        )
        is False
    )
    # Re-running the whole check (as a restart would) files nothing new either.
    service.store.update(record, {}, None, None, enqueue=True)
    assert service.run_pending_checks() == 1
    assert service.review_list(LOCAL, WS)["total"] == 1


def test_a_refining_restatement_files_a_low_confidence_decision(service: MemoryService) -> None:
    old = store(service, "User works at Google.")
    new = store(service, "User works at Google on the Maps team.")
    reviews = service.review_list(LOCAL, WS, reason="low_confidence_decision")
    assert [(e["target_id"], e["related_record_id"]) for e in reviews["entries"]] == [(new["id"], old["id"])]
    assert reviews["entries"][0]["confidence"] < 0.7
    assert service.get_record(LOCAL, WS, new["id"])["status"] == "review_needed"
    assert service.get_record(LOCAL, WS, old["id"])["status"] == "active"


def test_unrelated_records_file_no_review(service: MemoryService) -> None:
    store(service, "User prefers dark mode")
    store(service, "The cafeteria serves pasta on fridays")
    store(service, "Backups are encrypted with age before upload")
    assert service.review_list(LOCAL, WS)["total"] == 0


# On every engine: test_memory_store_contract.py::test_resolving_applies_the_resolution_once_and_records_the_event
@pytest.mark.engines("sqlite")
def test_review_resolution_writes_an_audit_event_with_capped_notes(service: MemoryService) -> None:
    store(service, "User prefers dark mode")
    new = store(service, "User prefers light mode")
    review = service.review_list(LOCAL, WS)["entries"][0]
    resolved = service.review_resolve(LOCAL, WS, review["id"], "discard", notes="n" * 5000)
    events = service.store.reviews.events(WS, new["id"])
    assert [(e["id"], e["event_type"], e["actor"]) for e in events] == [
        (resolved["machine_event_id"], "freshness_review_resolved", "mcp_caller")
    ]
    assert events[0]["payload"]["notes"] == "n" * 1024
    assert service.get_record(LOCAL, WS, new["id"])["verification_state"] == "discarded_via_review"


# -- detect_contradiction: clear positives and clear negatives -------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        ("User prefers dark mode", "User prefers light mode", "value"),
        ("The team has 12 engineers", "The team has 15 engineers", "number"),
        ("The server listens on port 8080", "The server listens on port 9090", "number"),
        ("The release is scheduled for 2026-04-17", "The release is scheduled for 2026-05-02", "number"),
        ("The standup is at 9:30", "The standup is at 10:15", "number"),
        ("The launch date is March 3", "The launch date is March 10", "number"),
        ("Alice likes coffee", "Alice does not like coffee", "negation"),
        ("Bob is not allergic to peanuts", "Bob is allergic to peanuts", "negation"),
        ("The API is stable", "The API isn't stable", "negation"),
        ("Bob will attend the offsite", "Bob won't attend the offsite", "negation"),
        ("The project lead is Alice", "The project lead is Bob", "value"),
        ("Caroline lives in Boston", "Caroline lives in Denver", "value"),
        ("We use PostgreSQL for storage", "We use SQLite for storage", "value"),
    ],
)
def test_detect_contradiction_finds_one_changed_value_number_date_negation_or_name(
    old: str, new: str, kind: str
) -> None:
    found = detect_contradiction(old, new)
    assert found is not None
    assert found.kind == kind
    assert 0.5 <= found.confidence <= 1.0


def test_detect_contradiction_reports_what_changed() -> None:
    found = detect_contradiction("User prefers dark mode", "User prefers light mode")
    assert found is not None
    assert (found.before, found.after) == ("dark", "light")


@pytest.mark.parametrize(
    "negated", ["Alice cannot attend the meeting", "Alice can't attend the meeting"], ids=["cannot", "cant"]
)
def test_detect_contradiction_finds_a_negation_added_with_cannot(negated: str) -> None:
    assert detect_contradiction("Alice can attend the meeting", negated) is not None
    assert detect_contradiction(negated, "Alice can attend the meeting") is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("User prefers dark mode", "User prefers dark mode in the editor"),
        ("The deploy runs nightly", "The deploy runs nightly on GitHub Actions"),
        ("The meeting is at 3pm", "The meeting is at 3pm on Monday"),
        ("Alice likes coffee", "Alice likes coffee and tea"),
        ("User prefers dark mode", "The cafeteria serves pasta on Fridays"),
        ("The quarterly report is due soon", "Kubernetes pods restart after an OOM kill"),
        ("User prefers dark mode", "The user likes a dark theme"),
        ("The user dislikes meetings before 10am", "Before 10am the user dislikes meetings"),
        ("User prefers dark mode", "user prefers DARK mode."),
        ("I like apples", "I like apples"),
    ],
    ids=[
        "refine-where",
        "refine-how",
        "refine-when",
        "refine-and",
        "unrelated",
        "unrelated-2",
        "paraphrase",
        "reordered",
        "case-and-punctuation",
        "identical",
    ],
)
def test_detect_contradiction_ignores_refinements_unrelated_statements_and_paraphrases(
    old: str, new: str
) -> None:
    assert detect_contradiction(old, new) is None


# -- formatting variants and numbered series (issue 20) ----------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("The team standup is at 5pm.", "The team standup is at 5 pm"),
        ("The deploy window opens at 9:30am", "The deploy window opens at 9:30 AM."),
        ("Support closes at 6 p.m. on Fridays.", "Support closes at 6pm on Fridays"),
        ("The meeting is at 14:00.", "The meeting is at 2 pm."),
        ("Bob prefers tea in the afternoon.", "Bob prefers tea in the afternoon"),
    ],
    ids=["5pm", "9:30am", "p.m.", "24h", "full-stop"],
)
def test_formatting_variants_of_one_fact_are_restatements_not_contradictions(old: str, new: str) -> None:
    assert detect_contradiction(old, new) is None
    assert restatement(old, new)
    repeat = judge_repeat(old, new, 0.97, threshold=0.92, decision_threshold=0.7, margin=0.05)
    assert repeat is not None and repeat.reason == "possible_duplicate"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Ticket 4411 is assigned to Bob.", "Ticket 4412 is assigned to Bob."),
        (
            "Step 3 of the release checklist is tagging the build.",
            "Step 4 of the release checklist is tagging the build.",
        ),
        ("Order #1001 shipped on Monday.", "Order #1002 shipped on Monday."),
        ("Fact 5: the user likes jazz.", "Fact 6: the user likes jazz."),
        ("Ticket 4411 is assigned to Bob.", "Ticket 4412 is assigned to Carol."),
    ],
    ids=["ticket", "step", "order", "fact", "ticket-and-owner"],
)
def test_items_of_a_numbered_series_neither_contradict_nor_repeat_each_other(old: str, new: str) -> None:
    assert distinct_items(old, new)
    assert detect_contradiction(old, new) is None
    assert judge_repeat(old, new, 0.97, threshold=0.92, decision_threshold=0.7, margin=0.05) is None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Dana is 41 years old.", "Dana is 42 years old."),
        ("The billing service runs version 2.3.", "The billing service runs version 2.4."),
        ("Version 3 is deployed to production.", "Version 4 is deployed to production."),
        ("The launch date is March 3.", "The launch date is March 10."),
        ("Ticket 4411 is assigned to Bob.", "Ticket 4411 is assigned to Carol."),
        ("The team standup is at 5pm.", "The team standup is at 6 pm."),
        ("The meeting is in room 12.", "The meeting is in room 14."),
    ],
    ids=["age", "version", "leading-version", "date", "same-ticket", "time", "room-as-value"],
)
def test_the_contradictions_that_matter_are_still_found(old: str, new: str) -> None:
    assert not distinct_items(old, new)
    assert detect_contradiction(old, new) is not None


def test_seven_numbered_facts_are_all_listed_and_a_reformatted_one_is_filed_as_a_duplicate(
    service: MemoryService,
) -> None:
    ids = [
        store(service, f"Step {n} of the release checklist is done by the on-call engineer.")["id"]
        for n in range(1, 8)
    ]
    listed = service.list_records(LOCAL, workspace_id=WS, agent_id="hermes", limit=50)
    assert {r["id"] for r in listed["records"]} >= set(ids)
    assert service.review_list(LOCAL, WS)["total"] == 0
    first = store(service, "The team standup is at 5pm.")
    again = store(service, "The team standup is at 5 pm")
    reviews = service.review_list(LOCAL, WS)
    assert [(e["reason"], e["target_id"], e["related_record_id"]) for e in reviews["entries"]] == [
        ("possible_duplicate", again["id"], first["id"])
    ]


# -- jaccard and decision_confidence ------------------------------------------------------------------


def test_jaccard_compares_content_words_ignoring_case_stopwords_and_plurals() -> None:
    assert jaccard("User prefers dark mode", "user prefer DARK modes!") == 1.0
    assert jaccard("User prefers dark mode", "User prefers light mode") == pytest.approx(3 / 5)
    assert jaccard("User prefers dark mode", "The cafeteria serves pasta") == 0.0
    assert jaccard("", "anything") == 0.0
    assert jaccard("the a of", "the a of") == 0.0  # only stopwords: nothing to compare


def test_jaccard_keeps_negations_so_a_negated_statement_is_not_identical() -> None:
    assert jaccard("Alice likes coffee", "Alice does not like coffee") < 1.0


def test_jaccard_is_symmetric() -> None:
    a, b = "The deploy pipeline runs nightly", "Nightly runs of the deploy job"
    assert jaccard(a, b) == jaccard(b, a)


@pytest.mark.parametrize(
    ("similarity", "lexical", "expected"),
    [
        (0.99, 1.0, 0.0),  # both saturated: surely a restatement
        (0.3, 0.9, 1.0),  # words shared, meaning not: a distinct memory
        (0.95, 0.25, 1.0),  # close in meaning, under 30 % shared words: a distinct memory
        (0.80, 0.5, 1.0 - 0.1 / 0.15),  # lexical saturated, semantic part-way
        (0.85, 0.4, 0.5),  # semantic saturated, lexical half-way
        (0.775, 0.4, 1.0 - 0.5 * 0.5),  # both half-way: the product
    ],
)
def test_decision_confidence_follows_the_documented_formula(
    similarity: float, lexical: float, expected: float
) -> None:
    assert decision_confidence(similarity, lexical, 0.85) == pytest.approx(expected)


def test_decision_confidence_stays_within_zero_and_one() -> None:
    for s in (-1.0, 0.0, 0.5, 0.7, 0.85, 1.0):
        for j in (0.0, 0.25, 0.5, 1.0):
            assert 0.0 <= decision_confidence(s, j, 0.85) <= 1.0


def test_turns_that_share_only_a_date_are_confident_new_memories() -> None:
    # Two turns of one conversation: close for MiniLM, the date in common. Not a restatement.
    a = "[8 May, 2023] Caroline: I went to a LGBTQ support group yesterday."
    b = "[8 May, 2023] Melanie: Sounds great! Did the kids enjoy the pottery class?"
    assert decision_confidence(0.82, jaccard(a, b), 0.85) == 1.0
    # A refinement of the same fact, close in meaning and words, is the hard call.
    assert (
        decision_confidence(
            0.82, jaccard("User works at Google.", "User works at Google on the Maps team."), 0.85
        )
        < 0.7
    )


# -- post-filtered first stage and conversation adjacency ------------------------------------


def _crowded_store(db: Database, dim: int) -> SqliteMemoryStore:
    """300 records: agent "rare" owns 6 (three of them archived), agent "busy" the rest."""
    st = open_memory_store(db, dim)
    rng = np.random.default_rng(11)
    for i in range(300):
        agent = "rare" if i % 50 == 0 else "busy"
        status = "archived" if agent == "rare" and i % 100 == 0 else "active"
        vec = rng.standard_normal(dim).astype(np.float32)
        st.insert(
            raw_record(f"note {i} about the shared harbour", agent, status), vec / np.linalg.norm(vec), set()
        )
    return st


# On every engine: test_memory_store_contract.py::test_a_selective_filter_still_finds_every_visible_record
@pytest.mark.engines("sqlite")
@pytest.mark.parametrize("max_probe", [4096, 40])
def test_post_filtered_dense_and_keyword_search_equal_a_search_of_the_visible_set(
    db: Database, embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch, max_probe: int
) -> None:
    # max_probe 40: the probe cannot widen enough for the rare agent and falls back to the visible set.
    monkeypatch.setattr(memory_store_reads, "MAX_PROBE", max_probe)
    st = _crowded_store(db, embedder.dim)
    view = Visibility(workspace_id=WS, agent_id="rare", statuses=("active",))
    visible = st.visible_seqs(view)
    assert len(visible) == 3
    generation = st.caches.generation(WS)
    rng = np.random.default_rng(12)

    for _ in range(5):
        query = rng.standard_normal(embedder.dim).astype(np.float32)
        query /= np.linalg.norm(query)
        got = st.dense_search(view, query, 3)
        assert got == st.index.search_subset(WS, generation, query, visible, 3)
    keyword = st.keyword_search(view, "harbour", 10)
    assert sorted(seq for seq, _ in keyword) == sorted(visible)


def test_a_record_gains_context_from_the_turn_stored_just_before_it(service: MemoryService) -> None:
    question = store(service, "Caroline: I went to the LGBTQ support group yesterday.")
    store(service, "Unrelated: the deploy pipeline is green again.", agent="other")
    answer = store(service, "Melanie: That sounds wonderful, I am proud of you.")

    found = service.search(LOCAL, workspace_id=WS, query="LGBTQ support group", agent_id="hermes", top_k=5)

    by_id = {r["record"]["id"]: r for r in found["results"]}
    assert by_id[question["id"]]["rank"] == 1
    # The reply shares no word with the query; its relevance is lent by the turn it follows.
    assert by_id[answer["id"]]["context_score"] > 0
    assert by_id[question["id"]]["context_score"] > 0  # and it lends back
    assert all(r["record"]["agent_id"] == "hermes" for r in found["results"])


# On every engine: test_memory_store_contract.py::test_records_written_in_turn_lend_each_other_context
@pytest.mark.engines("sqlite")
def test_records_written_far_apart_or_by_another_agent_are_not_adjacent(
    db: Database, embedder: LocalEmbedder
) -> None:
    st = open_memory_store(db, embedder.dim)
    vec = np.ones(embedder.dim, dtype=np.float32) / np.sqrt(embedder.dim)
    old = datetime.now(UTC) - timedelta(hours=3)
    first, _ = st.insert(replace(raw_record("old note"), created_at=old.isoformat()), vec, set())
    second, _ = st.insert(raw_record("new note"), vec, set())
    third, _ = st.insert(raw_record("someone else's note", agent="other"), vec, set())
    fourth, _ = st.insert(raw_record("next note"), vec, set())

    adjacent = st.adjacent(WS, [first.seq, second.seq, third.seq, fourth.seq])

    assert adjacent == {second.seq: {fourth.seq}, fourth.seq: {second.seq}}
    # The cached links follow deletes, and a fresh store loads the same links from the table.
    assert st.delete(WS, second.id)
    assert st.adjacent(WS, [second.seq, fourth.seq]) == {}
    fifth, _ = st.insert(raw_record("last note"), vec, set())
    assert open_memory_store(db, embedder.dim).adjacent(WS, [fourth.seq, fifth.seq]) == st.adjacent(
        WS, [fourth.seq, fifth.seq]
    )


def test_a_database_at_memory_schema_2_keeps_its_adjacency_and_works(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    # Migration 2 (a `follows` column) was live for a few hours; migration 3 moves it to a table.
    old = Database(tmp_path / "m.db", [])
    old.migrate("memory", memory_schema_sqlite.MIGRATIONS[:2])
    vec = np.full(embedder.dim, 1 / np.sqrt(embedder.dim), dtype=np.float32)
    for seq, follows in ((1, None), (2, 1)):
        old.conn.execute(
            "INSERT INTO memory_records (seq, id, workspace_id, agent_id, scope, kind, content, content_hash,"
            " created_at, updated_at, embedding, dedup_key, follows)"
            " VALUES (?, ?, ?, 'hermes', 'per_agent', 'fact', ?, ?, ?, ?, ?, ?, ?)",
            (
                seq,
                f"r{seq}",
                WS,
                f"note {seq}",
                f"h{seq}",
                utcnow(),
                utcnow(),
                vec.tobytes(),
                f"k{seq}",
                follows,
            ),
        )
    old.close()

    db = Database(tmp_path / "m.db", [])
    service = MemoryService(open_memory_store(db, embedder.dim), embedder)
    assert service.store.adjacent(WS, [1, 2]) == {1: {2}, 2: {1}}
    # Nothing recorded which model embedded those records: searching them waits for a reindex.
    with pytest.raises(EmbeddingMismatch, match="before Triptych recorded"):
        service.search(LOCAL, workspace_id=WS, query="note", agent_id="hermes", top_k=5)
    assert service.reindex() == 2
    third = store(service, "note 3, written right after")
    found = service.search(LOCAL, workspace_id=WS, query="note", agent_id="hermes", top_k=5)
    db.close()

    assert {r["record"]["id"] for r in found["results"]} == {"r1", "r2", third["id"]}


@pytest.mark.engines("sqlite")  # a second SQLite connection, or SQLite's query plan
def test_purging_expired_session_records_reads_the_expiry_index_not_the_table(
    db: Database, embedder: LocalEmbedder
) -> None:
    st = open_memory_store(db, embedder.dim)
    plan = db.conn.execute(
        "EXPLAIN QUERY PLAN SELECT workspace_id, id FROM memory_records"
        " WHERE scope = 'session' AND ttl_expires_at <= ?",
        (utcnow(),),
    ).fetchall()
    assert any("memory_session_expiry" in row[3] for row in plan), plan
    assert st.purge_expired(utcnow()) == 0


@pytest.mark.engines("sqlite")  # a second SQLite connection, or SQLite's query plan
def test_keyword_search_follows_updates_deletes_and_another_process_s_writes(
    db: Database, embedder: LocalEmbedder
) -> None:
    first = MemoryService(open_memory_store(db, embedder.dim), embedder)
    view = Visibility(workspace_id=WS, agent_id="hermes", statuses=None)

    def keyword(st: SqliteMemoryStore, query: str) -> set[str]:
        hits = st.keyword_search(view, query, 10)
        return {r.id for r in st.by_seqs([seq for seq, _ in hits]).values()}

    a = store(first, "The lighthouse keeper painted the gate blue")["id"]
    b = store(first, "Invoices are due on the first Monday")["id"]
    assert keyword(first.store, "lighthouse") == {a}
    # Tags are indexed (at half weight) and follow an update that changes only them.
    first.update(LOCAL, workspace_id=WS, record_id=b, tags=["accounting"])
    assert keyword(first.store, "accounting") == {b}
    first.update(LOCAL, workspace_id=WS, record_id=a, content="The harbour master painted the gate green")
    assert keyword(first.store, "lighthouse") == set()
    assert keyword(first.store, "harbour") == {a}
    # A second process over the same database: its writes reach the first one's cached index.
    other = Database(db.path, [])
    try:
        second = MemoryService(open_memory_store(other, embedder.dim), embedder)
        c = store(second, "A lighthouse stands on the northern cape")["id"]
        second.delete(LOCAL, WS, b)
    finally:
        other.close()
    assert keyword(first.store, "lighthouse") == {c}
    assert keyword(first.store, "invoices accounting") == set()


def test_warming_loads_every_workspace_s_indexes_before_the_first_search(
    db: Database, embedder: LocalEmbedder
) -> None:
    writer = MemoryService(open_memory_store(db, embedder.dim), embedder)
    store(writer, "The ferry leaves at noon", workspace_id="w1")
    store(writer, "The bakery opens at six", workspace_id="w2")
    fresh = open_memory_store(db, embedder.dim)  # as a restarted server: nothing cached
    assert not fresh.keywords._parts and not fresh.index._parts
    fresh.warm()
    assert (
        set(fresh.keywords._parts)
        == set(fresh.index._parts)
        == set(fresh.adjacency._parts)
        == set(fresh.attributes._parts)
        == {"w1", "w2"}
    )


def _mixed_store(db: Database, dim: int) -> tuple[SqliteMemoryStore, list[int]]:
    """120 records over two agents, every scope, status and kind, some tags, live and expired sessions."""
    st = open_memory_store(db, dim)
    rng = np.random.default_rng(5)
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    seqs = []
    for i in range(120):
        scope = ("global", "per_agent", "session")[i % 3]
        record = replace(
            raw_record(
                f"note {i}",
                agent=("hermes", "athena")[i % 2],
                status=memory_model.STATUSES[i % len(memory_model.STATUSES)],
                scope=scope,
                tags=[["red"], ["red", "blue"], []][i % 4 % 3],
            ),
            kind=memory_model.KINDS[i % 5 % 3],
            session_id=f"s{i % 2}" if scope == "session" else None,
            ttl_expires_at=future if scope == "session" else None,
        )
        vec = rng.standard_normal(dim).astype(np.float32)
        seqs.append(st.insert(record, vec / np.linalg.norm(vec), set())[0].seq)
    # Expired ones last: a session-scoped insert purges expired session records first.
    st.touch(WS, seqs[2::12], past)
    return st, seqs


def _views() -> list[Visibility]:
    return [
        Visibility(workspace_id=WS, agent_id=agent, **filters)  # type: ignore[arg-type]
        for agent in ("hermes", "athena", "nobody")
        for filters in [
            {"statuses": None},
            {"statuses": ("active",)},
            {"statuses": ("active", "conflicted"), "session_id": "s0"},
            {"statuses": None, "exclude_statuses": ("archived", "superseded")},
            {"statuses": None, "scope": "session"},
            {"statuses": None, "kind": "pinned", "tags": ("red",)},
            {"statuses": None, "tags": ("red", "blue")},
        ]
    ]


# On every engine: test_memory_store_contract.py::test_every_read_applies_the_same_visibility
@pytest.mark.engines("sqlite")
def test_the_cached_visibility_rule_equals_the_sql_one_for_every_filter(
    db: Database, embedder: LocalEmbedder
) -> None:
    st, seqs = _mixed_store(db, embedder.dim)
    for view in _views():
        assert st.visible_subset(view, seqs) == set(st.visible_seqs(view)), view


@pytest.mark.engines("sqlite")  # a second SQLite connection, or SQLite's query plan
def test_the_visibility_cache_follows_status_changes_ttl_slides_and_another_process_s_writes(
    db: Database, embedder: LocalEmbedder
) -> None:
    first, seqs = _mixed_store(db, embedder.dim)
    records = first.by_seqs(seqs)
    active = next(r for r in records.values() if r.status == "active" and r.scope == "per_agent")
    expired = next(
        r for r in records.values() if r.scope == "session" and (r.ttl_expires_at or "") < utcnow()
    )
    plain = next(r for r in records.values() if not r.tags and r.id not in (active.id, expired.id))
    gone = next(r for r in records.values() if r.id not in (active.id, expired.id, plain.id))
    review = first.reviews.file_review(plain, Filing("possible_duplicate", None, 0.9, None))
    later = (datetime.now(UTC) + timedelta(hours=2)).isoformat()

    def coherent() -> None:
        for view in _views():
            assert first.visible_subset(view, seqs) == set(first.visible_seqs(view)), view

    coherent()  # cached now
    other = Database(db.path, [])
    try:
        second = open_memory_store(other, embedder.dim)
        entry = second.reviews.list_reviews(WS, None, plain.id, 1, 0)[0][0]
        # Each write of another process, one at a time, reaches this process's cache.
        writes = [
            lambda: second.reviews.file_review(
                active, Filing("possible_contradiction", None, 0.9, "conflicted")
            ),
            lambda: second.touch(WS, [expired.seq], later),
            lambda: second.update(plain, {"tags": ["red", "blue"], "kind": "pinned"}, None, None, False),
            lambda: second.reviews.resolve_review(
                entry, plain, Resolution("archived", "rejected", None, "test", {})
            ),
            lambda: second.delete(WS, gone.id),
        ]
        assert review
        for write in writes:
            write()
            coherent()
    finally:
        other.close()
    live = [seq for seq in seqs if seq != gone.seq]
    default = Visibility(workspace_id=WS, agent_id=active.agent_id, statuses=("active",))
    assert active.seq not in first.visible_subset(default, live)
    session = Visibility(workspace_id=WS, agent_id=expired.agent_id, statuses=None)
    assert expired.seq in first.visible_subset(session, live)
    # This process's own writes apply in place, without a reload.
    table = first.attributes._parts[WS]
    first.touch(WS, [expired.seq], (datetime.now(UTC) - timedelta(minutes=1)).isoformat())
    first.update(active, {"status": "active"}, None, None, False)
    assert first.attributes._parts[WS] is table
    assert expired.seq not in first.visible_subset(session, live)
    assert active.seq in first.visible_subset(default, live)
    coherent()


def test_concurrent_writes_and_searches_never_reload_a_cache(db: Database, embedder: LocalEmbedder) -> None:
    # Writes commit and then hand their change to the caches. Searches that read the counters in
    # between, or writes applied out of commit order, used to find a cache a generation behind and
    # reload it from the database; with one process writing, nothing should ever reload.
    service = MemoryService(open_memory_store(db, embedder.dim), embedder)
    service.batch_store(
        LOCAL,
        workspace_id=WS,
        records=[{"content": f"note {i} about the harbour crane"} for i in range(60)],
        agent_id="hermes",
    )
    service.search(LOCAL, workspace_id=WS, query="harbour", agent_id="hermes")  # every cache loaded
    st = service.store
    loads = count_loads(st.index, st.keywords, st.adjacency, st.attributes)

    def work(worker: int) -> None:
        for i in range(12):
            if i % 2:
                store(
                    service,
                    f"worker {worker} saw crane {i} lift a container",
                    scope="session",
                    session_id="s",
                )
            else:
                found = service.search(
                    LOCAL,
                    workspace_id=WS,
                    query="crane container",
                    agent_id="hermes",
                    session_id="s",
                    top_k=10,
                    status=["all"],
                )
                assert found["count"] == 10

    assert run_threads(work, 6) == []
    assert loads == []
    listed = service.list_records(
        LOCAL, workspace_id=WS, agent_id="hermes", scope="session", limit=100, status=["all"]
    )
    assert listed["total"] == 36


def test_a_write_returns_only_after_its_neighbour_search_even_when_deduped(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The neighbour search reads the database in a worker thread; one still running after the call
    # returned met a connection the caller had closed (a segfault in CI's teardown).
    store(service, "The ferry leaves at noon")
    finished: list[bool] = []
    search = service.lifecycle._neighbours

    def slow(record: Any, vector: Any) -> Any:
        time.sleep(0.2)
        found = search(record, vector)
        finished.append(True)
        return found

    monkeypatch.setattr(service.lifecycle, "_neighbours", slow)
    again = store(service, "The ferry leaves at noon", scope="global")  # a new record: checked
    assert finished == [True] and not again["deduped"]
    finished.clear()
    twin = store(service, "The ferry leaves at noon", scope="session", session_id="s")
    assert finished == [True]
    twice = store(service, "The ferry leaves at noon", scope="session", session_id="s")
    assert twice["deduped"] and twice["id"] == twin["id"]
    assert finished == [True, True]


# -- several workers on one data directory (server mode keeps memory there for now, issue 16) ---------


@pytest.fixture
def workers(
    tmp_path: Path, embedder: LocalEmbedder, storage_engine: str, request: pytest.FixtureRequest
) -> Iterator[list[MemoryService]]:
    """Two memory services over one database, each with its own connections and caches (two workers)."""
    dbs: list[Any]
    if storage_engine == "postgresql":
        url = request.getfixturevalue("postgres").create_database()
        dbs = [PgDatabase(url, max_size=4) for _ in range(2)]
    else:
        dbs = [Database(tmp_path / "metronix.db", []) for _ in range(2)]
    try:
        yield [MemoryService(open_memory_store(db, embedder.dim), embedder) for db in dbs]
    finally:
        for db in dbs:
            db.close()


def test_two_workers_recovering_the_same_queued_checks_file_each_review_once(
    workers: list[MemoryService], embedder: LocalEmbedder
) -> None:
    old = store(workers[0], "User prefers dark mode")
    queued = [raw_record("User prefers light mode"), raw_record("User prefers dark mode at night")]
    for record in queued:  # committed with their checks, then the writing worker "died"
        vector = embedder.embed([record.content])[0]
        workers[0].store.insert(record, vector, extract_entities(record.content), True)
    assert len(workers[0].store.reviews.pending_checks()) == 2

    # Both workers start at once and both find the queued checks.
    errors = run_threads(lambda i: workers[i].run_pending_checks(), 2)

    assert errors == []
    assert workers[0].store.reviews.pending_checks() == workers[1].store.reviews.pending_checks() == []
    for worker in workers:
        entries = worker.review_list(LOCAL, WS)["entries"]
        keys = [(e["target_id"], e["related_record_id"], e["reason"]) for e in entries]
        assert len(keys) == len(set(keys)) >= 1  # each finding filed once, seen by both
        assert {key[0] for key in keys} <= {r.id for r in queued}
        assert all(key[1] in {old["id"], *(r.id for r in queued)} for key in keys)


def test_a_search_through_another_worker_returns_the_record_as_another_worker_last_wrote_it(
    workers: list[MemoryService],
) -> None:
    # Search hydrates its results from the attribute cache: a worker whose cache predates another
    # worker's update must reload it, never answer the old content, tags or score.
    writer, reader = workers
    first = store(writer, "The deploy window is Friday at noon", tags=["ops"])

    def found() -> dict[str, Any]:
        hits = reader.search(LOCAL, workspace_id=WS, query="deploy window", agent_id="hermes")["results"]
        return next(hit["record"] for hit in hits if hit["record"]["id"] == first["id"])

    assert found()["content"] == "The deploy window is Friday at noon"  # the reader's caches load
    writer.update(
        LOCAL, workspace_id=WS, record_id=first["id"], content="The deploy window is Monday at nine",
        tags=["ops", "release"], importance_score=0.9, caller_agent="hermes",
    )  # fmt: skip
    record = found()
    assert (record["content"], record["tags"], record["importance_score"]) == (
        "The deploy window is Monday at nine",
        ["ops", "release"],
        0.9,
    )
    stored = writer.get_record(LOCAL, WS, first["id"])  # read from the database
    assert record == {key: stored[key] for key in record}


def test_a_search_asks_the_store_for_its_first_stage_once(db: Database, embedder: LocalEmbedder) -> None:
    """Issue 29: BM25 and dense candidates in one store call; each later step one call (5 reads in all)."""
    inner = open_memory_store(db, embedder.dim)
    calls: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            value = getattr(inner, name)
            if not callable(value):
                return value

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return value(*args, **kwargs)

            return counted

    service = MemoryService(Counting(), embedder)  # type: ignore[arg-type]
    store(service, "The ferry to the island leaves at noon")
    store(service, "Tickets for the ferry are sold at the harbour", agent="other", scope="global")
    calls.clear()
    found = service.search(LOCAL, workspace_id=WS, query="when does the ferry leave", agent_id="hermes")
    assert found["count"] == 2
    reads = [c for c in calls if c not in ("snapshot", "touch")]
    assert reads.count("first_stage") == 1
    assert not {"keyword_search", "dense_search", "links"} & set(reads)
    assert len(reads) <= 5, reads
    service.close()
