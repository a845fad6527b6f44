"""A pytest-xdist worker that crashes (SIGSEGV) under ``--dist loadfile`` fails the run, which ends,
instead of leaving the controller waiting forever (tests/crashed_workers.py, decision 0390). A real
pytest run over a folder of its own, with the hook the suite's conftest installs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PASSING = "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"
CRASHING = (
    "import os\nimport signal\n\n\ndef test_before():\n    pass\n\n\n"
    "def test_crash():\n    os.kill(os.getpid(), signal.SIGSEGV)\n\n\ndef test_after():\n    pass\n"
)


def test_a_worker_crash_under_loadfile_fails_the_run_and_the_run_ends(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport crashed_workers\n\n\n"
        "def pytest_configure(config):\n    crashed_workers.no_worker_restart(config)\n"
    )
    # A worker finishes a file, then crashes in the next: the case whose replacement waited forever.
    for name in ("a", "c", "d"):
        (tmp_path / f"test_{name}.py").write_text(PASSING)
    (tmp_path / "test_b.py").write_text(CRASHING)
    files = ["test_a.py", "test_b.py", "test_c.py", "test_d.py"]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "loadfile",
        *files,
    ]
    # The bound only keeps a regression from hanging this test too.
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert done.returncode == 1, done.stdout[-3000:]
    assert "crashed while running 'test_b.py::test_crash'" in done.stdout
    assert "crashed and worker restarting disabled" in done.stdout
