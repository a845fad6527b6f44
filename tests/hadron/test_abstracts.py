"""Node abstracts on the service layer: extractive by default, by an OpenAI-compatible LLM when one is
configured (a real HTTP server on 127.0.0.1), never for encrypted memories, and reported stale by
hadron_validate when the content changed behind their back."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.llm_server import llm_server
from hadron.world import HADRON_KEY, build_world, engine
from harness import TRIPTYCH

from triptych.core.config import Settings
from triptych.hadron.domain.abstract import MAX_CHARS, content_hash, extractive
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.selection import SessionState
from triptych.hadron.surface import Hadron

SPECS = "hrn:mem:acme.com:specs"
VAULT = "hrn:mem:acme.com:vault"
BODY = "# Deployments\n\nWe deploy on **Tuesdays**. Rollbacks need [two](http://x) approvals! Nobody deploys on Friday. Ever."


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> Path:
    build_world(tmp_path, database_url)
    return tmp_path


@pytest.fixture
def hadron(world: Path, database_url: str | None) -> Iterator[Hadron]:
    settings = Settings(data_dir=world)
    opened = Hadron.open(world / "hadron.db", settings=settings, key=HADRON_KEY, database_url=database_url)
    yield opened
    opened.close()


def alice(hadron: Hadron) -> tuple[HadronCaller, SessionState]:
    caller = HadronCaller("user", "alice", user=hadron.tenancy.user_by_handle("alice"))
    return caller, hadron.selections.session(caller, "s", None)


def write(hadron: Hadron, urn: str, **values: object) -> dict[str, object]:
    caller, state = alice(hadron)
    values.setdefault("name", urn.rsplit(":", 1)[-1])
    memory, node, _ = hadron.nodes.create(
        caller, state, urn, NodeFields(dict(values), frozenset(values)), None
    )
    return hadron.nodes.view(caller, memory, node)


def test_extractive_abstracts_are_the_leading_sentences_without_markup_and_bounded() -> None:
    assert extractive(BODY) == "Deployments. We deploy on Tuesdays. Rollbacks need two approvals!"
    assert extractive("One. Two. Three. Four.", max_sentences=2) == "One. Two."
    long = "word " * 200
    cut = extractive(long)
    assert len(cut) <= MAX_CHARS and cut.endswith("…")
    assert extractive("```\ncode only\n```\nAfter the code.") == "After the code."


def test_a_write_keeps_an_extractive_abstract_with_the_content_hash(hadron: Hadron) -> None:
    created = write(hadron, SPECS.replace("mem", "node") + ":deploy", content=BODY)
    abstract = created["abstract"]
    assert abstract == {
        "text": "Deployments. We deploy on Tuesdays. Rollbacks need two approvals!",
        "contentHash": content_hash(BODY),
        "method": "extractive",
        "updatedAt": abstract["updatedAt"],  # type: ignore[index]
        "stale": False,
    }
    caller, state = alice(hadron)
    hadron.nodes.merge_data(caller, state, SPECS.replace("mem", "node") + ":deploy", {"k": 1})
    updated = write(hadron, SPECS.replace("mem", "node") + ":deploy", content="Now we deploy daily.")
    assert updated["abstract"]["text"] == "Now we deploy daily."  # type: ignore[index]
    emptied = write(hadron, SPECS.replace("mem", "node") + ":deploy", content="")
    assert emptied["abstract"] is None


def test_encrypted_memories_get_no_abstract(hadron: Hadron) -> None:
    assert (
        write(hadron, VAULT.replace("mem", "node") + ":secret", content="The launch code is 1234.")[
            "abstract"
        ]
        is None
    )


def test_validate_reports_abstracts_whose_content_changed_behind_their_back(hadron: Hadron) -> None:
    urn = SPECS.replace("mem", "node") + ":drift"
    write(hadron, urn, content="Original text.")
    write(hadron, SPECS.replace("mem", "node") + ":steady", content="Steady text.")
    caller, _ = alice(hadron)
    assert hadron.validator.validate(caller, SPECS).stale_abstracts == []
    # Another writer (a sync, a restore, an older build) changes the content without the node service.
    with hadron.db.transaction() as tx:
        tx.execute("UPDATE nodes SET content = 'Rewritten elsewhere.' WHERE loc = 'drift'")
    report = hadron.validator.validate(caller, SPECS)
    assert [(i["urn"], i["abstract"]) for i in report.stale_abstracts] == [(urn, "Original text.")]
    assert report.stale_abstracts[0]["contentHash"] == content_hash("Rewritten elsewhere.")
    assert report.issues >= 1
    memory, node = hadron.nodes.find(caller, alice(hadron)[1], urn)
    assert hadron.nodes.view(caller, memory, node)["abstract"]["stale"] is True
    write(hadron, urn, content="Fixed again.")  # the next write through the service refreshes it
    assert hadron.validator.validate(caller, SPECS).stale_abstracts == []


def test_with_an_llm_configured_abstracts_come_from_it_and_fall_back_when_it_fails(
    world: Path, database_url: str | None
) -> None:
    with llm_server() as llm:
        settings = Settings(data_dir=world, llm_url=llm.url, llm_model="tiny")
        hadron = Hadron.open(world / "hadron.db", settings=settings, database_url=database_url)
        try:
            assert "llm-abstracts" in hadron.derived.capabilities()
            made = write(hadron, SPECS.replace("mem", "node") + ":llm", content=BODY)
            assert made["abstract"]["text"] == "Summary: # Deployments We deploy on."  # type: ignore[index]
            assert made["abstract"]["method"] == "llm:tiny"  # type: ignore[index]
            assert llm.requests[-1]["model"] == "tiny" and llm.requests[-1]["messages"][-1]["content"] == BODY
            assert llm.requests[-1]["path"] == "/v1/chat/completions"
            llm.failing = True
            fallback = write(
                hadron, SPECS.replace("mem", "node") + ":llm", content="The model is down. Still fine."
            )
            assert fallback["abstract"]["method"] == "extractive"  # type: ignore[index]
            assert fallback["abstract"]["text"] == "The model is down. Still fine."  # type: ignore[index]
        finally:
            hadron.close()


def test_the_cli_writes_missing_and_stale_abstracts_of_a_memory(
    world: Path, database_url: str | None
) -> None:
    hadron = Hadron.open(world / "hadron.db", settings=Settings(data_dir=world), database_url=database_url)
    try:
        write(hadron, SPECS.replace("mem", "node") + ":old", content="Written before abstracts existed.")
        write(hadron, SPECS.replace("mem", "node") + ":fresh", content="Already fine.")
        with hadron.db.transaction() as tx:  # an older build: no abstract, and one stale
            tx.execute("DELETE FROM node_abstracts WHERE node_id = (SELECT id FROM nodes WHERE loc = 'old')")
            tx.execute("UPDATE nodes SET content = 'Changed.' WHERE loc = 'fresh'")
        caller, _ = alice(hadron)
        assert len(hadron.validator.validate(caller, SPECS).stale_abstracts) == 1
    finally:
        hadron.close()
    done = subprocess.run(
        [TRIPTYCH, "hadron", "memory", "abstracts", SPECS, "--data-dir", str(world)],
        capture_output=True, text=True, check=True, env={**os.environ, "TRIPTYCH_LLM_URL": "", **engine(database_url)},
    )  # fmt: skip
    assert done.stdout.strip() == f"{SPECS}: 2 abstract(s) written (extractive) over 2 node(s)"
    assert "2 node(s) read, 2 abstract(s) written" in done.stderr
    hadron = Hadron.open(world / "hadron.db", settings=Settings(data_dir=world), database_url=database_url)
    try:
        caller, state = alice(hadron)
        assert hadron.validator.validate(caller, SPECS).stale_abstracts == []
        memory, node = hadron.nodes.find(caller, state, "hrn:node:acme.com:specs:old")
        assert (
            hadron.nodes.view(caller, memory, node)["abstract"]["text"] == "Written before abstracts existed."
        )
    finally:
        hadron.close()
    vault = subprocess.run(
        [TRIPTYCH, "hadron", "memory", "abstracts", VAULT, "--data-dir", str(world)],
        capture_output=True,
        text=True,
        env={**os.environ, **engine(database_url)},
    )
    assert vault.returncode == 0 and "encrypted" in vault.stdout
