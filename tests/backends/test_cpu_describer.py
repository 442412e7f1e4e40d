"""The frame describer (a deterministic stand-in for the VLM): colours, brightness, motion,
camera-only turns driven by history, and prompt-context validation."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import pytest

from backends.base import (
    HistoryTurn,
    InvalidPromptContext,
    PromptContext,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.cpu.describer import FrameDescriber, Topic, topic_of, word_deltas

Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.anyio

RED = (220, 20, 30)
GREEN = (30, 180, 40)
BLUE = (20, 40, 220)


def jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (320, 240)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def png_with_square(x: int) -> bytes:
    """A white square on black at horizontal position `x` (for motion)."""
    image = Image.new("RGB", (160, 120), (0, 0, 0))
    image.paste((255, 255, 255), (x, 30, x + 60, 90))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
async def describer() -> AsyncIterator[FrameDescriber]:
    stage = FrameDescriber()
    async with stage:
        await stage.warmup()
        yield stage


async def ask(
    describer: FrameDescriber,
    transcript: str | None,
    *frames: bytes,
    history: tuple[HistoryTurn, ...] = (),
    max_tokens: int = 256,
) -> tuple[list[str], VlmDecisionResult]:
    context = PromptContext("You describe the camera.", history, transcript, frames)
    items = [item async for item in describer.generate(VlmRequest("v1", context, max_tokens))]
    *deltas, decision = items
    assert isinstance(decision, VlmDecisionResult)
    assert all(isinstance(d, VlmDelta) for d in deltas)
    texts = [d.text for d in deltas if isinstance(d, VlmDelta)]
    assert "".join(texts) == decision.text
    return texts, decision


@pytest.mark.parametrize(("colour", "name"), [(RED, "red"), (GREEN, "green"), (BLUE, "blue")])
async def test_what_colour_is_this_names_the_solid_colour(
    describer: FrameDescriber, colour: tuple[int, int, int], name: str
) -> None:
    deltas, decision = await ask(describer, "What colour is this?", jpeg(colour))
    assert decision.action is VlmAction.SPEAK
    assert decision.text == f"I see something {name}."
    assert len(deltas) == 4  # streamed word by word


@pytest.mark.parametrize(
    ("rgb", "name"),
    [
        ((255, 140, 0), "orange"),
        ((240, 220, 30), "yellow"),
        ((130, 40, 190), "purple"),
        ((240, 110, 200), "pink"),
        ((250, 250, 250), "white"),
        ((128, 128, 128), "grey"),
        ((10, 10, 10), "black"),
        ((120, 70, 20), "brown"),
        ((0, 200, 220), "blue"),
    ],
)
async def test_other_colour_names(
    describer: FrameDescriber, rgb: tuple[int, int, int], name: str
) -> None:
    _, decision = await ask(describer, "which color do you see", jpeg(rgb))
    assert decision.text == f"I see something {name}."


async def test_two_colours_are_both_named(describer: FrameDescriber) -> None:
    image = Image.new("RGB", (200, 100), RED)
    image.paste(BLUE, (130, 0, 200, 100))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    _, decision = await ask(describer, "what colour is it", buffer.getvalue())
    assert decision.text == "I see mostly red, with some blue."


async def test_brightness_question_answers_brightness(describer: FrameDescriber) -> None:
    _, bright = await ask(describer, "Is it bright in here?", jpeg((245, 245, 245)))
    _, dark = await ask(describer, "Is it bright in here?", jpeg((15, 15, 25)))
    assert "bright" in bright.text and "dark" not in bright.text
    assert "dark" in dark.text


async def test_motion_question_compares_the_last_two_frames(describer: FrameDescriber) -> None:
    _, moving = await ask(
        describer, "Is anything moving?", png_with_square(10), png_with_square(90)
    )
    _, still = await ask(describer, "Is anything moving?", png_with_square(10), png_with_square(10))
    assert moving.text == "I see movement."
    assert still.text == "Nothing is moving."


async def test_general_question_describes_colour_and_brightness(
    describer: FrameDescriber,
) -> None:
    _, decision = await ask(describer, "What do you see?", jpeg(GREEN))
    assert decision.action is VlmAction.SPEAK
    assert "green" in decision.text
    assert decision.text.count(".") == 2


async def test_question_without_any_frame_says_so(describer: FrameDescriber) -> None:
    _, decision = await ask(describer, "What colour is this?")
    assert decision.action is VlmAction.SPEAK
    assert "no camera frame" in decision.text


async def test_listens_without_question_and_without_change(describer: FrameDescriber) -> None:
    deltas, decision = await ask(describer, None, jpeg(RED), jpeg(RED))
    assert deltas == []
    assert decision == VlmDecisionResult("v1", VlmAction.LISTEN)
    assert (await ask(describer, None, jpeg(RED)))[1].action is VlmAction.LISTEN
    assert (await ask(describer, None))[1].action is VlmAction.LISTEN
    assert (await ask(describer, "  "))[1].action is VlmAction.LISTEN


async def test_camera_only_turn_with_a_new_colour_speaks_briefly(
    describer: FrameDescriber,
) -> None:
    _, decision = await ask(describer, None, jpeg(RED), jpeg(BLUE))
    assert decision.action is VlmAction.SPEAK
    assert decision.text == "Something blue came into view."


async def test_camera_only_turn_with_clear_motion_speaks(describer: FrameDescriber) -> None:
    _, decision = await ask(describer, None, png_with_square(10), png_with_square(90))
    assert decision.text == "I see movement."


async def test_spoken_colour_instruction_then_camera_only_turns_follow_the_colour(
    describer: FrameDescriber,
) -> None:
    """The upstream speech-profile case: a spoken instruction stays in history as user
    input, and later camera-only turns answer it whenever the colour changes."""
    history: tuple[HistoryTurn, ...] = ()
    _, first = await ask(describer, "What colour is this?", jpeg(RED))
    assert first.text == "I see something red."
    history = (HistoryTurn("user", "What colour is this?"), HistoryTurn("assistant", first.text))

    replies = []
    for colour in (RED, BLUE, BLUE, GREEN):
        _, decision = await ask(describer, None, jpeg(colour), history=history)
        replies.append(decision)
        if decision.action is VlmAction.SPEAK:
            history = (*history, HistoryTurn("assistant", decision.text))

    assert [d.action for d in replies] == [
        VlmAction.LISTEN,
        VlmAction.SPEAK,
        VlmAction.LISTEN,
        VlmAction.SPEAK,
    ]
    assert replies[1].text == "Now I see something blue."
    assert replies[3].text == "Now I see something green."


async def test_unanswered_colour_question_is_answered_by_a_camera_only_turn(
    describer: FrameDescriber,
) -> None:
    history = (HistoryTurn("user", "what color is the ball"),)
    _, decision = await ask(describer, None, jpeg(GREEN), history=history)
    assert decision.text == "I see something green."
    other = (HistoryTurn("user", "hello there"),)
    assert (await ask(describer, None, jpeg(GREEN), history=other))[1].action is VlmAction.LISTEN


async def test_undecodable_frame_is_invalid_prompt_context(describer: FrameDescriber) -> None:
    truncated = jpeg(RED)[:200]
    for frames in ((b"GIF89a...",), (jpeg(RED), truncated)):
        with pytest.raises(InvalidPromptContext, match=r"frames\[\d\]"):
            await ask(describer, "what colour", *frames)
    # the describer is unaffected: the next valid request succeeds
    assert (await ask(describer, "what colour", jpeg(RED)))[1].text == "I see something red."


async def test_only_the_last_two_frames_are_decoded(describer: FrameDescriber) -> None:
    _, decision = await ask(describer, "what colour", b"garbage", jpeg(RED), jpeg(BLUE))
    assert decision.text == "I see something blue."


async def test_max_tokens_truncates_the_reply(describer: FrameDescriber) -> None:
    deltas, decision = await ask(describer, "what colour", jpeg(RED), max_tokens=2)
    assert deltas == ["I", " see"]
    assert decision.text == "I see"


async def test_same_request_gets_the_same_reply(describer: FrameDescriber) -> None:
    replies = {(await ask(describer, "what do you see", jpeg(BLUE)))[1] for _ in range(3)}
    assert len(replies) == 1


def test_topics_and_word_deltas() -> None:
    assert topic_of("What color is this?") is Topic.COLOUR
    assert topic_of("is it too dark") is Topic.BRIGHTNESS
    assert topic_of("did it move") is Topic.MOTION
    assert topic_of("hello") is Topic.SCENE
    assert word_deltas("I see  red.") == ["I", " see", "  red."]


async def test_b37_it_accepts_tools_and_never_calls_one(describer: FrameDescriber) -> None:
    """The frame describer chooses no tools: it says so (`function_calling`, announced in
    `session.created`) and answers a request that offers tools as it answers any other."""
    from spec.function_tools import ToolChoice, validate_tools

    assert describer.function_calling is False
    tools = validate_tools([{"type": "function", "name": "get_weather"}])
    context = PromptContext("You describe the camera.", (), "what colour is this", (jpeg(RED),))
    request = VlmRequest("v1", context, 256, tools=tools, tool_choice=ToolChoice(mode="required"))
    items = [item async for item in describer.generate(request)]
    assert all(isinstance(i, VlmDelta | VlmDecisionResult) for i in items)
    *_, decision = items
    assert isinstance(decision, VlmDecisionResult) and "red" in decision.text
