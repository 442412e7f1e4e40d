"""B32, B44: the words heard up to a pause can say that the sentence goes on, or that a
question closed."""

from __future__ import annotations

import pytest

from spec.trailing_transcript import OPEN_ENDED_WORDS, closes_question, trails_off

# what Whisper tiny.en wrote for audio cut inside sentences, and for whole sentences
TRAILING = [
    "Is the cup on the left bigger than...",  # an ellipsis
    "I was wondering whether you -",  # a dash
    "I want to know,",  # a comma
    "Please look at the",  # an article
    "Can you check if?",  # a conjunction, whatever mark Whisper put after it
    "Red and",
    "Is this my",  # a possessive determiner
    '"Tell me about your"',  # inside quotes
]
FINISHED = [
    "Is this red or blue?",
    "Is the light on?",  # a preposition may end a sentence
    "I know what it is.",  # and so may an auxiliary
    "What is it made of?",
    "Thank you very much!",
    "Is it option A?",  # the letter, not the article
    "It says A.",
    '"Hello."',
]


@pytest.mark.parametrize("text", TRAILING)
def test_b32_words_that_cannot_close_a_sentence_trail_off(text: str) -> None:
    assert trails_off(text, punctuated=True)
    assert trails_off(text, punctuated=False)


@pytest.mark.parametrize("text", FINISHED)
def test_b32_a_closed_sentence_does_not_trail_off(text: str) -> None:
    assert not trails_off(text, punctuated=True)


def test_b32_a_missing_closing_mark_trails_off_only_from_an_asr_that_punctuates() -> None:
    assert trails_off("My favorite colors", punctuated=True)
    assert not trails_off("My favorite colors", punctuated=False)
    assert not trails_off("is this red or blue", punctuated=False)


@pytest.mark.parametrize("text", ["", "   ", '""'])
def test_b32_nothing_heard_is_no_evidence(text: str) -> None:
    assert not trails_off(text, punctuated=True)


def test_b32_the_open_ended_words_are_lower_case_single_words() -> None:
    assert all(w == w.lower() and w.isalpha() for w in OPEN_ENDED_WORDS)


# --- a question the words close (B44) ---------------------------------------------------

QUESTIONS = [
    "Is this more orange or more red?",
    "Is the screen black?",
    "What is it made of?",  # a preposition may end a question
    '"Is it red?"',  # inside quotes
    "He asked, \u201cis it red?\u201d",  # inside curly quotes
    "(Is it option A?)",  # inside brackets, the letter, not the article
    "Is it...?",  # a pause inside the question, closed after it
]
NOT_QUESTIONS = [
    "What your country can do for you.",  # Whisper closes fragments with a period too
    "Thank you very much!",
    "Is this red or blue",  # no mark: Whisper's cut-off phrase
    "Is it bigger than the?",  # a question mark after a word that cannot close it
    "Can you check if?",
    "Is it red or?",
    "Is it red? And",  # the question is not where the words stopped
    "Is it red?,",
]


@pytest.mark.parametrize("text", QUESTIONS)
def test_b44_words_that_end_with_a_question_mark_close_a_question(text: str) -> None:
    assert closes_question(text, punctuated=True)


@pytest.mark.parametrize("text", NOT_QUESTIONS)
def test_b44_a_period_an_open_word_or_no_mark_closes_no_question(text: str) -> None:
    assert not closes_question(text, punctuated=True)


@pytest.mark.parametrize("text", QUESTIONS)
def test_b44_an_asr_that_never_punctuates_closes_no_question(text: str) -> None:
    assert not closes_question(text, punctuated=False)


@pytest.mark.parametrize("text", ["", "   ", '""', "?", ' "?" '])
def test_b44_nothing_heard_closes_no_question(text: str) -> None:
    assert not closes_question(text, punctuated=True)


@pytest.mark.parametrize("text", QUESTIONS)
def test_b44_a_closed_question_never_trails_off(text: str) -> None:
    assert not trails_off(text, punctuated=True)
