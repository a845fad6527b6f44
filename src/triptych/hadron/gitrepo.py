"""The ``git`` binary, as the Git-backed memories use it: fetch a source into a local cache, list its
tree, read blobs, and push a mirrored change.

Every command runs with a timeout, without a terminal prompt, without the system or user config
(``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``: a hook or credential helper of the host
never runs), and with the ``ext::`` transport off (it would run a command named in the URL). URLs go
after ``--`` so a URL can never be read as an option.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

TIMEOUT = float(os.environ.get("TRIPTYCH_GIT_TIMEOUT", "120"))
_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ASKPASS": "true",
    "LC_ALL": "C",
}
_SAFE = (
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "advice.detachedHead=false",
)
AUTHOR = ("Hadron", "hadron@localhost")


class GitError(RuntimeError):
    """A git command failed; the message is git's own last lines."""


def available() -> bool:
    return shutil.which("git") is not None


def run(args: Sequence[str], cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, **_ENV}
    try:
        done = subprocess.run(
            ["git", *_SAFE, *args],
            cwd=cwd,
            input=stdin,
            capture_output=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} did not finish within {TIMEOUT:.0f} s") from None
    except OSError as exc:
        raise GitError(f"git cannot run: {exc.strerror}") from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise GitError(f"git {args[0]} failed: " + (" / ".join(tail) or f"exit status {done.returncode}"))
    return done.stdout


def check_url(url: str) -> str:
    url = url.strip()
    if not url or url.startswith("-") or url.lower().startswith("ext::"):
        raise GitError(f"{url!r} is not a repository URL git may fetch")
    return url


def remote_head(url: str, branch: str | None) -> str:
    """The commit the source's branch (or default branch) points at, without fetching it."""
    out = run(["ls-remote", "--", check_url(url), f"refs/heads/{branch}" if branch else "HEAD"])
    line = out.decode().strip().splitlines()
    if not line:
        raise GitError(f"{url} has no {'branch ' + branch if branch else 'default branch'}")
    return line[0].split()[0]


def fetch(cache: Path, url: str, branch: str | None) -> str:
    """Fetch the source's branch into the bare ``cache`` repository; returns its commit SHA."""
    if not (cache / "HEAD").exists():
        cache.mkdir(parents=True, exist_ok=True)
        run(["init", "--quiet", "--bare", str(cache)])
    run(["fetch", "--quiet", "--no-tags", "--", check_url(url), branch or "HEAD"], cwd=cache)
    return run(["rev-parse", "--verify", "FETCH_HEAD^{commit}"], cwd=cache).decode().strip()


def tree(cache: Path, commit: str) -> dict[str, str]:
    """Every blob of the commit's tree: path -> blob SHA."""
    out = run(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=cache)
    files: dict[str, str] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob" and mode != "120000":  # symlinks are not followed
            files[path.decode("utf-8", errors="surrogateescape")] = sha
    return files


def blobs(cache: Path, shas: Iterable[str]) -> dict[str, bytes]:
    """The contents of the given blobs, read in one ``git cat-file --batch``."""
    wanted = list(dict.fromkeys(shas))
    if not wanted:
        return {}
    out = run(["cat-file", "--batch"], cwd=cache, stdin=("\n".join(wanted) + "\n").encode())
    found: dict[str, bytes] = {}
    pos = 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split()
        if len(header) != 3:
            raise GitError(f"blob {sha} is missing from the repository")
        size = int(header[2])
        found[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def push_change(
    work: Path, url: str, branch: str | None, writes: dict[str, str], removes: Sequence[str], message: str
) -> tuple[str, dict[str, str]] | None:
    """Commit ``writes`` (path -> text) and ``removes`` on the source's branch and push it. Returns the
    new commit and the written files' blob SHAs, or None when nothing changed."""
    url = check_url(url)
    if (work / ".git").exists():
        run(["fetch", "--quiet", "--no-tags", "--", url, branch or "HEAD"], cwd=work)
        run(["reset", "--quiet", "--hard", "FETCH_HEAD"], cwd=work)
    else:
        if work.exists():
            shutil.rmtree(work)
        run(["clone", "--quiet", *(["--branch", branch] if branch else []), "--", url, str(work)])
    target = branch or run(["symbolic-ref", "--short", "HEAD"], cwd=work).decode().strip()
    for path in removes:
        run(["rm", "--quiet", "--ignore-unmatch", "--", path], cwd=work)
    for path, text in writes.items():
        file = work / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        run(["add", "--", path], cwd=work)
    if not run(["status", "--porcelain"], cwd=work).strip():
        return None
    name, email = AUTHOR
    identity = ["-c", f"user.name={name}", "-c", f"user.email={email}"]
    run([*identity, "commit", "--quiet", "-m", message], cwd=work)
    run(["push", "--quiet", "--", url, f"HEAD:refs/heads/{target}"], cwd=work)
    commit = run(["rev-parse", "HEAD"], cwd=work).decode().strip()
    shas = {path: run(["rev-parse", f"HEAD:{path}"], cwd=work).decode().strip() for path in writes}
    return commit, shas
