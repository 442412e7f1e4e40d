"""The runtime: exact cancellation, no leaked tasks, stage failure, bounded output."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from backends.base import StageFailed
from spec import events as ev
from tests.runtime.conftest import Harness, tone

pytestmark = pytest.mark.anyio


async def _spoken_turn(client, event_id: str = "c1") -> None:  # type: ignore[no-untyped-def]
    await client.send(ev.InputAudioBufferAppend(audio=tone(300)))
    await client.send(ev.InputAudioBufferCommit(event_id=event_id, create_response=True))


async def test_a_spoken_turn_runs_asr_vlm_tts_and_completes(harness: Harness) -> None:
    harness.script.say("what colour is this").reply("It is red.")
    client = await harness.connect()
    await _spoken_turn(client)
    done = await client.until("response.done")
    assert done.response.status == "completed"
    tags = client.tags()
    assert "conversation.item.input_audio_transcription.completed" in tags
    assert tags.index("response.created") < tags.index("response.output_audio.delta")
    transcript = next(
        e for e in client.seen if e.__struct_config__.tag == "response.output_audio_transcript.done"
    ).transcript
    assert transcript == "It is red."


async def test_barge_in_cancels_only_the_active_response_and_aborts_its_requests(
    harness: Harness,
) -> None:
    harness.script.park("tts")
    client = await harness.connect()
    await _spoken_turn(client)
    await harness.script.wait_parked("tts")
    await client.send(ev.ResponseCancel())
    done = await client.until("response.done")
    assert done.response.status == "cancelled"
    with anyio.fail_after(2):
        while not harness.script.aborted_ids("tts"):
            await anyio.sleep(0.01)
    [aborted] = harness.script.aborted_ids("tts")
    assert aborted.endswith("/resp_1:tts:1")
    harness.script.release("tts")
    await _spoken_turn(client, "c2")  # the next response is unaffected
    assert (await client.until("response.done")).response.status == "completed"


async def test_a_parked_request_cancelled_mid_flight_leaves_no_task_behind(
    harness: Harness,
) -> None:
    client = await harness.connect()
    await anyio.sleep(0.05)
    baseline = len(asyncio.all_tasks())
    harness.script.park("vlm")
    await _spoken_turn(client)
    await harness.script.wait_parked("vlm")
    assert len(asyncio.all_tasks()) > baseline
    await client.send(ev.ResponseCancel())
    await client.until("response.done")
    with anyio.fail_after(2):
        while len(asyncio.all_tasks()) > baseline:
            await anyio.sleep(0.01)
    assert len(asyncio.all_tasks()) == baseline


async def test_a_failing_stage_fails_only_its_response_and_the_session_goes_on(
    harness: Harness,
) -> None:
    harness.script.fail("vlm", StageFailed, message="model exploded")
    client = await harness.connect()
    await _spoken_turn(client)
    error = await client.until("error")
    assert error.error.code == "runtime_data_plane_stream_failed"
    assert (await client.until("response.done")).response.status == "failed"
    await _spoken_turn(client, "c2")
    assert (await client.until("response.done")).response.status == "completed"


async def test_a_slow_reader_never_grows_the_outbound_queue_past_its_bound(
    harness: Harness,
) -> None:
    harness.script.reply("Hello there. " * 100)  # ~70 s of audio in 100 ms chunks
    client = await harness.connect(buffer=0)  # the client reads nothing for a while
    await _spoken_turn(client)
    await anyio.sleep(1.0)
    runner = next(iter(harness.host._runners.values()))
    assert runner.outbound.high_water <= runner.outbound.max_events
    assert runner.outbound.dropped_audio_deltas > 0
    dropped = harness.host.metrics.value("joyduplex_audio_deltas_dropped_total")
    assert dropped == runner.outbound.dropped_audio_deltas
    done = await client.until("response.done", timeout=30)  # control events still arrive
    errors = [e.error for e in client.seen if e.__struct_config__.tag == "error"]
    assert errors == []
    assert done.response.status == "completed"


async def test_idle_timeout_closes_the_session_and_the_channel(harness: Harness) -> None:
    client = await harness.connect(config={"idle_timeout_s": 0.2})
    closed = await client.until("session.closed", timeout=3)
    assert closed.reason == "idle_timeout"
    with anyio.fail_after(2):
        while client.channel.close_code is None:
            await anyio.sleep(0.01)
    assert client.channel.close_code == 1000


async def test_server_vad_turn_with_the_scripted_vad(harness: Harness) -> None:
    client = await harness.connect(config={"turn_detection": {"type": "server_vad"}})
    for _ in range(20):  # 400 ms of tone
        await client.send(ev.InputAudioBufferAppend(audio=tone(20)))
    for _ in range(40):  # 800 ms of silence
        await client.send(ev.InputAudioBufferAppend(audio=bytes(640)))
    await client.until("input_audio_buffer.speech_started")
    await client.until("input_audio_buffer.speech_stopped")
    assert (await client.until("response.done")).response.status == "completed"


async def test_a_bad_frame_is_a_typed_error_and_the_session_lives_on(harness: Harness) -> None:
    from spec.errors import ErrorCode, InvalidEvent

    client = await harness.connect()
    await client._send.send(InvalidEvent("bad", code=ErrorCode.INVALID_JSON))
    error = await client.until("error")
    assert error.error.code == "invalid_json"
    await _spoken_turn(client)
    assert (await client.until("response.done")).response.status == "completed"
