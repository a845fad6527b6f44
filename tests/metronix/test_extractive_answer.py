"""The extractive answer (no LLM configured, or model triptych-extractive) quotes only sentences that share
a fair part of the question: the README's first example answered "who descales the espresso machine" with
the right sentence and then two about other machines."""

from __future__ import annotations

from triptych.metronix.answer import Passage, extractive_answer


def passage(number: int, content: str) -> Passage:
    return Passage(number, f"doc-{number}", None, None, content)


def test_sentences_sharing_far_fewer_question_terms_than_the_best_are_left_out() -> None:
    passages = [
        passage(1, "Maria descales the espresso machine every first Monday. Tom waters the plants."),
        passage(2, "The only machine to measure on has 2 cores shared with other sessions."),
        passage(3, "Each machine reaches the others through its base URL."),
    ]
    answer = extractive_answer("Who descales the espresso machine?", passages)
    assert answer == "Maria descales the espresso machine every first Monday. [1]"


def test_sentences_close_to_the_best_are_all_quoted_in_document_order() -> None:
    passages = [
        passage(1, "The office opens at 9. Lunch is served in the cafeteria at noon."),
        passage(2, "The cafeteria serves lunch from noon until two."),
    ]
    answer = extractive_answer("When does the cafeteria serve lunch?", passages)
    assert (
        answer
        == "Lunch is served in the cafeteria at noon. [1] The cafeteria serves lunch from noon until two. [2]"
    )


def test_at_most_three_sentences_and_a_question_matching_nothing_quotes_the_first_passage() -> None:
    many = [passage(n, f"Backups of volume {n} run nightly.") for n in range(1, 6)]
    assert extractive_answer("When do backups run?", many).count("Backups of volume") == 3
    assert (
        extractive_answer("Who descales the espresso machine?", many)
        == "Backups of volume 1 run nightly. [1]"
    )
