"""Triptych installed the documented way outside the repository: a wheel built from the checkout, installed into
a fresh virtual environment in another folder, serves there, bundled model included (issue 31, item 4).

This is exactly what README.md's "Install outside the repository" says to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
from harness import free_port

ROOT = Path(__file__).resolve().parent.parent


# Nothing of the checkout may leak in: with PYTHONPATH on its src/ (and the egg-info an editable install
# leaves there), pip would find triptych "already satisfied" and install nothing.
CLEAN = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
# PATH without this suite's own venv (an activated one would put its python3 first).
CLEAN_PATH = os.pathsep.join(
    d for d in CLEAN.get("PATH", "").split(os.pathsep) if d and Path(d) != Path(sys.prefix) / "bin"
)


def run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=CLEAN, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_wheel_installs_into_a_fresh_environment_elsewhere_and_serves(tmp_path: Path) -> None:
    wheels, elsewhere = tmp_path / "wheels", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", wheels, ROOT, cwd=tmp_path)
    (wheel,) = wheels.glob("triptych-*.whl")
    # The README's `python3 -m venv`: the machine's python3, which may be older than the one the suite runs
    # on (tasks.py prefers 3.12 for its coverage), so the oldest supported Python serves too.
    run(
        shutil.which("python3", path=CLEAN_PATH) or sys.executable,
        "-m",
        "venv",
        elsewhere / "venv",
        cwd=tmp_path,
    )
    python = elsewhere / "venv" / "bin" / "python"
    # The constraints file pins what the tests ran with; an operator may leave it out. --no-compile: pip's
    # ahead-of-time bytecode for every dependency is a third of this install's CPU (17.5 s user against
    # 26.4 s) and proves nothing about the install; Python compiles what it imports on first use.
    run(
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "-c",
        ROOT / "constraints.txt",
        f"{wheel}[clickhouse]",
        cwd=elsewhere,
    )
    triptych = elsewhere / "venv" / "bin" / "triptych"
    assert "triptych" in run(triptych, "--version", cwd=elsewhere)

    port = free_port()
    env = dict(CLEAN)
    env.update({"TRIPTYCH_DATA_DIR": str(elsewhere / "data"), "TRIPTYCH_PORT": str(port)})
    log = (elsewhere / "serve.log").open("wb")
    server = subprocess.Popen(
        [triptych, "serve"], cwd=elsewhere, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (elsewhere / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (elsewhere / "serve.log").read_text()
            time.sleep(0.2)
        # Store and find a passage: the bundled embedding model came with the wheel's dependencies.
        stored = httpx.post(
            f"http://127.0.0.1:{port}/api/v1/knowledge/store",
            json={"content": "The espresso machine is descaled every Friday by Priya.", "workspace_id": "w"},
            timeout=60,
        )
        assert stored.status_code in (200, 201), stored.text
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers={"X-Workspace-Id": "w"},
            json={
                "model": "triptych-extractive",
                "messages": [{"role": "user", "content": "Who descales it?"}],
            },
            timeout=60,
        )
        assert answer.status_code == 200 and "Priya" in answer.text, answer.text
        # The app pages' templates are package data: they must be in the wheel.
        page = httpx.get(f"http://127.0.0.1:{port}/app/sign-in", timeout=10)
        assert page.status_code == 200 and "<form" in page.text, page.text
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    import triptych

    assert not Path(triptych.__file__).is_relative_to(elsewhere)  # the test itself ran the checkout
