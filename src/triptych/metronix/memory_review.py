"""Agent-memory review: the queue of what freshness checks filed, and its resolution (keep, archive,
discard, merge) with its audit event. Split from ``memory.py`` (issue 29); ``MemoryService`` delegates
here.
"""

from __future__ import annotations

from typing import Any

from triptych.core.auth import Principal
from triptych.core.bounds import MAX_OFFSET
from triptych.metronix.access import require_write
from triptych.metronix.errors import DocumentNotFound, InvalidParams
from triptych.metronix.memory_model import Resolution
from triptych.metronix.memory_rules import NOTES_CAP, REVIEW_HINT, REVIEW_REASONS, MemoryContext


class MemoryReview:
    def __init__(self, ctx: MemoryContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    def review_list(
        self,
        principal: Principal,
        workspace_id: str | None,
        reason: str | None = None,
        record_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        if reason is not None and reason not in REVIEW_REASONS:
            raise InvalidParams(
                f"reason must be one of {', '.join(REVIEW_REASONS)}, got {reason!r}",
                details={"field": "reason"},
            )
        if not 1 <= limit <= 100:
            raise InvalidParams(f"limit must be between 1 and 100, got {limit}", details={"field": "limit"})
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidParams(f"offset must be 0 to {MAX_OFFSET:,}", details={"field": "offset"})
        entries, total = self.store.reviews.list_reviews(workspace, reason, record_id, limit, offset)
        return {
            "entries": [e.contract() for e in entries],
            "count": len(entries),
            "total": total,
            "limit": limit,
            "offset": offset,
        }

    def review_resolve(
        self,
        principal: Principal,
        workspace_id: str | None,
        review_id: str,
        action: str,
        notes: str | None = None,
        actor: str = "mcp_caller",
    ) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        superseded_by = None
        if action == "keep":
            status, state = "active", "keep_resolved"
        elif action == "archive":
            status, state = "archived", "archived_via_review"
        elif action == "discard":
            status, state = "archived", "discarded_via_review"
        elif action.startswith("merge_into:"):
            superseded_by = action.split(":", 1)[1].strip()
            if not superseded_by:
                raise InvalidParams(
                    "merge_into needs a record id: merge_into:<record_id>", details={"field": "action"}
                )
            status, state = "superseded", "merged_via_review"
        else:
            raise InvalidParams(
                f"unknown action {action!r}: use keep, archive, discard or merge_into:<record_id>",
                details={"field": "action"},
            )
        review = self.store.reviews.get_review(workspace, review_id)
        if review is None:
            raise DocumentNotFound(
                f"Review entry not found: {review_id}", hint=REVIEW_HINT, details={"review_id": review_id}
            )
        record = self.store.get(workspace, review.target_id)
        if record is None:
            raise DocumentNotFound(
                f"Memory record not found: {review.target_id}", details={"record_id": review.target_id}
            )
        if superseded_by is not None:
            if superseded_by == record.id:
                raise InvalidParams("a record cannot be merged into itself", details={"field": "action"})
            if self.store.get(workspace, superseded_by) is None:
                raise InvalidParams(
                    f"merge_into target {superseded_by!r} is not a record of this workspace",
                    details={"field": "action"},
                )
        capped = notes[:NOTES_CAP] if notes else None
        payload = {
            "review_id": review.id,
            "reason": review.reason,
            "action": action,
            "old_status": record.status,
            "new_status": status,
            "notes": capped,
            "related_record_id": review.related_record_id,
        }
        event_id = self.store.reviews.resolve_review(
            review, record, Resolution(status, state, superseded_by, actor, payload)
        )
        if event_id is None:
            raise DocumentNotFound(
                f"Review entry not found: {review_id}", hint=REVIEW_HINT, details={"review_id": review_id}
            )
        return {
            "success": True,
            "review_id": review.id,
            "target_id": record.id,
            "action": action,
            "old_status": record.status,
            "new_status": status,
            "superseded_by": superseded_by,
            "machine_event_id": event_id,
        }
