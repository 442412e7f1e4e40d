"""The embedded CPU backend end to end: a real uvicorn on 127.0.0.1, the Python client,
speech made offline with Piper and camera frames made with Pillow.

One server (Silero VAD, Whisper tiny.en, the frame describer, hibari) serves every test
in this module. Audio goes out in 20 ms chunks in real time; camera frames ride on
appends. Reply audio is checked against hibari's own duration for the reply text.
"""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from clients.duplex_client import DuplexClient, ResponseResult
from spec.events import (
    InputAudioBufferCommitted,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionCompleted,
    ResponseListen,
)
from tests.backends.cpu_audio import (
    CpuServer,
    quiet_noise,
    reply_seconds,
    require_cpu_extra,
    shared_cpu_server,
    silence,
    solid_jpeg,
    speech,
    to_pcm16,
)
from tests.model_margins import expect_within

pytestmark = pytest.mark.slow

QUESTION = "What colour is this?"
RED, GREEN, BLUE, YELLOW = (220, 20, 30), (20, 200, 40), (30, 40, 220), (240, 220, 20)
#: reply audio vs hibari's duration of the same text
# hibari's durations do not depend on its noise, so a reply matches the reference to a
# sample (Piper's duration noise moved its replies 0.97-1.09 of theirs). 0.4 catches a
# lost sentence or a wrong output rate (24 against 16 kHz is 0.5 off) and still holds if
# the server's voice becomes Piper again.
DURATION_TOLERANCE = 0.4
TURN_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def server() -> CpuServer:
    require_cpu_extra()
    return shared_cpu_server()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower().replace("color", "colour"))


def _of(result: ResponseResult, kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in result.events if isinstance(e, kind)]


def _assert_spoken_reply(result: ResponseResult, colour: str) -> None:
    assert result.status == "completed", result
    assert result.errors == []
    assert colour in _words(result.transcript), result.transcript
    expected = reply_seconds(result.transcript) * 1000
    assert result.audio, "the reply has no audio"
    assert len(result.audio) % 2 == 0  # whole pcm16 samples
    expect_within(
        result.audio_ms() / expected - 1,
        DURATION_TOLERANCE,
        f"hibari's {result.audio_ms():.0f} ms for {result.transcript!r} against {expected:.0f} ms",
        "ratio",
    )


def _padded_question() -> bytes:
    """The question with 0.3 s of silence before and 1 s after (VAD ends the turn)."""
    return to_pcm16(np.concatenate([silence(0.3), speech(QUESTION), silence(1.0)]))


def _assert_question_transcribed(result: ResponseResult) -> None:
    [completed] = _of(result, InputAudioTranscriptionCompleted)
    assert {"what", "colour", "is", "this"} <= set(_words(completed.transcript)), completed
    assert result.user_transcripts == [completed.transcript]


def test_spoken_question_over_red_then_camera_turns_over_blue_and_green(
    server: CpuServer,
) -> None:
    async def run() -> list[ResponseResult]:
        results = []
        async with DuplexClient.connect(server.ws_url) as client:
            await client.update_session(turn_detection={"type": "server_vad"})
            await client.stream_audio(_padded_question(), realtime=True, frames=[solid_jpeg(RED)])
            results.append(await client.collect_response(timeout=TURN_TIMEOUT_S))
            for rgb in (BLUE, GREEN):  # camera-only turns: a new frame, no audio
                await client.append_audio(b"", frames=[solid_jpeg(rgb)])
                await client.commit(create_response=True)
                results.append(await client.collect_response(timeout=TURN_TIMEOUT_S))
        return results

    spoken, blue, green = asyncio.run(run())

    kinds = [type(e) for e in spoken.events]
    order = [
        InputAudioBufferSpeechStarted,
        InputAudioBufferSpeechStopped,
        InputAudioBufferCommitted,
        InputAudioTranscriptionCompleted,
    ]
    assert [k for k in kinds if k in order] == order
    [started] = _of(spoken, InputAudioBufferSpeechStarted)
    [stopped] = _of(spoken, InputAudioBufferSpeechStopped)
    [committed] = _of(spoken, InputAudioBufferCommitted)
    assert committed.item_id == started.item_id == stopped.item_id
    assert not committed.no_response
    assert 0 <= started.audio_start_ms < stopped.audio_end_ms
    _assert_question_transcribed(spoken)
    _assert_spoken_reply(spoken, "red")

    for result, colour in ((blue, "blue"), (green, "green")):
        # the spoken question stays in history: each new colour is announced
        assert _of(result, InputAudioTranscriptionCompleted) == []
        [committed] = _of(result, InputAudioBufferCommitted)
        assert not committed.no_response
        _assert_spoken_reply(result, colour)


def test_quiet_commit_then_spoken_turn_then_silent_camera_commit(server: CpuServer) -> None:
    async def run() -> tuple[ResponseResult, str, ResponseResult, ResponseResult]:
        async with DuplexClient.connect(server.ws_url) as client:
            await client.update_session(turn_detection=None)  # push to talk
            await client.stream_audio(to_pcm16(quiet_noise(0.6)), realtime=True)
            quiet_id = await client.commit(create_response=True)
            quiet = await client.collect_response(timeout=TURN_TIMEOUT_S)

            audio = np.concatenate([silence(0.3), speech(QUESTION), silence(0.3)])
            await client.stream_audio(to_pcm16(audio), realtime=True, frames=[solid_jpeg(YELLOW)])
            await client.commit(create_response=True)
            spoken = await client.collect_response(timeout=TURN_TIMEOUT_S)

            await client.stream_audio(
                to_pcm16(quiet_noise(0.4, seed=11)), realtime=True, frames=[solid_jpeg(BLUE)]
            )
            await client.commit(create_response=True)
            camera = await client.collect_response(timeout=TURN_TIMEOUT_S)
        return quiet, quiet_id, spoken, camera

    quiet, quiet_id, spoken, camera = asyncio.run(run())

    # B6: committed with no_response and the client's event id, then response.listen
    assert quiet.status == "listen"
    assert quiet.status_reason == "silence_or_noise"
    assert quiet.response_id is None
    [committed] = _of(quiet, InputAudioBufferCommitted)
    assert committed.no_response is True
    assert committed.client_event_id == quiet_id
    [listen] = _of(quiet, ResponseListen)
    assert listen.response_id is None
    assert quiet.audio == b""

    # the next spoken turn still works
    _assert_question_transcribed(spoken)
    _assert_spoken_reply(spoken, "yellow")

    # B8: quiet audio plus a frame goes straight to the describer (no transcription)
    [committed] = _of(camera, InputAudioBufferCommitted)
    assert not committed.no_response
    assert _of(camera, InputAudioTranscriptionCompleted) == []
    assert camera.user_transcripts == []
    _assert_spoken_reply(camera, "blue")
