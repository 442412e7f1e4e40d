"""JoyAI's serving rules around the model's decision (B30), in both stages that run the
weights: silence before the first question without asking the model, and an exact
repeat of the last spoken answer decided `listen` (never half spoken)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import httpx
from PIL import Image

from backends.base import (
    HistoryTurn,
    PromptContext,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.joyai.policy import previous_answer, silent_before_first_question, without_repeat
from backends.remote.config import StageConfig
from backends.remote.stages import RemoteVlm
from spec.session_config import DEFAULT_INSTRUCTIONS
from tests.backends.test_gpu_stages import FakeEngine, _collect, _vlm


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(out, format="JPEG")
    return out.getvalue()


JPEG = _jpeg()
CAMERA = PromptContext(system=DEFAULT_INSTRUCTIONS, frames=(JPEG,), time_s=1.0)
ANSWERED = PromptContext(
    system=DEFAULT_INSTRUCTIONS,
    history=(
        HistoryTurn("user", "Is the door open?"),
        HistoryTurn("assistant", "No,  it is shut."),
    ),
    frames=(JPEG,),
)


def test_b30_a_camera_tick_before_any_question_is_silent_without_running_the_model() -> None:
    engine = FakeEngine(["</response> I see a room."])
    items = anyio.run(_collect, _vlm(engine), VlmRequest("r1", CAMERA))
    assert items == [VlmDecisionResult("r1", VlmAction.LISTEN)]
    assert engine.submitted == []  # the model was never asked


def test_b30_a_question_an_earlier_one_or_the_sessions_instructions_lift_the_silence() -> None:
    assert silent_before_first_question(CAMERA)
    assert not silent_before_first_question(PromptContext(system="s", transcript="hi"))
    assert not silent_before_first_question(ANSWERED)
    # the question has left history, but the session was asked before
    assert not silent_before_first_question(PromptContext(system="x", asked_before=True))
    # a session's own instructions are its standing question
    assert not silent_before_first_question(PromptContext(system="Tell me when a cat comes."))
    # camera-only ticks and silences alone are no question
    ticks = PromptContext(
        system=DEFAULT_INSTRUCTIONS, history=(HistoryTurn("user", ""), HistoryTurn("assistant", ""))
    )
    assert silent_before_first_question(ticks)


def test_b30_an_exact_repeat_of_the_last_answer_is_a_listen_and_never_spoken() -> None:
    engine = FakeEngine(["</response> No, it", " is   shut.", "\n"])
    items = anyio.run(_collect, _vlm(engine), VlmRequest("r1", ANSWERED))
    assert items == [VlmDecisionResult("r1", VlmAction.LISTEN)]  # no delta reached the session
    assert len(engine.submitted) == 1


def test_b30_an_answer_that_only_starts_like_the_last_one_streams_in_full() -> None:
    engine = FakeEngine(["</response> No, it", " is shut.", " Someone", " opened it."])
    items = anyio.run(_collect, _vlm(engine), VlmRequest("r1", ANSWERED))
    text = "No, it is shut. Someone opened it."
    assert items[-1] == VlmDecisionResult("r1", VlmAction.SPEAK, text)
    assert "".join(i.text for i in items[:-1] if isinstance(i, VlmDelta)) == text


def test_b30_a_repeated_question_is_answered_again() -> None:
    asked = PromptContext(
        system=DEFAULT_INSTRUCTIONS, history=ANSWERED.history, transcript="Is the door open?"
    )
    assert previous_answer(asked) is None
    engine = FakeEngine(["</response> No, it is shut."])
    items = anyio.run(_collect, _vlm(engine), VlmRequest("r1", asked))
    assert items[-1] == VlmDecisionResult("r1", VlmAction.SPEAK, "No, it is shut.")


def test_b30_the_previous_answer_is_the_last_one_spoken_past_silent_ticks() -> None:
    later = PromptContext(
        system=DEFAULT_INSTRUCTIONS,
        history=(*ANSWERED.history, HistoryTurn("user", ""), HistoryTurn("assistant", "")),
    )
    assert previous_answer(later) == "No, it is shut."


async def _outputs(*items: VlmDelta | VlmDecisionResult) -> AsyncGenerator[Any, None]:
    for item in items:
        yield item


def test_b30_a_different_answer_releases_held_deltas_in_order() -> None:
    async def main() -> list[Any]:
        source = _outputs(
            VlmDelta("r1", "No, "),
            VlmDelta("r1", "it is open."),
            VlmDecisionResult("r1", VlmAction.SPEAK, "x"),
        )
        return [o async for o in without_repeat(source, "No, it is shut.")]

    assert anyio.run(main) == [
        VlmDelta("r1", "No, "),
        VlmDelta("r1", "it is open."),
        VlmDecisionResult("r1", VlmAction.SPEAK, "x"),
    ]


def _remote(handler: Any) -> RemoteVlm:
    config = StageConfig(stage="vlm", urls=("http://127.0.0.1:9",), model="joyai")
    return RemoteVlm(config, transport=httpx.MockTransport(handler))


def _sse(*pieces: str) -> bytes:
    chunks = [{"choices": [{"delta": {"content": p}}]} for p in pieces]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def test_b30_the_remote_stage_applies_both_rules() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/chat/completions"):
            body = _sse("</response> No, it is shut.")
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={})

    async def main(context: PromptContext) -> list[Any]:
        async with _remote(handler) as stage:
            return [o async for o in stage.generate(VlmRequest("r1", context))]

    assert anyio.run(main, CAMERA) == [VlmDecisionResult("r1", VlmAction.LISTEN)]
    assert not any(path.endswith("/chat/completions") for path in calls)
    assert anyio.run(main, ANSWERED) == [VlmDecisionResult("r1", VlmAction.LISTEN)]
    assert any(path.endswith("/chat/completions") for path in calls)
