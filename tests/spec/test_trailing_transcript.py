"""B32: the words heard up to a pause can say that the sentence goes on."""

from __future__ import annotations

import pytest

from spec.trailing_transcript import OPEN_ENDED_WORDS, trails_off

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
