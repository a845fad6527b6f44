"""Chunking: sentences stay whole, chunks respect the token budget and follow paragraphs."""

from __future__ import annotations

import pytest

from triptych.metronix.chunking import chunk_text, estimate_tokens, split_sentences


def _sentences(count: int, words: int = 8, tag: str = "s") -> list[str]:
    """``count`` distinct sentences of ``words`` words each, every one ending in a period."""
    return [
        " ".join([f"{tag.capitalize()}{i}"] + [f"word{i}x{j}" for j in range(1, words)]) + "."
        for i in range(count)
    ]


def test_estimate_tokens_is_zero_for_blank_text_and_grows_with_words() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n\t ") == 0
    assert estimate_tokens("one") == 2
    assert estimate_tokens("one two three four five six seven eight nine ten") == 14


@pytest.mark.parametrize("text", ["", "   ", "\n\n\n", " \t \n \n "])
def test_blank_text_has_no_chunks(text: str) -> None:
    assert chunk_text(text) == []


def test_short_text_is_one_chunk_with_whitespace_collapsed() -> None:
    chunks = chunk_text("  First   sentence here.\nSecond\tsentence there.  ")

    assert len(chunks) == 1
    assert chunks[0].ordinal == 0
    assert chunks[0].text == "First sentence here. Second sentence there."


def test_chunk_ordinals_count_up_from_zero_in_document_order() -> None:
    sentences = _sentences(40)
    chunks = chunk_text(" ".join(sentences), max_tokens=30)

    assert len(chunks) > 3
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    # Document order: the first chunk starts with the first sentence, the last ends with the last.
    assert chunks[0].text.startswith(sentences[0])
    assert chunks[-1].text.endswith(sentences[-1])


def test_chunks_never_exceed_the_token_budget_and_lose_no_words() -> None:
    paragraphs = ["\n".join(_sentences(7, words=6, tag=f"p{p}")) for p in range(6)]
    text = "\n\n".join(paragraphs)

    chunks = chunk_text(text, max_tokens=40)

    assert all(estimate_tokens(c.text) <= 40 for c in chunks)
    assert " ".join(c.text for c in chunks).split() == text.split()


def test_sentences_are_never_split_across_chunks() -> None:
    sentences = _sentences(30, words=9)
    chunks = chunk_text(" ".join(sentences), max_tokens=50)

    assert len(chunks) > 1
    rebuilt: list[str] = []
    for chunk in chunks:
        # Each chunk is a run of whole sentences.
        rebuilt.extend(split_sentences(chunk.text))
    assert rebuilt == sentences


def test_paragraph_break_ends_a_chunk_that_is_already_half_full() -> None:
    first = " ".join(_sentences(3, words=8, tag="a"))  # about 33 tokens: more than half of 60
    second = " ".join(_sentences(1, words=8, tag="b"))  # would still fit in the same chunk

    chunks = chunk_text(f"{first}\n\n{second}", max_tokens=60)

    assert [c.text for c in chunks] == [first, second]


def test_small_paragraphs_are_packed_into_one_chunk() -> None:
    paragraphs = [f"Paragraph {i} is short." for i in range(4)]

    chunks = chunk_text("\n\n".join(paragraphs), max_tokens=60)

    assert [c.text for c in chunks] == [" ".join(paragraphs)]


def test_single_overlong_sentence_is_cut_at_word_boundaries() -> None:
    words = [f"Token{i}" for i in range(120)]
    long_sentence = " ".join(words) + "."
    text = f"Intro sentence. {long_sentence} Outro sentence."

    chunks = chunk_text(text, max_tokens=20)

    assert chunks[0].text == "Intro sentence."
    assert chunks[-1].text == "Outro sentence."
    middle = chunks[1:-1]
    assert len(middle) >= 120 * 1.3 // 20
    assert all(estimate_tokens(c.text) <= 20 for c in middle)
    # Cut between words, never inside one.
    assert " ".join(c.text for c in middle).split() == long_sentence.split()


@pytest.mark.parametrize(
    "max_tokens",
    [
        10,
        20,
        50,
        200,
        13,
        26,
    ],
)
def test_pieces_of_a_cut_sentence_respect_the_token_budget(max_tokens: int) -> None:
    sentence = " ".join(f"w{i}" for i in range(300))

    chunks = chunk_text(sentence, max_tokens=max_tokens)

    assert len(chunks) > 1
    assert max(estimate_tokens(c.text) for c in chunks) <= max_tokens


def test_abbreviations_and_initials_do_not_end_a_sentence() -> None:
    text = "Use a tool, e.g. A hammer. Dr. Smith and J. Doe et al. Wrote it. See fig. 3 for details."

    assert split_sentences(text) == [
        "Use a tool, e.g. A hammer.",
        "Dr. Smith and J. Doe et al. Wrote it.",
        "See fig. 3 for details.",
    ]


def test_sentence_ends_only_before_a_capital_digit_or_opening_quote() -> None:
    text = 'Version 2.0 is out. it still counts as one. He said "Stop!" Then he left? 42 people stayed.'

    assert split_sentences(text) == [
        "Version 2.0 is out. it still counts as one.",
        'He said "Stop!"',
        "Then he left?",
        "42 people stayed.",
    ]


def test_text_without_terminal_punctuation_is_one_sentence() -> None:
    assert split_sentences("a heading without a period") == ["a heading without a period"]
    assert split_sentences("") == []
