"""core/regex: callers' patterns run on RE2, linear in the text, and anything RE2 refuses says why."""

from __future__ import annotations

import pytest

from triptych.core.regex import LinearPattern, RegexRefused


def test_catastrophic_backtracking_pattern_answers_without_backtracking() -> None:
    # Python's re needs 2^n steps here (n = 100,000 would never finish); RE2 is linear.
    assert LinearPattern(r"(a+)+$").search("a" * 100_000 + "!") is False
    assert LinearPattern(r"(x+x+)+y").search("x" * 100_000 + "y") is True


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1", "escape"), (r"(?=a)", "perl operator"), (r"(?<!a)b", "perl operator"), ("(", "missing")],
)
def test_backtracking_only_syntax_is_refused_with_the_engine_reason(pattern: str, reason: str) -> None:
    with pytest.raises(RegexRefused, match=reason):
        LinearPattern(pattern)


def test_pattern_that_compiles_too_large_is_refused() -> None:
    with pytest.raises(RegexRefused):
        LinearPattern(r"((((((((((a{1000}){1000}){1000}))))))))")
    with pytest.raises(RegexRefused, match="MiB"):
        LinearPattern(r"\pL{1000}\pL{1000}\pL{1000}\pL{1000}\pL{1000}")


def test_lone_surrogates_are_refused_in_a_pattern_and_never_match_in_text() -> None:
    with pytest.raises(RegexRefused, match="surrogate"):
        LinearPattern("\ud800")
    assert LinearPattern("a").search("a\udc00") is False
    assert LinearPattern("a").count("a\udc00a") == 0


def test_unicode_flags_and_counting_work_as_in_python() -> None:
    pattern = LinearPattern(r"(?i)h\pLllo")
    assert pattern.search("say HÉLLO") and pattern.count("hello, héllo, hallo") == 3
    assert LinearPattern("^$").search("") is True and LinearPattern("a").search(None) is False
