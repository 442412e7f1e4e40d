"""B35 through the runtime: a reply prepared during a pause runs on the backend, reaches
the client only after the turn ended, and is counted; one the speaker talked over is
dropped, its stage time counted as discarded."""

from __future__ import annotations

import pytest

from spec import events as ev
from tests.runtime.conftest import Harness, eventually, tone

pytestmark = pytest.mark.anyio

VAD = {"turn_detection": {"type": "server_vad"}}


async def _send(client, pcm: bytes) -> None:  # type: ignore[no-untyped-def]
    for at in range(0, len(pcm), 640):  # 20 ms appends
        await client.send(ev.InputAudioBufferAppend(audio=pcm[at : at + 640]))


def _count(harness: Harness, outcome: str) -> float:
    return harness.host.metrics.value("joyduplex_preemptive_responses_total", outcome=outcome)


async def test_b35_a_reply_prepared_in_the_pause_is_the_turns_reply(harness: Harness) -> None:
    harness.script.say_partial("what colour is this")
    client = await harness.connect(config=VAD)
    await _send(client, tone(400) + bytes(32 * 320))  # speech, then a 320 ms pause
    await client.until("conversation.item.input_audio_transcription.delta")
    # the reply is being prepared: the VLM and TTS run, the client sees none of it
    await eventually("the prepared reply's speech", lambda: harness.script.requests_of("tts"))
    assert "response.created" not in client.tags()
    await _send(client, bytes(32 * 400))  # the silence goes on: the turn ends
    done = await client.until("response.done")
    assert done.response.status == "completed"
    assert "response.output_audio.delta" in client.tags()
    assert len(harness.script.requests_of("vlm")) == 1  # the prepared request served
    assert (_count(harness, "started"), _count(harness, "adopted")) == (1, 1)
    assert _count(harness, "discarded") == 0


async def test_b35_speech_after_the_pause_drops_the_prepared_reply(harness: Harness) -> None:
    harness.script.say_partial("what colour", "what colour is this")
    client = await harness.connect(config=VAD)
    await _send(client, tone(400) + bytes(32 * 320))
    await client.until("conversation.item.input_audio_transcription.delta")
    await eventually("the prepared reply's VLM request", lambda: harness.script.requests_of("vlm"))
    await _send(client, tone(400) + bytes(32 * 800))  # more speech; the turn then ends
    done = await client.until("response.done")
    assert done.response.status == "completed"
    # the last pause's words may come before the turn ends (its reply is then prepared
    # and adopted) or after (then the turn's reply starts at its end): two VLM requests
    assert _count(harness, "discarded") == 1
    assert _count(harness, "started") - _count(harness, "adopted") == 1
    assert len(harness.script.requests_of("vlm")) == 2
    discarded_s = harness.host.metrics.value("joyduplex_preemptive_discarded_stage_seconds_total")
    assert discarded_s > 0  # its VLM ran (scripted latency) before it was dropped
