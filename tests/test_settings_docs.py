"""The settings the server reads and the tables the README and docs give cannot drift apart: every setting is
documented by its variable name, every documented variable exists, and a documented default is the model's.
``triptych config`` prints the same rows (tested here too)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from harness import TRIPTYCH

from triptych.cli import settings_sections

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *(ROOT / "docs" / name for name in ("metronix.md", "hadron.md", "metergraph.md"))]
PREFIXES = ("TRIPTYCH_", "MG_", "METRONIX_")
# Variables the docs name that are no server setting: set for the tests and tools, or another program's.
NOT_SETTINGS = {
    "TRIPTYCH_SHARED_DIR", "TRIPTYCH_REQUIRE_SHARED", "TRIPTYCH_TEST_WORKERS",  # the test suite's
    "TRIPTYCH_WORKER_FD", "TRIPTYCH_WORKER_READY_FD", "TRIPTYCH_WORKER_INDEX", "TRIPTYCH_SUPERVISOR_PID",
}  # fmt: skip
_NAME = re.compile(r"`((?:TRIPTYCH|MG|METRONIX)_[A-Z0-9_]+|AUTH_ENABLED|\.\.\._[A-Z0-9_]+)`")


def documented_names() -> set[str]:
    """Every variable the docs name in backticks; ``..._X_Y`` after ``A_B_C_D`` in a line is ``A_B_X_Y``."""
    names: set[str] = set()
    for path in DOCS:
        for line in path.read_text().splitlines():
            previous = None
            for name in _NAME.findall(line):
                if name.startswith("...") and previous:
                    tail = name[4:].split("_")
                    name = "_".join(previous.split("_")[: -len(tail)] + tail)
                names.add(name)
                previous = name
    return names


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(PREFIXES):
            monkeypatch.delenv(name)


def all_settings() -> dict[str, tuple[str, str]]:
    """name -> (value, source) for every variable of every setting."""
    return {
        name: (row.value, row.source) for _, rows in settings_sections() for row in rows for name in row.names
    }


def test_every_setting_is_documented_by_its_name() -> None:
    missing = sorted(set(all_settings()) - documented_names())
    assert not missing, f"settings no document names (README.md Configuration, docs/*.md): {missing}"


def test_every_documented_variable_is_a_setting() -> None:
    unknown = sorted(
        n for n in documented_names() - set(all_settings()) - NOT_SETTINGS if not n.endswith("_")
    )
    # A family named with a wildcard (MG_INCIDENT_*) is checked through its members above.
    assert not unknown, f"the docs name variables the server does not read: {unknown}"


def _same(documented: str, actual: str) -> bool:
    try:
        return float(documented) == float(actual)
    except ValueError:
        return documented.lower() == actual.lower()


def test_documented_defaults_are_the_models_defaults(clean_environment: None) -> None:
    settings = all_settings()
    row = re.compile(r"^\| `([A-Z0-9_]+)`(?: \(or `[A-Z0-9_]+`\))? \| `([^`]+)` \|")
    checked, wrong = 0, []
    for path in DOCS:
        for line in path.read_text().splitlines():
            match = row.match(line)
            # "—": unset, the default is derived (from the data directory, the port): the docs say how.
            if match and match.group(1) in settings and settings[match.group(1)][0] != "—":
                checked += 1
                value, _ = settings[match.group(1)]
                if not _same(match.group(2), value):
                    wrong.append(f"{path.name}: {match.group(1)} documented {match.group(2)!r}, is {value!r}")
    assert checked >= 20 and not wrong, wrong


def test_config_prints_each_setting_its_value_and_source(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TRIPTYCH_PORT": "8123",
        "TRIPTYCH_JWT_SECRET": "do-not-print-me",
        "TRIPTYCH_DATABASE_URL": "postgresql://user:hunter2@db.example:5432/triptych",
        "MG_TOKENS": "secret-ingest-token",
    }
    env.pop("TRIPTYCH_LOG_LEVEL", None)
    done = subprocess.run(
        [TRIPTYCH, "config", "--data-dir", str(tmp_path)], env=env, capture_output=True, text=True, check=True
    )
    lines = {line.split()[0].rstrip(","): line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert "8123" in lines["TRIPTYCH_PORT"] and "environment (TRIPTYCH_PORT)" in lines["TRIPTYCH_PORT"]
    assert str(tmp_path) in lines["TRIPTYCH_DATA_DIR"] and lines["TRIPTYCH_DATA_DIR"].endswith("flag")
    assert lines["TRIPTYCH_LOG_LEVEL"].split()[1:] == ["info", "default"]
    assert "do-not-print-me" not in done.stdout and "hunter2" not in done.stdout
    assert "secret-ingest-token" not in done.stdout
    assert "postgresql://user:***@db.example:5432/triptych" in lines["TRIPTYCH_DATABASE_URL"]
    # The values start in one column just past the longest documented name, not past the longest alias list.
    assert lines["TRIPTYCH_PORT"].index("8123") == lines["TRIPTYCH_LOG_LEVEL"].index("info") < 60
    # A whole number of megabytes reads as the README writes it.
    assert lines["TRIPTYCH_INDEX_MEMORY_MB"].split()[1:] == ["2048", "default"]
