from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from backends.gpu.sentences import SentenceCutter, split_sentences


def test_sentences_come_out_as_they_complete() -> None:
    cutter = SentenceCutter()
    assert cutter.feed("Hello there") == []
    assert cutter.feed(".") == []  # "." not yet followed by whitespace: maybe "3.5"
    assert cutter.feed(" How are you? I am") == ["Hello there.", "How are you?"]
    assert cutter.flush() == "I am"
    assert cutter.flush() == ""


def test_abbreviations_initials_and_decimals_do_not_cut() -> None:
    text = "Dr. Smith paid 3.50 dollars, e.g. for J. Doe. Then he left!"
    assert split_sentences(text) == [
        "Dr. Smith paid 3.50 dollars, e.g. for J. Doe.",
        "Then he left!",
    ]


def test_closing_quotes_stay_with_their_sentence() -> None:
    assert split_sentences('He said "stop." Then silence.') == ['He said "stop."', "Then silence."]


def test_cjk_full_stops_cut_immediately() -> None:
    assert split_sentences("你好。再见\uff01") == ["你好。", "再见\uff01"]


def test_long_runs_are_cut_at_a_comma_or_space() -> None:
    cutter = SentenceCutter(max_chars=20)
    out = cutter.feed("one two three four five six seven eight, nine ten")
    assert out and all(len(s) <= 20 for s in out)
    assert " ".join([*out, cutter.flush()]).split() == [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight,",
        "nine",
        "ten",
    ]


def test_min_chars_joins_short_sentences() -> None:
    cutter = SentenceCutter(min_chars=10)
    assert cutter.feed("Hi. Ok. This is longer. ") == ["Hi. Ok. This is longer."]


@given(st.text(alphabet="ab .!?,\n", max_size=80), st.lists(st.integers(0, 80), max_size=6))
def test_no_text_is_lost_however_it_is_streamed(text: str, cuts: list[int]) -> None:
    cuts = sorted(c for c in cuts if c <= len(text))
    cutter = SentenceCutter(max_chars=30)
    out: list[str] = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        out.extend(cutter.feed(text[a:b]))
    out.append(cutter.flush())
    assert "".join("".join(out).split()) == "".join(text.split())


def test_the_first_piece_may_end_at_a_clause_later_ones_are_sentences() -> None:
    cutter = SentenceCutter(first_clause_chars=12)
    assert cutter.feed("Yes, this cup") == []
    assert cutter.feed(" is red, bright red, and") == ["Yes, this cup is red,"]
    assert cutter.feed(" round, too. Ok") == ["bright red, and round, too."]
    assert cutter.flush() == "Ok"


def test_without_first_clause_chars_the_first_piece_is_a_sentence() -> None:
    cutter = SentenceCutter()
    text = "Yes, this cup is red, bright red. "
    assert cutter.feed(text) == [text.strip()]
