"""The server's one sentence grammar (`spec.sentences`), held against the reference
model's independently written cutter."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spec.reference.media import _sentences
from spec.sentences import next_cut, split_sentences

_TEXT = st.text(alphabet="ab .!?,;:-\"')\n", max_size=60)


def test_a_first_piece_ends_at_a_clause_once_it_is_long_enough() -> None:
    text = "Well, the ball over there, it is red. Next."
    assert next_cut(text, first=False) == text.index("red.") + len("red. ")
    assert text[: next_cut(text, first=True)] == "Well, the ball over there, "


def test_closing_quotes_stay_with_their_sentence() -> None:
    assert split_sentences('He said "stop." Then   left!') == ['He said "stop."', "Then left!"]


@given(_TEXT)
def test_later_pieces_are_cut_where_the_reference_model_cuts(text: str) -> None:
    normalized = " ".join(text.split())
    done, rest = _sentences(normalized)
    assert split_sentences(text) == [*done, *([rest.strip()] if rest.strip() else [])]


@given(_TEXT)
def test_the_first_piece_is_cut_where_the_reference_model_cuts(text: str) -> None:
    done, _ = _sentences(text, first=True)
    end = next_cut(text, first=True)
    if end is None:
        assert not done
    else:
        assert done and text[:end].strip() == done[0]
