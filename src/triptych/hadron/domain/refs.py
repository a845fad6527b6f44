"""The worklog's work-ref grammar: one canonical spelling per GitHub artifact.

Canonical forms (tool ``github``): ``owner/repo#371`` (pr, issue), ``owner/repo@a1b2c3d`` (commit,
7-40 hex, lowercased, kept at the given length), ``owner/repo:feat/x`` (branch, case kept),
``owner/repo`` (repo). Owner and repo are lowercased. Accepted besides: web URLs with or without
scheme or ``www.`` (query and fragment stripped, trailing segments after a number or SHA dropped,
``/pull/N`` and ``/issues/N`` both for pr and issue, everything after ``/tree/`` the branch, the path
percent-decoded: ``/tree/release%25rc`` is the branch ``release%rc``) and SSH
remotes (``git@github.com:o/r.git``). A bare number is refused: the server never guesses a repo.
Other tools have no grammar: their refs are stored trimmed and matched byte for byte.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote

WorkKind = Literal["pr", "issue", "commit", "branch", "repo"]
WORK_KINDS: tuple[WorkKind, ...] = ("pr", "issue", "commit", "branch", "repo")
GITHUB = "github"

_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]+"
_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
_CANONICAL = re.compile(rf"^(?P<owner>{_OWNER})/(?P<repo>{_REPO}?)(?P<rest>[#@:].*)?$")
_URL_HOST = re.compile(r"^(?:https?://)?(?:www\.)?github\.com/", re.IGNORECASE)
_SSH = re.compile(r"^(?:ssh://)?git@github\.com[:/]", re.IGNORECASE)
# Characters git refuses in a refname (git check-ref-format), plus whitespace.
_BAD_BRANCH = re.compile(r"[\s~^:?*\[\\]|\.\.|@\{|//|^/|/$|\.$|\.lock$|^-")


class WorkRefError(ValueError):
    """A ref that is not a spelling of the artifact kind (``WORK_REF_INVALID``)."""


def _repo_path(owner: str, repo: str) -> str:
    repo = repo.removesuffix(".git")
    if not re.fullmatch(_OWNER, owner) or not re.fullmatch(_REPO, repo) or repo in (".", ".."):
        raise WorkRefError(f"{owner}/{repo} is not an owner/repo pair")
    return f"{owner.lower()}/{repo.lower()}"


def _number(value: str) -> str:
    if not value.isdigit() or int(value) <= 0:
        raise WorkRefError(f"{value!r} is not a PR or issue number")
    return str(int(value))


def _sha(value: str) -> str:
    if not _SHA.fullmatch(value):
        raise WorkRefError(f"{value!r} is not a commit SHA (7-40 hex characters)")
    return value.lower()


def _branch(value: str) -> str:
    if not value or _BAD_BRANCH.search(value):
        raise WorkRefError(f"{value!r} is not a git branch name")
    return value


def _parse(ref: str) -> tuple[str, str]:
    """``(shape, canonical)`` where shape is ``number``, ``commit``, ``branch`` or ``repo``."""
    text = ref.strip()
    if not text:
        raise WorkRefError("the ref is empty")
    if re.fullmatch(r"#?\d+", text):
        raise WorkRefError(f"{text!r} is a bare number: pass owner/repo#{text.lstrip('#')}")
    if _SSH.match(text):
        path = _SSH.sub("", text).split("?")[0].split("#")[0].strip("/")
        parts = path.split("/")
        if len(parts) != 2:
            raise WorkRefError(f"{text!r} is not an SSH remote of one repository")
        return "repo", _repo_path(parts[0], parts[1])
    if _URL_HOST.match(text):
        path = _URL_HOST.sub("", text)
        path = re.split(r"[?#]", path, maxsplit=1)[0].strip("/")
        # A URL's path is percent-encoded: each segment is decoded (after the query and fragment are cut
        # off, so an encoded '#' or '?' stays part of a branch name), and the URL of a branch lands on
        # the same stored spelling as its short form.
        return _parse_url_path(text, [unquote(segment) for segment in path.split("/")])
    m = _CANONICAL.match(text)
    if m is None:
        raise WorkRefError(
            f"{text!r} is not owner/repo, owner/repo#N, owner/repo@sha, owner/repo:branch or a URL"
        )
    base = _repo_path(m["owner"], m["repo"])
    rest = m["rest"]
    if not rest:
        return "repo", base
    mark, value = rest[0], rest[1:]
    if mark == "#":
        return "number", f"{base}#{_number(value)}"
    if mark == "@":
        return "commit", f"{base}@{_sha(value)}"
    return "branch", f"{base}:{_branch(value)}"


def _parse_url_path(text: str, parts: list[str]) -> tuple[str, str]:
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise WorkRefError(f"{text!r} does not name a repository")
    base = _repo_path(parts[0], parts[1])
    if len(parts) == 2:
        return "repo", base
    section, tail = parts[2], parts[3:]
    if section in ("pull", "issues") and tail:
        return "number", f"{base}#{_number(tail[0])}"  # /files, /checks ... after the number are dropped
    if section == "commit" and tail:
        return "commit", f"{base}@{_sha(tail[0])}"
    if section == "tree" and tail:
        return "branch", f"{base}:{_branch('/'.join(tail))}"  # branch names contain slashes
    raise WorkRefError(f"{text!r} is not a pull, issue, commit, tree or repository URL")


_SHAPE_OF: dict[str, str] = {
    "pr": "number",
    "issue": "number",
    "commit": "commit",
    "branch": "branch",
    "repo": "repo",
}


def normalize(ref: str, kind: str) -> str:
    """The canonical GitHub spelling of ``ref`` as an artifact of ``kind``; ``WorkRefError`` otherwise."""
    shape, canonical = _parse(ref)
    if _SHAPE_OF.get(kind) != shape:
        raise WorkRefError(f"{ref.strip()!r} names a {shape.replace('number', 'pr or issue')}, not a {kind}")
    return canonical


def lookup_forms(ref: str, tool: str | None) -> list[str]:
    """The stored spellings a read's ``ref`` matches: canonical for github, trimmed for others, either
    with no tool. A read never fails on an unrecognised spelling; it matches nothing."""
    trimmed = ref.strip()
    forms: list[str] = []
    if tool in (None, GITHUB):
        try:
            forms.append(_parse(trimmed)[1])
        except WorkRefError:
            pass
    if tool != GITHUB and trimmed not in forms:
        forms.append(trimmed)
    return forms


def pr_number(canonical: str) -> int | None:
    """The number of a canonical ``owner/repo#N``."""
    _, _, number = canonical.rpartition("#")
    return int(number) if number.isdigit() else None
