"""Argument fields the Metronix tools share, declared once with the reference's defaults and limits.

An agent reads the tool's JSON Schema, not the prose: every default, range and enum the reference
states is a pydantic declaration here or in the tool's model, so what ``tools/list`` advertises is what
the arguments are checked against (decision 0060).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# The reference's default workspace. Omitting ``workspace_id`` still means what the reference says
# (the configured default locally, the token's first grant when auth is on): see ``requested_workspace``.
DEFAULT_WORKSPACE = "default"

Scope = Literal["global", "per_agent", "session"]
# The lifecycle statuses a filter may name, and the sentinel ``all`` (no filter).
StatusName = Literal[
    "active", "candidate", "stale", "superseded", "archived", "conflicted", "review_needed", "all"
]
ReviewReason = Literal["possible_duplicate", "possible_contradiction", "low_confidence_decision"]
# keep / archive / discard / merge_into:<record_id>
REVIEW_ACTION = r"^(keep|archive|discard|merge_into:.+)$"


def workspace_field(description: str = "Target workspace") -> Any:
    return Field(
        DEFAULT_WORKSPACE,
        description=f'{description} (default "default"; with auth on, omitted means your first granted workspace)',
    )


def status_field() -> Any:
    return Field(
        ["active"],
        min_length=1,
        description='Lifecycle statuses to include (default ["active"]); ["all"] disables the filter',
    )


def requested_workspace(args: BaseModel) -> str | None:
    """The workspace a call names, or None when it names none (the argument omitted or null): the
    service then picks the configured default, or the token's first grant when auth is on. A hosted
    caller that leaves the argument out is not sent to a workspace called "default" it was never granted."""
    value = getattr(args, "workspace_id", None)
    return value if "workspace_id" in args.model_fields_set and isinstance(value, str) else None
