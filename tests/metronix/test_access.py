"""Metronix's rules for callers (``metronix.access``): which workspace a call acts on, who may write,
and the ``X-Agent-Id`` rule. (The token itself is tested in tests/core/test_auth.py.)"""

from __future__ import annotations

import json

import pytest

from triptych.core.auth import Principal, local_principal
from triptych.core.errors import Forbidden
from triptych.metronix.access import require_write, resolve_workspace, valid_agent_id
from triptych.metronix.errors import InvalidParams, WorkspaceNotFound

# -- Principal and resolve_workspace ----------------------------------------------------------


def test_omitted_workspace_selects_the_first_granted_one() -> None:
    editor = Principal(user="bob", role="editor", workspace_ids=("team-b", "team-a"))

    assert resolve_workspace(editor, None, "default") == "team-b"
    assert resolve_workspace(editor, "", "default") == "team-b"


def test_omitted_workspace_is_the_default_for_local_and_unrestricted_admin() -> None:
    assert resolve_workspace(local_principal(), None, "default") == "default"
    assert resolve_workspace(Principal(user="root", role="admin"), None, "main") == "main"
    # A local principal ignores any grants: it acts on the configured default.
    local = Principal(user="local", role="admin", workspace_ids=("x",), local=True)
    assert resolve_workspace(local, None, "default") == "default"


def test_granted_workspace_is_returned_unchanged() -> None:
    editor = Principal(user="bob", role="editor", workspace_ids=("team-a", "team:b@corp.example"))

    assert resolve_workspace(editor, "team:b@corp.example", "default") == "team:b@corp.example"


def test_local_and_unrestricted_admin_may_use_any_valid_workspace() -> None:
    assert resolve_workspace(local_principal(), "anything", "default") == "anything"
    assert resolve_workspace(Principal(user="root", role="admin"), "elsewhere", "d") == "elsewhere"


def test_admin_with_grants_is_limited_to_them() -> None:
    admin = Principal(user="root", role="admin", workspace_ids=("team-a",))

    with pytest.raises(WorkspaceNotFound):
        resolve_workspace(admin, "team-b", "default")


def test_ungranted_workspace_is_refused_as_workspace_not_found() -> None:
    viewer = Principal(user="eve", role="viewer", workspace_ids=("team-a",))

    with pytest.raises(WorkspaceNotFound) as refused:
        resolve_workspace(viewer, "team-b", "default")

    assert refused.value.code == "WORKSPACE_NOT_FOUND"
    assert refused.value.http_status == 403


def test_refusal_of_an_ungranted_workspace_reads_the_same_for_any_workspace() -> None:
    editor = Principal(user="bob", role="editor", workspace_ids=("team-a",))
    refusals = []
    for workspace in ("team-b", "no-such-workspace"):
        with pytest.raises(WorkspaceNotFound) as refused:
            resolve_workspace(editor, workspace, "default")
        # Only the echoed id differs; nothing hints at whether the workspace exists.
        refusals.append(json.dumps(refused.value.to_dict()).replace(workspace, "<id>"))

    assert refusals[0] == refusals[1]


def test_editor_without_grants_falls_back_to_a_default_it_may_not_use() -> None:
    editor = Principal(user="bob", role="editor")

    with pytest.raises(WorkspaceNotFound):
        resolve_workspace(editor, None, "default")


@pytest.mark.parametrize(
    "workspace",
    ["has space", "a/b", "semi;colon", "x" * 129, "é", "quote'", "tab\tinside"],
)
def test_invalid_workspace_id_is_refused_as_invalid_params(workspace: str) -> None:
    with pytest.raises(InvalidParams) as refused:
        resolve_workspace(local_principal(), workspace, "default")

    assert refused.value.details == {"field": "workspace_id"}


def test_invalid_workspace_id_is_refused_before_the_grant_check() -> None:
    viewer = Principal(user="eve", role="viewer", workspace_ids=("team-a",))

    with pytest.raises(InvalidParams):
        resolve_workspace(viewer, "not granted/and invalid", "default")


def test_longest_valid_workspace_id_is_accepted() -> None:
    assert resolve_workspace(local_principal(), "w" * 128, "default") == "w" * 128


def test_workspace_id_with_a_trailing_newline_is_invalid() -> None:
    with pytest.raises(InvalidParams):
        resolve_workspace(local_principal(), "default\n", "default")


# -- roles ---------------------------------------------------------------------------


def test_viewer_may_not_write() -> None:
    viewer = Principal(user="eve", role="viewer", workspace_ids=("team-a",))

    assert not viewer.can_write
    with pytest.raises(Forbidden) as refused:
        require_write(viewer)
    assert refused.value.code == "WORKSPACE_NOT_FOUND"
    assert refused.value.details == {"reason": "FORBIDDEN", "role": "viewer"}


@pytest.mark.parametrize(
    "principal",
    [
        Principal(user="e", role="editor", workspace_ids=("a",)),
        Principal(user="a", role="admin"),
        local_principal(),
    ],
    ids=["editor", "admin", "local"],
)
def test_editors_admins_and_local_may_write(principal: Principal) -> None:
    require_write(principal)

    assert principal.can_write


# -- agent ids ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "agent-1", "Claude_Code.v2", "A" * 64, "0.9_-x"])
def test_agent_id_of_allowed_characters_is_kept(value: str) -> None:
    assert valid_agent_id(value) == value


def test_agent_id_surrounding_whitespace_is_trimmed() -> None:
    assert valid_agent_id("  agent-7\n") == "agent-7"


@pytest.mark.parametrize(
    "value", [None, "", "   ", "A" * 65, "has space", "slash/", "colon:x", "ümlaut", "new\nline", "a@b"]
)
def test_agent_id_outside_the_rules_is_dropped(value: str | None) -> None:
    assert valid_agent_id(value) is None


# -- bearer_token -----------------------------------------------------------------------
