"""``tasks.py`` makes its environments side by side in threads: none of them may hand another thread's
child a file it is still writing (stop 37's CI failed in setup on "Text file busy")."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tasks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("triptych_tasks", ROOT / "tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(os.name == "nt", reason="Windows venvs copy their launcher")
def test_venvs_made_in_threads_link_the_interpreter_and_each_runs_at_once(tmp_path: Path) -> None:
    tasks = _tasks()
    envs = [tmp_path / f"env{i}" for i in range(4)]

    def make_and_run(env: Path) -> str:
        tasks._new_venv(env, with_pip=False)
        # Run at once, as setup does, while the other threads are still making theirs and forking.
        done = subprocess.run(
            [str(env / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        prefixes = list(pool.map(make_and_run, envs))

    assert prefixes == [str(env) for env in envs]
    for env in envs:
        python = env / "bin" / "python"
        assert python.is_symlink(), f"{python} is a copy: another thread's fork can hold it open for writing"
        assert Path(os.path.realpath(python)).samefile(os.path.realpath(sys.executable))
