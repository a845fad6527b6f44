"""The tools' advertised enums are the service's own vocabularies (one list each, never two that drift)."""

from __future__ import annotations

import re
from typing import get_args

from triptych.metronix.arguments import REVIEW_ACTION, ReviewReason, Scope, StatusName
from triptych.metronix.memory import REVIEW_REASONS
from triptych.metronix.memory_model import SCOPES, STATUSES


def test_the_advertised_enums_are_the_services_vocabularies() -> None:
    assert get_args(Scope) == SCOPES
    assert get_args(StatusName) == (*STATUSES, "all")
    assert get_args(ReviewReason) == REVIEW_REASONS


def test_the_advertised_review_action_pattern_takes_the_four_actions_only() -> None:
    for action in ("keep", "archive", "discard", "merge_into:mem-1"):
        assert re.fullmatch(REVIEW_ACTION, action)
    for action in ("delete", "merge_into:", "keep ", "merge_into"):
        assert not re.fullmatch(REVIEW_ACTION, action)
