"""`triptych metergraph report import` and `triptych metergraph analysis cancel`, in-process."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from mg_support import agent
from report_support import artifact, raw

from triptych.metergraph import cli
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="triptych")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_import_prints_the_id_and_what_it_stored_then_a_reimport_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(raw(artifact()))
    data = str(tmp_path / "data")
    assert run("metergraph", "report", "import", str(path), "--workspace", "acme", "--data-dir", data) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "an-test-1" and "imported report 'an-test-1'" in out.err
    assert run("metergraph", "report", "import", str(path), "--workspace", "acme", "--data-dir", data) == 0
    assert "already imported" in capsys.readouterr().err
    mg = Metergraph.open(Path(data), load_metergraph_settings())
    try:
        assert [r["analysis_id"] for r in mg.reports.list_reports(agent("acme"))["reports"]] == ["an-test-1"]
    finally:
        mg.close()


def test_a_missing_file_and_an_unknown_run_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert (
        run(
            "metergraph",
            "report",
            "import",
            str(tmp_path / "nope.json"),
            "--workspace",
            "a",
            "--data-dir",
            data,
        )
        == 2
    )
    assert "cannot read" in capsys.readouterr().err
    assert run("metergraph", "analysis", "cancel", "no-such-run", "--workspace", "a", "--data-dir", data) == 1
    assert "no queued or running analysis run" in capsys.readouterr().err
