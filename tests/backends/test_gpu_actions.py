from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.base import VlmAction, VlmDecision
from backends.joyai.actions import ActionStreamParser, parse_action


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("</silence>", VlmDecision(VlmAction.LISTEN)),
        ("  </silence> whatever follows", VlmDecision(VlmAction.LISTEN)),
        ("", VlmDecision(VlmAction.LISTEN)),
        ("   \n ", VlmDecision(VlmAction.LISTEN)),
        ("</response>", VlmDecision(VlmAction.LISTEN)),
        (
            "</response>  Hello   there,\tfriend. ",
            VlmDecision(VlmAction.SPEAK, "Hello there, friend."),
        ),
        ("</response> First line.\nSecond line.", VlmDecision(VlmAction.SPEAK, "First line.")),
        (
            "</response>\n  Starts on the next line",
            VlmDecision(VlmAction.SPEAK, "Starts on the next line"),
        ),
        (
            "</response> Let me check. </delegation> What is the weather in Paris?",
            VlmDecision(VlmAction.DELEGATE, "Let me check.", "What is the weather in Paris?"),
        ),
        (
            "</response></delegation> look it up",
            VlmDecision(VlmAction.DELEGATE, "", "look it up"),
        ),
        (
            "</response> One moment </delegation>",
            VlmDecision(VlmAction.DELEGATE, "One moment", None),
        ),
        ("No marker here.\nignored", VlmDecision(VlmAction.SPEAK, "No marker here.")),
        ("</response> Hi<|im_end|>", VlmDecision(VlmAction.SPEAK, "Hi")),
        ("<b>bold</b>", VlmDecision(VlmAction.SPEAK, "<b>bold</b>")),
    ],
)
def test_parse_action(raw: str, expected: VlmDecision) -> None:
    assert parse_action(raw) == expected


def _stream(pieces: list[str]) -> tuple[list[str], VlmDecision]:
    parser = ActionStreamParser()
    deltas = [d for d in (parser.feed(p) for p in pieces) if d]
    tail, decision = parser.finish()
    if tail:
        deltas.append(tail)
    return deltas, decision


def test_stream_emits_nothing_before_marker_is_known() -> None:
    parser = ActionStreamParser()
    assert parser.feed("</resp") == ""
    assert parser.feed("onse> Hel") == "Hel"
    assert parser.feed("lo ") == "lo"  # trailing space held until a word follows
    assert parser.feed("world") == " world"


def test_stream_silence_emits_nothing() -> None:
    deltas, decision = _stream(["</sil", "ence>", " I should not be said"])
    assert deltas == []
    assert decision.action is VlmAction.LISTEN


def test_stream_delegate_speaks_only_note() -> None:
    deltas, decision = _stream(
        ["</response> Let me ", "check. </dele", "gation> Weather in ", "Paris?"]
    )
    assert "".join(deltas) == "Let me check."
    assert decision == VlmDecision(VlmAction.DELEGATE, "Let me check.", "Weather in Paris?")


def test_stream_holds_back_partial_marker_then_releases_it() -> None:
    deltas, decision = _stream(["</response> I <3 ", "you"])
    assert "".join(deltas) == "I <3 you" == decision.text


def test_feed_after_finish_is_an_error() -> None:
    parser = ActionStreamParser()
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("x")


_ALPHABET = st.sampled_from(
    [
        "</silence>",
        "</response>",
        "</delegation>",
        "<",
        "/",
        ">",
        "\n",
        " ",
        "a",
        "b",
        ".",
        "<|im_end|>",
    ]
)


@given(st.lists(_ALPHABET, max_size=30), st.data())
def test_stream_deltas_always_add_up_to_the_decision(
    tokens: list[str], data: st.DataObject
) -> None:
    text = "".join(tokens)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    deltas, decision = _stream(pieces)
    assert decision == parse_action(text)
    spoken = decision.text if decision.action is not VlmAction.LISTEN else ""
    assert "".join(deltas) == spoken
