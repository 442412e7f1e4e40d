"""The runtime: exact cancellation, no leaked tasks, stage failure, bounded output."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import anyio
import pytest

from backends.base import StageFailed, TurnEndRequest, VlmRequest
from spec import events as ev
from spec.effects import HistoryTurn, PromptInput
from tests.runtime.conftest import HANG_GUARD_S, Harness, eventually, tone

pytestmark = pytest.mark.anyio

DROPPABLE = (ev.ResponseOutputAudioDelta, ev.ResponseOutputAudioTranscriptDelta)


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
    await eventually("the backend abort", lambda: harness.script.aborted_ids("tts"))
    [aborted] = harness.script.aborted_ids("tts")
    assert aborted.endswith("/resp_1:tts:1")
    harness.script.release("tts")
    await _spoken_turn(client, "c2")  # the next response is unaffected
    assert (await client.until("response.done")).response.status == "completed"


async def test_a_parked_request_cancelled_mid_flight_leaves_no_task_behind(
    harness: Harness,
) -> None:
    client = await harness.connect()
    runner = next(iter(harness.host._runners.values()))
    # The tasks of the open session (reader, writer, timer; a task exists from the moment
    # it is spawned), compared by identity rather than counted: a task of the turn that
    # outlives it cannot hide behind one of these ending, and no sleep is needed first.
    baseline = asyncio.all_tasks()
    harness.script.park("vlm")
    await _spoken_turn(client)
    await harness.script.wait_parked("vlm")
    assert asyncio.all_tasks() - baseline, "the parked VLM request runs in a task of its own"
    assert list(runner.stages.scopes) == ["resp_1:vlm:1"]
    await client.send(ev.ResponseCancel())
    assert (await client.until("response.done")).response.status == "cancelled"
    # every task the turn started (stage requests, the backend abort) ends: wait for those
    # tasks themselves; a leaked one never ends and the hang guard fails the test
    with anyio.fail_after(HANG_GUARD_S):
        while turn_tasks := asyncio.all_tasks() - baseline:
            await asyncio.wait(turn_tasks)
    assert runner.stages.scopes == {}
    assert harness.script.aborted_ids("vlm") == [f"{runner.protocol.session_id}/resp_1:vlm:1"]


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


@pytest.mark.slow  # 9 s here: `make test` runs it, `make check` does not
async def test_a_slow_reader_never_grows_the_outbound_queue_past_its_bound(
    harness: Harness,
) -> None:
    harness.script.reply("Hello there. " * 100)  # ~70 s of audio in 100 ms chunks
    client = await harness.connect(buffer=0)  # the client reads nothing for a while
    await _spoken_turn(client)
    runner = next(iter(harness.host._runners.values()))
    # the whole reply is produced while the client reads nothing: the runner's own count
    # of response.done sent, rather than a guess at how long producing it takes
    await eventually(
        "the whole reply to be produced",
        lambda: harness.host.metrics.value("joyduplex_events_out_total", type="response.done"),
    )
    queue = runner.outbound
    queued = list(queue._items)
    deltas = [e for e in queued if isinstance(e, DROPPABLE)]
    assert queue.high_water == len(queued)  # nothing was read meanwhile: it only grew
    # audio (and transcript) deltas never grow it past its bound: the oldest are dropped
    assert len(deltas) <= queue.max_events
    assert queue.dropped_audio_deltas > 0
    # only the reply's closing control events (never dropped) go past it, far from the
    # 4 x bound that would mean the client stopped reading altogether
    assert queue.max_events <= len(queued) < 4 * queue.max_events
    dropped = harness.host.metrics.value("joyduplex_audio_deltas_dropped_total")
    assert dropped == runner.outbound.dropped_audio_deltas
    done = await client.until("response.done")  # control events still arrive
    errors = [e.error for e in client.seen if e.__struct_config__.tag == "error"]
    assert errors == []
    assert done.response.status == "completed"


async def test_idle_timeout_closes_the_session_and_the_channel(harness: Harness) -> None:
    client = await harness.connect(config={"idle_timeout_s": 0.2})
    closed = await client.until("session.closed")
    assert closed.reason == "idle_timeout"
    await eventually("the channel to close", lambda: client.channel.close_code is not None)
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


async def test_the_prompt_the_core_built_reaches_the_vlm_as_it_is(harness: Harness) -> None:
    """One prompt type from core to backend (B3): the runtime converts nothing."""
    harness.script.say("hello there", "and now").reply("Hi.").reply("Fine.")
    client = await harness.connect(config={"instructions": "be brief"})
    await _spoken_turn(client)
    await client.until("response.done")
    await _spoken_turn(client, "c2")
    await client.until("response.done")
    requests = harness.script.requests_of("vlm")
    assert all(isinstance(r, VlmRequest) for r in requests)
    context = requests[-1].context  # type: ignore[attr-defined]
    assert type(context) is PromptInput
    # times are on the session clock, which this runtime test runs on the real clock:
    # their presence is checked, their values belong to the core's tests (B29)
    assert replace(context, time_s=None, history_times_s=()) == PromptInput(
        system="be brief",
        history=(HistoryTurn("user", "hello there"), HistoryTurn("assistant", "Hi.")),
        transcript="and now",
        history_frames=((), ()),
        asked_before=True,
    )
    assert context.time_s is not None and len(context.history_times_s) == 2
    assert all(type(turn) is HistoryTurn for turn in context.history)


async def test_b10_appends_and_heartbeats_do_not_wait_for_the_vad_but_a_commit_does(
    harness: Harness,
) -> None:
    """Server VAD is scored beside the reader: more audio and heartbeats are applied while
    earlier audio waits for its verdict (a session is never capped at one append per VAD
    tick), but a commit is applied only after every verdict on the audio before it."""
    client = await harness.connect(
        config={"turn_detection": {"type": "server_vad", "create_response": False}}
    )
    runner = next(iter(harness.host._runners.values()))
    harness.script.park("vad")
    try:
        await client.send(ev.InputAudioBufferAppend(audio=tone(100, amplitude=20)))
        await harness.script.wait_parked("vad", timeout=HANG_GUARD_S)
        for _ in range(3):
            await client.send(ev.InputAudioBufferAppend(audio=tone(100, amplitude=20)))
        await client.send(ev.SessionHeartbeat())
        await client.until("session.heartbeat_ack")  # the first verdict is still parked
        assert runner.protocol.statistics().buffer_audio_bytes > 0
        await client.send(ev.InputAudioBufferCommit(event_id="c1"))
        inbox = client.channel._inbox
        await eventually(
            "the reader to take the commit", lambda: not inbox.statistics().current_buffer_used
        )
        assert runner.protocol.statistics().queued == ()  # taken, not applied: it waits
        assert "input_audio_buffer.committed" not in client.tags()
    finally:
        harness.script.release("vad")
    committed = await client.until("input_audio_buffer.committed")
    assert committed.client_event_id == "c1"


async def test_b32_semantic_vad_turn_with_scripted_end_of_turn_verdicts(harness: Harness) -> None:
    """A pause judged unfinished holds the turn; the next, judged finished, ends it."""
    harness.script.judge_turns(0.1, 0.9)
    client = await harness.connect(config={"turn_detection": {"type": "semantic_vad"}})
    for audio in (tone(400), bytes(12_800), tone(400), bytes(25_600)):  # 400 ms each, 800
        for start in range(0, len(audio), 640):
            await client.send(ev.InputAudioBufferAppend(audio=audio[start : start + 640]))
    await client.until("input_audio_buffer.speech_stopped")
    assert (await client.until("response.done")).response.status == "completed"
    tags = [e.__struct_config__.tag for e in client.seen]
    assert tags.count("input_audio_buffer.speech_started") == 1
    assert tags.count("input_audio_buffer.committed") == 1
    requests = harness.script.requests_of("turn_end")
    assert len(requests) == 2
    assert all(isinstance(r, TurnEndRequest) and len(r.pcm) for r in requests)


async def test_b32_without_an_end_of_turn_model_semantic_vad_ends_pauses_as_server_vad(
    harness: Harness,
) -> None:
    harness.host.backend.turn_end = None
    client = await harness.connect(config={"turn_detection": {"type": "semantic_vad"}})
    for audio in (tone(400), bytes(25_600)):
        for start in range(0, len(audio), 640):
            await client.send(ev.InputAudioBufferAppend(audio=audio[start : start + 640]))
    await client.until("input_audio_buffer.speech_stopped")
    assert (await client.until("response.done")).response.status == "completed"
    assert harness.script.requests_of("turn_end") == []
