"""README.md's Quick start, run as a newcomer runs it: every shell and Python block after the server's start,
in order, against a real `triptych serve` (on its own port and data directory), with a `~/notes` folder
holding the note the example question asks about. A step the README leaves out, or an example that no
longer runs, fails here."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from harness import ROOT, TRIPTYCH, ServerProcess, cli_env

from triptych.core.embed import model_cache_dir

QUICK_START = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", QUICK_START, re.S)
# What each block run prints, in order (the setup block, `python3 tasks.py ...`, is what made this
# environment; the stdio host configuration is JSON).
EXPECTED = [
    "descales the espresso machine",  # kb import of ~/notes, then the OpenAI-compatible answer
    "Triptych keeps agents' context.",  # the Metronix client
    "created knowledge memory hrn:mem:acme.com:notes",  # Hadron's world
    "1. Welcome — hrn:node:acme.com:notes:welcome",  # the Hadron client
    '{"accepted":1,"ignored":0}',  # Metergraph ingest
    '"model":"gpt-4o-mini"',  # the Metergraph client, with its agent key
]


def runnable() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCKS if lang in ("sh", "python") and "tasks.py" not in body]


def test_the_quick_start_blocks_are_the_ones_checked() -> None:
    assert len(runnable()) == len(EXPECTED), [body.splitlines()[0] for _, body in runnable()]
    assert [lang for lang, _ in BLOCKS].count("json") == 1


def test_every_quick_start_block_runs_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "notes" / "chores.md").write_text(
        "# Office chores\n\nMaria descales the espresso machine every first Monday of the month.\n"
    )
    (tmp_path / "logs").mkdir()
    # A home of its own for ~/notes, keeping this machine's derived model (a new one costs seconds of CPU).
    env = {"HOME": str(home), "TRIPTYCH_MODEL_CACHE": str(model_cache_dir())}
    server = ServerProcess(tmp_path / "logs" / "data", env).start()
    env_file = tmp_path / "exports.sh"
    env_file.write_text("")
    try:
        for (lang, body), expected in zip(runnable(), EXPECTED, strict=True):
            body = body.replace("http://127.0.0.1:8000", server.url).replace(".venv/bin/triptych", TRIPTYCH)
            if lang == "python":
                script = tmp_path / "client.py"
                script.write_text(body)
                body = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
            # One shell per block, as a reader pastes it; what a block exports reaches the next ones.
            run = subprocess.run(
                ["bash", "-ec", f". {env_file}\n{body}\nexport -p > {env_file}"],
                env={**cli_env(server), "TRIPTYCH_DATA_DIR": str(server.data_dir)},
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp_path,
            )
            assert run.returncode == 0, f"{body}\n{run.stdout}\n{run.stderr}"
            assert expected in run.stdout, f"{body}\n{run.stdout}\n{run.stderr}"
    finally:
        server.stop()
