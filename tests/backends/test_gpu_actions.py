from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.base import VlmAction, VlmDecision
from backends.joyai.actions import MARKERS, ActionStreamParser, parse_action


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
        # the delegation spelling without the slash (one reference prompt teaches it)
        (
            "</response> Let me check. <delegation> What is the weather in Paris?",
            VlmDecision(VlmAction.DELEGATE, "Let me check.", "What is the weather in Paris?"),
        ),
        # the question wrapped the way the prompt shows it: `<the question>`
        (
            "</response> One moment. </delegation> <What brand is this laptop?>",
            VlmDecision(VlmAction.DELEGATE, "One moment.", "What brand is this laptop?"),
        ),
        (
            "</response> One moment. <delegation> <question>Which year?</question>",
            VlmDecision(VlmAction.DELEGATE, "One moment.", "Which year?"),
        ),
        (
            "</response> Asking. </delegation> Which year?\nmore reasoning",
            VlmDecision(VlmAction.DELEGATE, "Asking.", "Which year?"),
        ),
        # a delegation without any response marker: the first line is the response
        (
            "Let me look. </delegation> how tall is it",
            VlmDecision(VlmAction.DELEGATE, "Let me look.", "how tall is it"),
        ),
        # the first marker anywhere in the first line decides; text before it is dropped
        ("I see a cup.</silence>", VlmDecision(VlmAction.LISTEN)),
        ("Well, </silence> and </response> no", VlmDecision(VlmAction.LISTEN)),
        ("Hmm. </response> A red cup.", VlmDecision(VlmAction.SPEAK, "A red cup.")),
        ("Hmm </response> Yes. </silence>", VlmDecision(VlmAction.SPEAK, "Yes.")),
        # a marker on a later line does not decide: the first line is a response
        ("A cup.\n</silence>", VlmDecision(VlmAction.SPEAK, "A cup.")),
        # reasoning prefixes are dropped
        ("<think>is it new?</think></silence>", VlmDecision(VlmAction.LISTEN)),
        (
            "<think>\nthe user asked\nabout it\n</think>\n</response> It is red.",
            VlmDecision(VlmAction.SPEAK, "It is red."),
        ),
        ("reasoning</think> </response> Yes.", VlmDecision(VlmAction.SPEAK, "Yes.")),
        ("<think>never closed </response> Yes.", VlmDecision(VlmAction.LISTEN)),
        # no markup is ever spoken: tags end the spoken text
        ("</response> Yes.</think> more", VlmDecision(VlmAction.SPEAK, "Yes.")),
        ("</response> Yes. <question>q</question>", VlmDecision(VlmAction.SPEAK, "Yes.")),
        ("</response> Cut off </resp", VlmDecision(VlmAction.SPEAK, "Cut off")),
        ("</response> Cut <", VlmDecision(VlmAction.SPEAK, "Cut")),
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
    assert decision == parse_action(text)
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
    parser = ActionStreamParser()
    assert [parser.feed(p) for p in pieces[:-1]] == [""] * (len(pieces) - 1)


def test_stream_releases_unmarked_text_when_its_line_ends() -> None:
    parser = ActionStreamParser()
    assert parser.feed("A red cup") == ""
    assert parser.feed(".\nmore") == "A red cup."
    tail, decision = parser.finish()
    assert (tail, decision) == ("", VlmDecision(VlmAction.SPEAK, "A red cup."))
