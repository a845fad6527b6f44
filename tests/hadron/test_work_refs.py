"""The worklog's GitHub ref grammar, with the contract's table and accepted inputs as cases."""

from __future__ import annotations

import pytest

from triptych.hadron.domain.refs import WorkRefError, lookup_forms, normalize, pr_number

CANONICAL = [
    ("pr", "owner/repo#371", "owner/repo#371"),
    ("issue", "owner/repo#371", "owner/repo#371"),
    ("commit", "owner/repo@a1b2c3d", "owner/repo@a1b2c3d"),
    ("branch", "owner/repo:feat/x", "owner/repo:feat/x"),
    ("repo", "owner/repo", "owner/repo"),
]

ACCEPTED = [
    # owner and repo lowercased; branch case kept; SHA lowercased at the length given
    ("pr", "Owner/Repo#371", "owner/repo#371"),
    ("branch", "Owner/Repo:Feat/X", "owner/repo:Feat/X"),
    ("commit", "o/r@A1B2C3D4E5", "o/r@a1b2c3d4e5"),
    ("commit", "o/r@" + "AB" * 20, "o/r@" + "ab" * 20),
    # web URLs, with or without scheme or www., query and fragment stripped
    ("pr", "https://github.com/o/r/pull/371", "o/r#371"),
    ("pr", "github.com/o/r/pull/371", "o/r#371"),
    ("pr", "www.github.com/o/r/pull/371", "o/r#371"),
    ("pr", "http://www.github.com/O/R/pull/371?w=1#discussion", "o/r#371"),
    ("issue", "https://github.com/o/r/issues/42", "o/r#42"),
    # /pull/N and /issues/N are each accepted for both kinds
    ("issue", "https://github.com/o/r/pull/371", "o/r#371"),
    ("pr", "https://github.com/o/r/issues/42", "o/r#42"),
    # trailing segments after a number or SHA are dropped
    ("pr", "https://github.com/o/r/pull/371/files", "o/r#371"),
    ("pr", "https://github.com/o/r/pull/371/checks?x=1", "o/r#371"),
    ("commit", "https://github.com/o/r/commit/a1b2c3d4/files", "o/r@a1b2c3d4"),
    # everything after /tree/ is the branch
    ("branch", "https://github.com/o/r/tree/feat/x", "o/r:feat/x"),
    ("branch", "https://github.com/o/r/tree/Release/2.0/hotfix", "o/r:Release/2.0/hotfix"),
    # repos: URLs, SSH remotes, .git stripped
    ("repo", "https://github.com/O/R", "o/r"),
    ("repo", "https://github.com/o/r.git", "o/r"),
    ("repo", "git@github.com:o/r.git", "o/r"),
    ("repo", "ssh://git@github.com/Owner/Repo.git", "owner/repo"),
    ("repo", "owner/my.repo", "owner/my.repo"),
    ("repo", "  owner/repo  ", "owner/repo"),
]

REFUSED = [
    ("pr", "371"),  # a bare number: the server never guesses a repo
    ("pr", "#371"),
    ("issue", "42"),
    ("commit", "o/r@abc12"),  # fewer than 7 hex characters
    ("commit", "o/r@xyz1234"),
    ("commit", "o/r@" + "a" * 41),
    ("pr", "o/r#0"),
    ("pr", "o/r"),  # a repo is not a PR
    ("repo", "o/r#3"),  # a PR is not a repo
    ("branch", "o/r:"),
    ("branch", "o/r:bad..name"),
    ("branch", "o/r:has space"),
    ("repo", "https://gitlab.com/o/r"),
    ("repo", "https://github.com/o"),
    ("pr", "https://github.com/o/r/pulls"),
    ("repo", ""),
    ("repo", "o/r/extra"),
]


@pytest.mark.parametrize(("kind", "ref", "canonical"), CANONICAL + ACCEPTED)
def test_each_accepted_spelling_normalizes_to_one_canonical_form(kind: str, ref: str, canonical: str) -> None:
    assert normalize(ref, kind) == canonical


@pytest.mark.parametrize(("kind", "ref", "canonical"), CANONICAL + ACCEPTED)
def test_normalization_is_idempotent(kind: str, ref: str, canonical: str) -> None:
    assert normalize(canonical, kind) == canonical


@pytest.mark.parametrize(("kind", "ref"), REFUSED)
def test_a_spelling_outside_the_grammar_is_refused(kind: str, ref: str) -> None:
    with pytest.raises(WorkRefError):
        normalize(ref, kind)


def test_a_read_matches_canonical_for_github_verbatim_for_other_tools_and_either_without_a_tool() -> None:
    url = "https://github.com/O/R/pull/7"
    assert lookup_forms(url, "github") == ["o/r#7"]
    assert lookup_forms(f" {url} ", "jira") == [url]
    assert lookup_forms(url, None) == ["o/r#7", url]
    assert lookup_forms("371", "github") == []  # never fails: matches nothing
    assert lookup_forms("PROJ-1", None) == ["PROJ-1"]


def test_the_pr_number_of_a_canonical_ref() -> None:
    assert pr_number("o/r#371") == 371
    assert pr_number("o/r") is None
