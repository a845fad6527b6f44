"""Real Git repositories for the Git-backed memory tests: a bare origin (what a memory's source URL
names) and a working clone the test commits to and pushes from."""

from __future__ import annotations

import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "Tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_COMMITTER_NAME": "Tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "PATH": "/usr/bin:/bin:/usr/local/bin",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


class Repo:
    """``origin`` is bare (pushes land there, as on a Git host); ``work`` is where files are edited."""

    def __init__(self, root: Path) -> None:
        self.origin = root / "origin.git"
        self.work = root / "work"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(self.origin))
        git(root, "clone", "--quiet", str(self.origin), str(self.work))
        git(self.work, "checkout", "--quiet", "-B", "main")

    @property
    def url(self) -> str:
        return self.origin.as_uri()  # file://...

    def write(self, path: str, text: str) -> None:
        file = self.work / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)

    def remove(self, path: str) -> None:
        git(self.work, "rm", "--quiet", path)

    def move(self, old: str, new: str) -> None:
        (self.work / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.work, "mv", old, new)

    def commit(self, message: str = "change") -> str:
        git(self.work, "add", "-A")
        git(self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        git(self.work, "push", "--quiet", "origin", "main")
        return git(self.work, "rev-parse", "HEAD")

    def pull(self) -> None:
        git(self.work, "pull", "--quiet", "--ff-only", "origin", "main")

    def read(self, path: str) -> str | None:
        file = self.work / path
        return file.read_text() if file.exists() else None
