from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.base import VlmAction, VlmDecisionResult
from backends.joyai.actions import MARKERS, ActionStreamParser, parse_action


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("</silence>", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("  </silence> whatever follows", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("   \n ", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("</response>", VlmDecisionResult("r", VlmAction.LISTEN)),
        (
            "</response>  Hello   there,\tfriend. ",
            VlmDecisionResult("r", VlmAction.SPEAK, "Hello there, friend."),
        ),
        (
            "</response> First line.\nSecond line.",
            VlmDecisionResult("r", VlmAction.SPEAK, "First line."),
        ),
        (
            "</response>\n  Starts on the next line",
            VlmDecisionResult("r", VlmAction.SPEAK, "Starts on the next line"),
        ),
        (
            "</response> Let me check. </delegation> What is the weather in Paris?",
            VlmDecisionResult(
                "r", VlmAction.DELEGATE, "Let me check.", "What is the weather in Paris?"
            ),
        ),
        (
            "</response></delegation> look it up",
            VlmDecisionResult("r", VlmAction.DELEGATE, "", "look it up"),
        ),
        (
            "</response> One moment </delegation>",
            VlmDecisionResult("r", VlmAction.DELEGATE, "One moment", ""),
        ),
        ("No marker here.\nignored", VlmDecisionResult("r", VlmAction.SPEAK, "No marker here.")),
        ("</response> Hi<|im_end|>", VlmDecisionResult("r", VlmAction.SPEAK, "Hi")),
        ("<b>bold</b>", VlmDecisionResult("r", VlmAction.SPEAK, "<b>bold</b>")),
        # the delegation spelling without the slash (one reference prompt teaches it)
        (
            "</response> Let me check. <delegation> What is the weather in Paris?",
            VlmDecisionResult(
                "r", VlmAction.DELEGATE, "Let me check.", "What is the weather in Paris?"
            ),
        ),
        # the question wrapped the way the prompt shows it: `<the question>`
        (
            "</response> One moment. </delegation> <What brand is this laptop?>",
            VlmDecisionResult("r", VlmAction.DELEGATE, "One moment.", "What brand is this laptop?"),
        ),
        (
            "</response> One moment. <delegation> <question>Which year?</question>",
            VlmDecisionResult("r", VlmAction.DELEGATE, "One moment.", "Which year?"),
        ),
        (
            "</response> Asking. </delegation> Which year?\nmore reasoning",
            VlmDecisionResult("r", VlmAction.DELEGATE, "Asking.", "Which year?"),
        ),
        # a delegation without any response marker: the first line is the response
        (
            "Let me look. </delegation> how tall is it",
            VlmDecisionResult("r", VlmAction.DELEGATE, "Let me look.", "how tall is it"),
        ),
        # the first marker anywhere in the first line decides; text before it is dropped
        ("I see a cup.</silence>", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("Well, </silence> and </response> no", VlmDecisionResult("r", VlmAction.LISTEN)),
        ("Hmm. </response> A red cup.", VlmDecisionResult("r", VlmAction.SPEAK, "A red cup.")),
        ("Hmm </response> Yes. </silence>", VlmDecisionResult("r", VlmAction.SPEAK, "Yes.")),
        # a marker on a later line does not decide: the first line is a response
        ("A cup.\n</silence>", VlmDecisionResult("r", VlmAction.SPEAK, "A cup.")),
        # reasoning prefixes are dropped
        ("<think>is it new?</think></silence>", VlmDecisionResult("r", VlmAction.LISTEN)),
        (
            "<think>\nthe user asked\nabout it\n</think>\n</response> It is red.",
            VlmDecisionResult("r", VlmAction.SPEAK, "It is red."),
        ),
        ("reasoning</think> </response> Yes.", VlmDecisionResult("r", VlmAction.SPEAK, "Yes.")),
        ("<think>never closed </response> Yes.", VlmDecisionResult("r", VlmAction.LISTEN)),
        # no markup is ever spoken: tags end the spoken text
        ("</response> Yes.</think> more", VlmDecisionResult("r", VlmAction.SPEAK, "Yes.")),
        (
            "</response> Yes. <question>q</question>",
            VlmDecisionResult("r", VlmAction.SPEAK, "Yes."),
        ),
        ("</response> Cut off </resp", VlmDecisionResult("r", VlmAction.SPEAK, "Cut off")),
        ("</response> Cut <", VlmDecisionResult("r", VlmAction.SPEAK, "Cut")),
    ],
)
def test_parse_action(raw: str, expected: VlmDecisionResult) -> None:
    assert parse_action(raw, "r") == expected


def _stream(pieces: list[str]) -> tuple[list[str], VlmDecisionResult]:
    parser = ActionStreamParser("r")
    deltas = [d for d in (parser.feed(p) for p in pieces) if d]
    tail, decision = parser.finish()
    if tail:
        deltas.append(tail)
    return deltas, decision


def test_stream_emits_nothing_before_marker_is_known() -> None:
    parser = ActionStreamParser("r")
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
    assert decision == VlmDecisionResult(
        "r", VlmAction.DELEGATE, "Let me check.", "Weather in Paris?"
    )


def test_stream_holds_back_partial_marker_then_releases_it() -> None:
    deltas, decision = _stream(["</response> I <3 ", "you"])
    assert "".join(deltas) == "I <3 you" == decision.text


def test_feed_after_finish_is_an_error() -> None:
    parser = ActionStreamParser("r")
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
        "<delegation>",
        "<think>",
        "</think>",
        "<question>",
        "</question>",
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
    assert decision == parse_action(text, "r")
    spoken = decision.text if decision.action is not VlmAction.LISTEN else ""
    assert "".join(deltas) == spoken


#: every piece of markup the grammar knows: none may ever be spoken
_MARKUP = (*MARKERS, "<think>", "</think>", "<question>", "</question>", "<|im_end|>")


@given(st.lists(_ALPHABET, max_size=40), st.data())
def test_no_marker_text_ever_reaches_tts(tokens: list[str], data: st.DataObject) -> None:
    """Whatever the model writes and however it is chunked, the speakable text (every
    delta and the decision's text) holds no marker, tag or special token."""
    text = "".join(tokens)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    deltas, decision = _stream(pieces)
    for spoken in (*deltas, "".join(deltas), decision.text):
        assert not any(tag in spoken for tag in _MARKUP), (text, spoken)


_NOTE = st.lists(st.sampled_from(["ok", "one", "moment", ".", " ", "<3"]), max_size=6)
_QUESTION = st.lists(st.sampled_from(["QQ", "?", " ", "<question>", "</question>"]), max_size=6)


@given(
    st.sampled_from(["", "Hmm ", "<think>x</think>"]),
    _NOTE,
    st.sampled_from(["</delegation>", "<delegation>"]),
    _QUESTION,
    st.data(),
)
def test_a_delegated_question_never_reaches_tts(
    prefix: str, note: list[str], marker: str, question: list[str], data: st.DataObject
) -> None:
    text = f"{prefix}</response> {''.join(note)} {marker} {''.join(question)}"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    deltas, decision = _stream(pieces)
    assert decision.action is VlmAction.DELEGATE
    assert "QQ" not in "".join(deltas) and "QQ" not in decision.text
    if "QQ" in "".join(question).split("</question>")[0]:
        assert decision.question is not None and "QQ" in decision.question


@pytest.mark.parametrize(
    "pieces",
    [
        ["I see a cup.", "</silence>"],
        ["<think>", "maybe", "</think>", "</silence>"],
        ["Hmm ", "</resp", "onse> ", "Hi."],
    ],
)
def test_stream_speaks_nothing_before_a_marker_later_in_the_first_line(
    pieces: list[str],
) -> None:
    parser = ActionStreamParser("r")
    assert [parser.feed(p) for p in pieces[:-1]] == [""] * (len(pieces) - 1)


def test_stream_releases_unmarked_text_when_its_line_ends() -> None:
    parser = ActionStreamParser("r")
    assert parser.feed("A red cup") == ""
    assert parser.feed(".\nmore") == "A red cup."
    tail, decision = parser.finish()
    assert (tail, decision) == ("", VlmDecisionResult("r", VlmAction.SPEAK, "A red cup."))
