"""`triptych metergraph ...`: keys and app tokens are minted once, stored hashed, and work at once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from triptych.metergraph import cli
from triptych.metergraph.errors import ForbiddenError, Unauthenticated
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="triptych")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_minted_keys_work_and_only_their_hashes_are_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path)
    assert (
        run(
            "metergraph",
            "key",
            "create",
            "--workspace",
            "acme",
            "--role",
            "metadata",
            "--environment",
            "prod",
            "--data-dir",
            data,
        )
        == 0
    )
    agent_token = capsys.readouterr().out.strip()
    assert run("metergraph", "app-token", "--workspace", "acme", "--data-dir", data) == 0
    app_token = capsys.readouterr().out.strip()
    mg = Metergraph.open(tmp_path, load_metergraph_settings())
    try:
        principal = mg.keys.agent(agent_token)
        assert (principal.workspace, principal.role, principal.environments) == (
            "acme",
            "metadata",
            ("prod",),
        )
        assert mg.keys.app(app_token).workspace == "acme"
        with pytest.raises(ForbiddenError):
            mg.keys.agent(app_token)
        with pytest.raises(Unauthenticated):
            mg.keys.app(agent_token)
    finally:
        mg.close()
    raw = (tmp_path / "metergraph.db").read_bytes()
    assert agent_token.encode() not in raw and app_token.encode() not in raw


def test_keys_can_be_listed_and_revoked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path)
    run("metergraph", "key", "create", "--workspace", "w", "--role", "debug", "--data-dir", data)
    token = capsys.readouterr().out.strip()
    run("metergraph", "key", "list", "--data-dir", data)
    listed = capsys.readouterr().out
    assert token not in listed and '"role": "debug"' in listed
    key_id = listed.split('"id": "')[1].split('"')[0]
    assert run("metergraph", "key", "revoke", key_id, "--data-dir", data) == 0
    mg = Metergraph.open(tmp_path, load_metergraph_settings())
    try:
        with pytest.raises(Unauthenticated):
            mg.keys.agent(token)
    finally:
        mg.close()


def test_retention_and_route_config(tmp_path: Path) -> None:
    data = str(tmp_path)
    assert run("metergraph", "retain-content", "on", "--workspace", "w", "--data-dir", data) == 0
    assert (
        run(
            "metergraph",
            "route",
            "set",
            "support",
            "--workspace",
            "w",
            "--config",
            '{"model": "gpt-4o-mini", "constraints": {"max_cost_usd": 0.01}}',
            "--data-dir",
            data,
        )
        == 0
    )
    for bad in ("[1]", '{"constraints": ["max 1 cent"]}', "{"):
        assert (
            run("metergraph", "route", "set", "bad", "--workspace", "w", "--config", bad, "--data-dir", data)
            == 2
        )
    mg = Metergraph.open(tmp_path, load_metergraph_settings())
    try:
        assert mg.metadata.workspace("w")["retain_content"] == 1  # type: ignore[index]
        assert mg.metadata.route_config("w") == {"support": {"model": "gpt-4o-mini"}}
        [route] = mg.workspace.routes(AgentPrincipal("w", "metadata", "cli"))["routes"]
        assert (route["route"], route["constraints"]) == ("support", {"max_cost_usd": 0.01})
    finally:
        mg.close()


def test_static_tokens_are_accepted_by_hash(tmp_path: Path) -> None:
    settings = load_metergraph_settings(
        tokens="ingest-1,ingest-2", agent_tokens="read-1", static_workspace="ops"
    )
    mg = Metergraph.open(tmp_path, settings)
    try:
        assert mg.keys.app("ingest-2").workspace == "ops"
        assert mg.keys.agent("read-1").role == "metadata"
        with pytest.raises(Unauthenticated):
            mg.keys.app("ingest-3")
    finally:
        mg.close()


def test_an_unknown_role_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run("metergraph", "key", "create", "--workspace", "w", "--role", "admin", "--data-dir", str(tmp_path))


def test_classify_saves_the_workspaces_workloads_and_says_what_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    from mg_support import app, row

    now = datetime.now(UTC).isoformat()  # the command classifies up to the real clock
    mg = Metergraph.open(tmp_path, load_metergraph_settings())
    try:
        mg.ingest.ingest_rows(app("acme"), [row(ts=now), row(ts=now, route="other")], "sdk")
    finally:
        mg.close()
    assert (
        run("metergraph", "classify", "--workspace", "acme", "--days", "2", "--data-dir", str(tmp_path)) == 0
    )
    out = capsys.readouterr()
    assert (
        len(out.out.splitlines()) == 2 and "classified 2 calls" in out.err and "into 2 workloads" in out.err
    )
    mg = Metergraph.open(tmp_path, load_metergraph_settings())
    try:
        assert {w["route"] for w in mg.workloads.store.workloads("acme")} == {"support", "other"}
    finally:
        mg.close()
