"""The official hadron CLI's work-ref normalisation cases (hadron-cli ``internal/cmd/team/refnorm_test.go``,
39 cases at its commit 1ef4d6b), as the server sees them.

The CLI normalises a ref before sending it, so each case is restated as the request that reaches the
server: when the CLI qualifies a bare number, SHA or branch name with the session's recorded repo, the
server receives the CLI's canonical output and must store it unchanged (normalisation is idempotent);
every other case is sent as the user typed it. A case the CLI refuses must be refused by the server
too: a bare number, SHA or branch the CLI refuses for want of a repo is refused by the server for the
contract's own reason (it never guesses a repo), so every case agrees and none needs an exception.
"""

from __future__ import annotations

import pytest

from triptych.hadron.domain.refs import WorkRefError, normalize

REFUSED = None

# (what the case checks, kind, the ref that reaches the server, what is stored or REFUSED)
CASES: list[tuple[str, str, str, str | None]] = [
    # numbered artifacts
    ("bare PR number qualified by the CLI", "pr", "hadron-memory/hadron-cli#371", "hadron-memory/hadron-cli#371"),
    ("bare PR number with no repo to qualify it", "pr", "371", REFUSED),
    ("owner/repo#N", "pr", "hadron-memory/hadron-cli#371", "hadron-memory/hadron-cli#371"),
    ("a full ref ignores the session's repo", "pr", "acme/widgets#7", "acme/widgets#7"),
    ("pull URL", "pr", "https://github.com/hadron-memory/hadron-cli/pull/371", "hadron-memory/hadron-cli#371"),
    ("pull URL with /files after the number", "pr", "https://github.com/hadron-memory/hadron-cli/pull/371/files",
     "hadron-memory/hadron-cli#371"),
    ("pull URL with no scheme", "pr", "github.com/hadron-memory/hadron-cli/pull/371", "hadron-memory/hadron-cli#371"),
    ("owner and repo fold to lower case", "pr", "Acme/Widgets#7", "acme/widgets#7"),
    ("URL owner and repo fold to lower case", "pr", "https://github.com/Acme/Widgets/pull/7", "acme/widgets#7"),
    ("the session's repo folds too", "pr", "acme/widgets#7", "acme/widgets#7"),
    ("commit owner/repo folds, SHA lowered", "commit", "Acme/Widgets@DEADBEEF00", "acme/widgets@deadbeef00"),
    ("issues URL", "issue", "https://github.com/hadron-memory/hadron-cli/issues/362", "hadron-memory/hadron-cli#362"),
    ("issue owner/repo#N", "issue", "acme/widgets#12", "acme/widgets#12"),
    ("number zero (the CLI refuses it even with a repo)", "pr", "0", REFUSED),
    ("a negative number", "pr", "a/b#-3", REFUSED),
    ("not a ref at all", "pr", "not-a-ref", REFUSED),
    ("a commit URL is not a PR", "pr", "https://github.com/a/b/commit/abcdef1", REFUSED),
    ("a repo without an owner", "pr", "just-a-repo#5", REFUSED),
    # commits
    ("bare SHA qualified by the CLI", "commit", "hadron-memory/hadron-cli@93200b2", "hadron-memory/hadron-cli@93200b2"),
    ("bare SHA with no repo to qualify it", "commit", "93200b2", REFUSED),
    ("owner/repo@sha", "commit", "acme/widgets@deadbeef00", "acme/widgets@deadbeef00"),
    ("upper-case SHA lowered", "commit", "acme/widgets@DEADBEEF00", "acme/widgets@deadbeef00"),
    ("commit URL with a 40-digit SHA", "commit",
     "https://github.com/acme/widgets/commit/93200b296ec1e9ae287082744b68fc42efb3277a",
     "acme/widgets@93200b296ec1e9ae287082744b68fc42efb3277a"),
    ("a SHA of six digits (the CLI refuses it even with a repo)", "commit", "abc123", REFUSED),
    ("a SHA that is not hex", "commit", "a/b@notahexsha", REFUSED),
    # branches
    ("owner/repo:branch", "branch", "acme/widgets:main", "acme/widgets:main"),
    ("the repo folds, the branch keeps its case", "branch", "Acme/Widgets:Feature-X", "acme/widgets:Feature-X"),
    ("bare branch qualified by the CLI", "branch", "hadron-memory/hadron-cli:team-chat",
     "hadron-memory/hadron-cli:team-chat"),
    ("bare branch with a slash qualified by the CLI", "branch", "a/b:feature/foo", "a/b:feature/foo"),
    ("bare branch with no repo to qualify it", "branch", "main", REFUSED),
    ("tree URL: everything after /tree/ is the branch", "branch",
     "https://github.com/acme/widgets/tree/feature/foo", "acme/widgets:feature/foo"),
    ("a space is not in a branch name", "branch", "a/b:not a branch", REFUSED),
    ("a '#' is legal in a branch name", "branch", "a/b:release#1", "a/b:release#1"),
    ("an '@' is legal in a branch name", "branch", "a/b:user@feature", "a/b:user@feature"),
    ("a tree URL is percent-decoded", "branch", "https://github.com/acme/widgets/tree/release%25candidate",
     "acme/widgets:release%candidate"),
    ("a short form's '%' is kept as written", "branch", "acme/widgets:release%candidate",
     "acme/widgets:release%candidate"),
    ("a tree URL's fragment is dropped", "branch", "https://github.com/acme/widgets/tree/main#readme",
     "acme/widgets:main"),
    ("a pull URL's query is dropped", "pr", "https://github.com/acme/widgets/pull/7?diff=split", "acme/widgets#7"),
    ("a kind the worklog does not have", "tag", "a/b:v1", REFUSED),
]  # fmt: skip


def test_the_table_holds_every_case_of_the_cli() -> None:
    assert len(CASES) == 39
    assert len({case[0] for case in CASES}) == 39


@pytest.mark.parametrize(("case", "kind", "ref", "stored"), CASES, ids=[c[0] for c in CASES])
def test_the_server_stores_what_the_cli_computes(case: str, kind: str, ref: str, stored: str | None) -> None:
    if stored is REFUSED:
        with pytest.raises(WorkRefError):
            normalize(ref, kind)
    else:
        assert normalize(ref, kind) == stored
        assert normalize(stored, kind) == stored  # what is stored reads back as itself


def test_a_percent_encoded_url_and_its_short_form_are_one_artifact() -> None:
    for kind, url, short in [
        ("branch", "https://github.com/acme/gadgets/tree/release%25rc", "acme/gadgets:release%rc"),
        ("branch", "github.com/acme/gadgets/tree/feat%2Fx%23y", "acme/gadgets:feat/x#y"),
        ("branch", "https://github.com/acme/gadgets/tree/caf%C3%A9", "acme/gadgets:café"),
        ("pr", "https://github.com/acme/gad%67ets/pull/%37", "acme/gadgets#7"),
    ]:
        assert normalize(url, kind) == normalize(short, kind) == short
