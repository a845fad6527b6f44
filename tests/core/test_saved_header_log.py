"""A saved index file whose header no longer matches the database is reported by what changed, one line:
at a server's start, after another writer moved a workspace on, the log showed both whole headers."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from triptych.core.vector_files import matching_header


def test_an_out_of_date_header_is_logged_by_the_fields_that_changed(caplog: pytest.LogCaptureFixture) -> None:
    saved = {"magic": "triptych-keyword-index", "format": 1, "generation": 1, "count": 1, "max_id": 468}
    expected = {**saved, "generation": 2, "count": 2, "max_id": 469}
    source = io.BytesIO(json.dumps(saved).encode() + b"\n")
    with caplog.at_level(logging.INFO, logger="triptych.core.vector_files"):
        assert matching_header(source, Path("p1.keywords"), expected, "keyword index") is None
    assert caplog.messages == [
        "the saved keyword index p1.keywords is out of date (generation 1 -> 2, count 1 -> 2, max_id 468 -> 469):"
        " not used"
    ]
