"""Example traces per server machine (h11 test_state.py style): each legal path spelled
out, with the events its effects emit."""

from __future__ import annotations

import pytest

from core.outbox import Outbox
from core.statemachines.commit import Commit
from core.statemachines.input_buffer import InputBuffer
from core.statemachines.item import Item
from core.statemachines.playback import Playback
from core.statemachines.response import Response
from core.statemachines.turn_detector import TurnDetector
from spec import events as ev
from spec.session_config import TurnDetection
from spec.tables import (
    BufferState,
    CommitState,
    DetectorState,
    ItemState,
    PlaybackState,
    ResponseState,
)
from spec.tables.input_buffer import PREROLL_MS


def _tags(out: Outbox) -> list[str]:
    """Event tags, and effects by class name."""
    return [
        str(config.tag) if (config := getattr(e, "__struct_config__", None)) else type(e).__name__
        for e in out.drain()
    ]


def _user_item(out: Outbox) -> Item:
    return Item(out, "item_1", version=1, role="user", content=[ev.ContentPart(type="input_audio")])


def test_item_transcribe_writes_the_part_then_is_done() -> None:
    out = Outbox()
    item = _user_item(out)
    item.transcribe(transcript="hello", content_index=0)
    assert item.state is ItemState.COMPLETED
    assert item.content[0].transcript == "hello"
    assert _tags(out) == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    assert item.text() == "hello"


def test_item_failed_transcription_and_delete() -> None:
    out = Outbox()
    item = _user_item(out)
    item.fail_transcription(content_index=0, error=ev.ErrorDetail(type="t", code="c", message="m"))
    item.delete()
    assert item.state is ItemState.DELETED
    assert _tags(out) == [
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "conversation.item.deleted",
    ]


def test_assistant_item_truncate_rewrites_its_transcript() -> None:
    out = Outbox()
    item = Item(
        out,
        "item_2",
        version=1,
        role="assistant",
        content=[ev.ContentPart(type="output_audio", transcript="hello there")],
    )
    item.complete()
    item.truncate(audio_end_ms=200, transcript="hel")
    assert item.state is ItemState.COMPLETED
    assert item.content[0].transcript == "hel"
    assert _tags(out) == ["conversation.item.done", "conversation.item.truncated"]
    assert item.wire().status == "completed"


def test_input_buffer_idle_retention_then_capture_then_take() -> None:
    out = Outbox()
    buffer = InputBuffer(out)
    chunk = bytes(640)  # 20 ms
    freed = sum(buffer.add_audio(chunk) for _ in range(100))
    assert buffer.audio_bytes == PREROLL_MS * 32
    assert freed == 100 * 640 - PREROLL_MS * 32
    assert buffer.add_frames([b"a" * 10, b"b" * 20], max_frames=8) == 10
    assert buffer.frames == [b"b" * 20]
    buffer.start_capture()
    assert buffer.state is BufferState.CAPTURING
    for _ in range(100):
        assert buffer.add_audio(chunk) == 0
    assert buffer.add_frames([b"c", b"d"], max_frames=2) == 20
    audio, frames = buffer.take()
    assert len(audio) == PREROLL_MS * 32 + 100 * 640
    assert frames == [b"c", b"d"]
    assert (buffer.state, buffer.held_bytes, buffer.since_commit) == (BufferState.IDLE, 0, False)
    assert out.drain() == []


def test_input_buffer_clear_frees_everything_and_says_so() -> None:
    out = Outbox()
    buffer = InputBuffer(out)
    buffer.add_audio(bytes(100))
    buffer.add_frames([b"x" * 5], max_frames=8)
    assert buffer.add_audio(b"") == 0
    assert buffer.add_frames([], max_frames=8) == 0
    assert buffer.clear() == 105
    assert _tags(out) == ["input_audio_buffer.cleared"]


@pytest.mark.parametrize(
    ("path", "states", "acks"),
    [
        (["quiet"], [CommitState.NO_RESPONSE], [True]),
        (["retain", "route_asr", "transcribe"], [CommitState.TRANSCRIBED], [False]),
        (["defer", "route_vlm"], [CommitState.ROUTED_VLM], [False]),
        (["route_asr", "fail"], [CommitState.FAILED], [False]),
        (["adopt", "withdraw"], [CommitState.WITHDRAWN], []),
    ],
)
def test_commit_paths_acknowledge_exactly_once(
    path: list[str], states: list[CommitState], acks: list[bool]
) -> None:
    out = Outbox()
    commit = Commit(
        out,
        _user_item(out),
        pcm16=b"",
        frames=[],
        has_speech=True,
        reserved=0,
        client_event_id="evt_1",
    )
    for step in path:
        getattr(commit, step)(*(["hi"] if step == "transcribe" else []))
    assert commit.state is states[-1]
    committed = out.drain()
    assert [e.no_response for e in committed] == acks
    assert all(e.client_event_id == "evt_1" for e in committed)


def test_turn_detector_start_hysteresis_stop_and_reset() -> None:
    out = Outbox()
    detector = TurnDetector(out)
    config = TurnDetection()
    probabilities = (0.9, 0.1, 0.9, 0.9, 0.9)  # 96 ms of speech after a break
    assert [detector.feed(p, config) for p in probabilities] == [None] * 4 + ["start"]
    assert detector.start_ms(config) == 0  # 2 * 32 - 300, not before the last reset
    detector.start(item_id="item_1", audio_start_ms=0)
    assert detector.state is DetectorState.SPEECH
    assert all(detector.feed(0.4, config) is None for _ in range(20))  # the band
    assert detector.feed(0.9, config) is None  # resets the silence run
    boundaries = [detector.feed(0.1, config) for _ in range(16)]
    assert boundaries[-1] == "stop" and boundaries[:-1] == [None] * 15
    assert detector.stop() == "item_1"
    detector.reset(80_000)
    assert (detector.state, detector.last_reset, detector.origin) == (
        DetectorState.SILENCE,
        80_000,
        0,
    )
    detector.reset(96_000, restart=True)  # server VAD switched on: scores start over here
    assert (detector.origin, detector.frames_seen) == (96_000, 0)
    assert _tags(out) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
    ]


def _response(out: Outbox) -> Response:
    playback = Playback(out, response_id="resp_1", item_id="item_2")
    return Response(
        out, "resp_1", item_id="item_2", segments=[], playback=playback, modalities=("audio",)
    )


def test_response_full_path_emits_one_done() -> None:
    out = Outbox()
    response = _response(out)
    assert response.new_request("asr") == "resp_1:asr:1"
    response.transcribe()
    response.generate()
    item = Item(
        out,
        "item_2",
        version=1,
        role="assistant",
        content=[ev.ContentPart(type="output_audio", transcript="")],
    )
    response.speak(item, "output_audio")
    response.decided = True
    response.complete()
    assert response.state is ResponseState.COMPLETED
    assert not response.active
    assert _tags(out) == [
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert response.wire("completed").output[0].id == "item_2"


def test_response_listen_cancel_and_fail_paths() -> None:
    out = Outbox()
    listened = _response(out)
    listened.generate()
    listened.listen()
    assert listened.wire("completed").status_details.reason == "listen"  # type: ignore[union-attr]
    assert _tags(out) == [
        "response.listen",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    cancelled = _response(out)
    cancelled.cancel("client_cancelled")
    assert out.drain()[0].response.status == "cancelled"  # type: ignore[union-attr]
    failed = _response(out)
    failed.fail("engine_error", {"code": "engine_error"})
    done = out.drain()[0]
    assert done.response.status_details.error == {"code": "engine_error"}  # type: ignore[union-attr]


def test_response_complete_waits_for_its_decision_and_tts() -> None:
    from core.errors import InvalidTransition

    out = Outbox()
    response = _response(out)
    response.generate()
    response.tts_open.add("resp_1:tts:1")
    response.decided = True
    with pytest.raises(InvalidTransition, match="generation_finished"):
        response.complete()
    assert response.state is ResponseState.GENERATING
    assert response.reason is None


def test_playback_stream_finish_ack_drain_and_late_ack_after_clear() -> None:
    out = Outbox()
    playback = Playback(out, response_id="resp_1", item_id="item_2")
    assert not playback.may_be_playing and playback.drain_deadline() is None
    playback.add_audio(300.0, now_ms=1000)
    playback.add_audio(200.0, now_ms=1100)
    assert (playback.state, playback.first_audio_ms, playback.generated_ms) == (
        PlaybackState.STREAMING,
        1000,
        500.0,
    )
    playback.finish()
    assert playback.drain_deadline() == 1000 + 500 + 1000
    playback.ack(200)
    playback.ack(100)  # monotonic
    assert playback.played_ms == 200
    playback.ack(900)  # capped at generated, and fully played: drained
    assert (playback.played_ms, playback.state) == (500, PlaybackState.DRAINED)
    other = Playback(out, response_id="resp_2", item_id="item_3")
    other.add_audio(400.0, now_ms=0)
    other.clear()
    other.ack(150)  # a late cursor report still counts
    assert (other.state, other.played_ms) == (PlaybackState.CLEARED, 150)
    assert _tags(out) == ["playback.acknowledged"] * 3 + [
        "output_audio_buffer.cleared",
        "playback.acknowledged",
    ]


def test_playback_with_everything_acknowledged_drains_on_finish() -> None:
    out = Outbox()
    playback = Playback(out, response_id="resp_1", item_id="item_2")
    playback.add_audio(100.0, now_ms=0)
    playback.ack(100)
    playback.finish()
    assert playback.state is PlaybackState.DRAINED


def test_outbox_ids_epochs_and_nothing_after_close() -> None:
    out = Outbox()
    out.epoch = 3
    out.emit(ev.InputAudioBufferCleared())
    out.emit(ev.RateLimitsUpdated())
    first, second = out.drain()
    assert (first.event_id, first.epoch, second.event_id) == ("event_1", 3, "event_2")
    assert out.next_id("item") == "item_1"
    out.closed = True
    out.emit(ev.InputAudioBufferCleared())
    out.effect(object())  # type: ignore[arg-type]
    assert out.drain() == []
