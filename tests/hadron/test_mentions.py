"""Mention extraction: prose mentions count, Markdown code and e-mail addresses do not."""

from __future__ import annotations

import pytest

from triptych.hadron.domain.mentions import extract, slug

CASES = [
    ("@iris please look", ["iris"]),
    ("ping @Iris and @dara.", ["iris", "dara"]),
    ("@mary-jane, can you?", ["mary-jane"]),
    ("(@sam) and @sam again", ["sam"]),
    ("mail sam@example.com", []),
    ("inline `@ada` is literal", []),
    ("``code with ` and @ada``, but @bo", ["bo"]),
    ("```\n@ada in a fence\n```\n@bo after", ["bo"]),
    ("~~~python\n@ada\n~~~", []),
    ("text\n\n    @ada indented code\n\n@bo", ["bo"]),
    (
        "- list item\n    @ada continuation is prose? no: an indented line after text is a paragraph continuation",
        ["ada"],
    ),
    ("no mentions here", []),
    ("trailing @", []),
]


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_mentions_are_extracted_from_prose_only(body: str, expected: list[str]) -> None:
    assert extract(body) == expected


def test_a_multiword_name_is_mentioned_by_its_slug() -> None:
    assert slug("Mary Jane") == "mary-jane"
    assert slug("  Dr. Who ") == "dr-who"
