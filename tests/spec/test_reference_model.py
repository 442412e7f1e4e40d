"""Example traces pinning the oracle (`spec.reference.session.ReferenceSession`) to
docs/session-semantics.md, so the stateful comparison compares core with the document."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from spec.effects import (
    Abort,
    CloseSession,
    EvictReplica,
    ItemRef,
    ScoreVad,
    SubmitAsr,
    SubmitTts,
    SubmitVlm,
)
from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import (
    ContentPart,
    ConversationItem,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    InputCommitAlias,
    OutputAudioBufferClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    ServerEvent,
    SessionClose,
    SessionHeartbeat,
    SessionPatch,
    SessionUpdate,
)
from spec.limits import Limits
from spec.reference.session import ReferenceSession
from spec.session_config import SessionConfig, TurnDetection
from spec.stage_results import (
    AsrTranscript,
    StageFailure,
    TtsAudio,
    TtsDone,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)

SPEECH = struct.pack("<320h", *([8000, -8000] * 160))  # 20 ms, loud
QUIET = bytes(640)  # 20 ms of silence
JPEG = b"\xff\xd8\xff\xe0" + b"j" * 60
PNG = b"\x89PNG\r\n\x1a\n" + b"p" * 60
CHUNK = bytes(4800)  # 100 ms at 24 kHz


def tag(o: Any) -> str:
    """The wire `type` of a server event, or the class name of an effect."""
    if isinstance(o, ServerEvent):
        return str(type(o).__struct_config__.tag)
    return type(o).__name__


def kinds(outs: list[Any]) -> list[str]:
    return [tag(o) for o in outs]


class Session:
    """A ReferenceSession with a tiny driver: every call returns the drained outputs."""

    def __init__(self, **kwargs: Any) -> None:
        self.p = ReferenceSession(**kwargs)
        self.now = 0
        self.created = self.p.next_outputs()

    def send(self, event: Any) -> list[Any]:
        self.p.receive(event, self.now)
        return self.p.next_outputs()

    def back(self, result: Any) -> list[Any]:
        self.p.backend_event(result, self.now)
        return self.p.next_outputs()

    def reject(self, event: Any) -> RemoteProtocolError:
        before = self.p.snapshot()
        with pytest.raises(RemoteProtocolError) as info:
            self.p.receive(event, self.now)
        assert self.p.next_outputs() == []
        assert self.p.snapshot() == before
        return info.value

    def speech_turn(self) -> list[Any]:
        self.send(InputAudioBufferAppend(audio=SPEECH))
        return self.send(InputAudioBufferCommit(event_id="c1", create_response=True))

    def ids(self, outs: list[Any], kind: type) -> list[str]:
        return [o.request_id for o in outs if isinstance(o, kind)]


def test_construction_emits_session_created_with_the_first_event_id() -> None:
    s = Session()
    assert kinds(s.created) == ["session.created"]
    assert s.created[0].event_id == "event_1"
    assert s.created[0].session.epoch == 0
    assert s.p.next_deadline() == 300_000


def test_empty_commit_is_refused_with_its_event_id_and_changes_nothing() -> None:
    s = Session()
    exc = s.reject(InputAudioBufferCommit(event_id="e7"))
    assert (exc.code, exc.event_id) == (ErrorCode.INPUT_AUDIO_BUFFER_EMPTY, "e7")
    err = s.p.error_event(exc)
    assert err.event_id == "event_2"
    assert (err.error.code, err.error.event_id, err.error.type) == (
        "input_audio_buffer_empty",
        "e7",
        "invalid_request_error",
    )


def test_quiet_commit_is_acknowledged_without_a_response() -> None:
    s = Session()
    s.send(InputAudioBufferAppend(audio=QUIET))
    outs = s.send(InputAudioBufferCommit(event_id="q1", create_response=True))
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.listen",
    ]
    committed = outs[1]
    assert (committed.item_id, committed.client_event_id, committed.no_response) == (
        "item_1",
        "q1",
        True,
    )
    assert outs[0].item.content[0].type == "input_audio"
    assert outs[3].response_id is None and outs[3].reason == "silence_or_noise"
    assert s.p.pending_bytes() == 0
    assert s.p.active is None


def speak(s: Session, text: str = "Hello there.") -> list[Any]:
    vlm = next(iter(s.p.active.open)) if s.p.active else ""
    return s.back(VlmDecisionResult(request_id=vlm, action="speak", text=text))


def test_speech_turn_runs_asr_vlm_tts_in_the_canonical_orders() -> None:
    s = Session()
    outs = s.speech_turn()
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "response.created",
        "SubmitAsr",
    ]
    assert outs[0].item.status == "in_progress"
    assert outs[2].response.id == "resp_1"
    asr = outs[3]
    assert asr.request_id == "resp_1:asr:1"
    assert asr.item == ItemRef("item_1", 1, 0)
    assert asr.pcm16 == SPEECH
    assert s.p.pending_bytes() == 0  # released at submission (B8)

    outs = s.back(AsrTranscript(request_id="resp_1:asr:1", text="what is this"))
    assert kinds(outs) == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
        "SubmitVlm",
    ]
    assert outs[0].item_id == "item_1" and outs[0].transcript == "what is this"
    assert outs[2].request_id == "resp_1:vlm:1"
    assert outs[2].prompt.transcript == "what is this"

    outs = s.back(VlmDelta(request_id="resp_1:vlm:1", text="It is a cup. It is"))
    assert kinds(outs) == ["SubmitTts"]
    assert (outs[0].request_id, outs[0].text) == ("resp_1:tts:1", "It is a cup.")
    assert s.back(VlmDelta(request_id="resp_1:vlm:1", text=" red.")) == []
    # the decision carries the whole reply: only the unspoken streamed rest is spoken
    outs = s.back(
        VlmDecisionResult(request_id="resp_1:vlm:1", action="speak", text="It is a cup. It is red.")
    )
    assert kinds(outs) == ["SubmitTts"]
    assert (outs[0].request_id, outs[0].text) == ("resp_1:tts:2", "It is red.")

    outs = s.back(TtsAudio(request_id="resp_1:tts:1", pcm16=CHUNK, text="It is a cup."))
    assert kinds(outs) == [
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
    ]
    assert outs[0].item.id == "item_2" and outs[0].item.role == "assistant"
    outs = s.back(TtsDone(request_id="resp_1:tts:1"))
    assert outs == []
    s.back(TtsAudio(request_id="resp_1:tts:2", pcm16=CHUNK, text=" It is red."))
    outs = s.back(TtsDone(request_id="resp_1:tts:2"))
    assert kinds(outs) == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[1].transcript == "It is a cup. It is red."
    assert outs[5].response.status == "completed"
    assert s.p.active is None and s.p.playing()
    assert s.p.next_deadline() == 0 + 200 + 1000


def test_listen_decision_ends_the_response_without_audio() -> None:
    s = Session()
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hm"))
    outs = s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="listen"))
    assert kinds(outs) == [
        "response.listen",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[0].response_id == "resp_1"
    assert outs[1].response.status == "completed"
    assert outs[1].response.status_details.reason == "listen"
    # speak with no text at all is the same as listen
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_2:asr:1", text="hm"))
    outs = s.back(VlmDecisionResult(request_id="resp_2:vlm:1", action="speak", text=" "))
    assert kinds(outs) == [
        "response.listen",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]


def test_camera_commit_and_camera_profile_skip_asr() -> None:
    s = Session()
    s.send(InputAudioBufferAppend(audio=QUIET, video_frames=[JPEG]))
    outs = s.send(InputCommitAlias(event_id="c"))
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.created",
        "SubmitVlm",
    ]
    assert [p.type for p in outs[0].item.content] == ["input_image"]
    assert outs[4].prompt.frames == (JPEG,)
    assert outs[4].prompt.transcript is None

    c = Session(profile="camera")
    c.send(InputAudioBufferAppend(audio=SPEECH))
    outs = c.send(InputAudioBufferCommit(create_response=True))
    assert kinds(outs)[-2:] == ["response.created", "SubmitVlm"]


def test_idle_buffer_keeps_one_frame_and_the_preroll() -> None:
    s = Session(limits=Limits(max_pending_input_bytes=64_000))
    for _ in range(40):  # 800 ms of quiet audio with a frame each
        s.send(InputAudioBufferAppend(audio=QUIET, video_frames=[JPEG]))
    assert s.p.buffer.state == "idle"
    assert len(s.p.buffer.frames) == 1
    assert s.p.buffer.audio_ms == 500
    assert s.p.pending_bytes() == 500 * 32 + len(JPEG)
    s.send(InputAudioBufferAppend(audio=SPEECH))
    assert s.p.buffer.state == "capturing"
    assert s.p.invariant_violations() == []


def _corrupt(s: Session, invariant: str) -> None:
    """Break one internal invariant of `s`'s model by hand."""
    from spec.reference.records import _Response, _Segment

    p = s.p

    def segment() -> _Segment:
        return _Segment("item_x", 1, 0, False, b"", 0, [], [], 0, 0)

    if invariant == "I1":
        p.responses = {r: _Response(r, "item_x", 0, []) for r in ("resp_a", "resp_b")}
    elif invariant == "I5":
        p.buffer.audio = [(0, SPEECH * 200)]  # 4 s, past the 64 KB bound
        p.buffer.state = "capturing"
    elif invariant == "I6 frames":
        p.buffer.frames = [JPEG, PNG]
    elif invariant == "I6 pre-roll":
        p.buffer.audio = [(0, QUIET * 40), (16_000, QUIET)]  # 800 ms before the last append
    elif invariant == "I8":
        p.responses = {"resp_a": _Response("resp_a", "item_x", 0, [], status="completed")}
        p.responses["resp_a"].played_ms = 50.0
    elif invariant == "deferred":
        p.deferred = [segment()]
    elif invariant == "B13":
        p.retained = [segment() for _ in range(3)]


@pytest.mark.parametrize(
    ("invariant", "named"),
    [
        ("I1", "I1: more than one active response"),
        ("I5", "I5: pending bytes"),
        ("I6 frames", "I6: idle buffer holds more than one frame"),
        ("I6 pre-roll", "I6: idle buffer holds more than the pre-roll"),
        ("I8", "I8: resp_a played 50.0 > generated 0.0"),
        ("deferred", "deferred commits without an active response"),
        ("B13", "B13: more commits queued than max_pending_commits"),
    ],
)
def test_the_models_invariant_check_names_each_broken_invariant(invariant: str, named: str) -> None:
    """The stateful comparisons trust `invariant_violations()` to say when the model's
    state went wrong; a state broken by hand in one way is named by that check, and only
    it, so a check that can never fire would be seen here."""
    s = Session(limits=Limits(max_pending_input_bytes=64_000, max_pending_commits=2))
    assert s.p.invariant_violations() == []
    _corrupt(s, invariant)
    [violation] = s.p.invariant_violations()
    assert violation.startswith(named)


def test_append_validation_codes_and_params() -> None:
    s = Session(limits=Limits(max_pending_input_bytes=2000))
    cases: list[tuple[Any, ErrorCode, str | None]] = [
        (
            InputAudioBufferAppend(audio=QUIET, format="mp3"),
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
            "format",
        ),
        (
            InputAudioBufferAppend(audio=QUIET, sample_rate_hz=4000),
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
            "sample_rate_hz",
        ),
        (InputAudioBufferAppend(audio=b"\x00"), ErrorCode.BAD_AUDIO, "audio"),
        (
            InputAudioBufferAppend(audio=b"\x00" * 3, format="pcm_f32le"),
            ErrorCode.BAD_AUDIO,
            "audio",
        ),
        (
            InputAudioBufferAppend(video_frames=[JPEG, JPEG, JPEG]),
            ErrorCode.INVALID_VIDEO_FRAMES,
            "video_frames",
        ),
        (
            InputAudioBufferAppend(video_frames=[JPEG, b"GIF89a"]),
            ErrorCode.INVALID_VIDEO_FRAMES,
            "video_frames[1]",
        ),
        (
            InputAudioBufferAppend(video_frames=[b""]),
            ErrorCode.INVALID_VIDEO_FRAMES,
            "video_frames[0]",
        ),
        (InputAudioBufferAppend(), ErrorCode.INVALID_INPUT_MODALITY, "audio"),
        (InputAudioBufferAppend(audio=bytes(2002)), ErrorCode.INPUT_BACKPRESSURE, None),
    ]
    for event, code, param in cases:
        exc = s.reject(event)
        assert (exc.code, exc.param) == (code, param), event
    s.send(InputAudioBufferAppend(audio=bytes(160), format="g711_ulaw"))  # 8 kHz -> 320 bytes
    assert s.p.pending_bytes() == 640
    s.send(InputAudioBufferAppend(audio=bytes(1280), format="pcm_f32le"))  # 320 samples
    assert s.p.pending_bytes() == 1280


def test_deferred_commits_start_one_batched_response_after_the_active_one() -> None:
    s = Session(limits=Limits(max_pending_commits=2))
    s.speech_turn()  # resp_1, item_1
    s.send(InputAudioBufferAppend(audio=SPEECH))
    outs = s.send(InputAudioBufferCommit(event_id="d1", create_response=True))
    assert kinds(outs) == ["conversation.item.added", "input_audio_buffer.committed"]
    assert outs[1].item_id == "item_3"  # item_2 is resp_1's assistant item
    s.send(InputAudioBufferAppend(audio=QUIET, video_frames=[PNG]))
    outs = s.send(InputAudioBufferCommit(event_id="d2", create_response=True))
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
    ]
    s.send(InputAudioBufferAppend(audio=SPEECH))
    exc = s.reject(InputAudioBufferCommit(event_id="d3"))
    assert (exc.code, exc.event_id) == (ErrorCode.INPUT_BACKPRESSURE, "d3")
    exc = s.reject(ResponseCreate(event_id="r"))
    assert exc.code == ErrorCode.RESPONSE_ALREADY_ACTIVE

    outs = s.back(StageFailure(request_id="resp_1:asr:1", code=ErrorCode.ENGINE_ERROR, message="x"))
    assert kinds(outs) == [
        "error",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
        "response.created",
        "SubmitAsr",
    ]
    assert outs[3].response.status == "failed"
    assert outs[6].response.id == "resp_2"
    assert outs[7].request_id == "resp_2:asr:1" and outs[7].item == ItemRef("item_3", 1, 0)
    outs = s.back(AsrTranscript(request_id="resp_2:asr:1", text="and this"))
    vlm = [o for o in outs if isinstance(o, SubmitVlm)]
    assert vlm and vlm[0].prompt.frames == (PNG,) and vlm[0].prompt.transcript == "and this"


def test_retained_speech_and_later_camera_commit_merge() -> None:
    s = Session()
    s.send(InputAudioBufferAppend(audio=SPEECH))
    outs = s.send(InputAudioBufferCommit(event_id="r1"))  # no response: retained
    assert kinds(outs) == ["conversation.item.added", "input_audio_buffer.committed"]
    s.send(InputAudioBufferAppend(video_frames=[JPEG]))
    outs = s.send(InputAudioBufferCommit(event_id="r2", create_response=True))
    assert kinds(outs)[-2:] == ["response.created", "SubmitAsr"]
    assert outs[-1].item.item_id == "item_1"
    outs = s.back(AsrTranscript(request_id="resp_1:asr:1", text="look"))
    assert outs[-1].prompt.frames == (JPEG,)
    assert outs[-1].prompt.transcript == "look"


def test_cancel_aborts_open_requests_and_fails_waiting_transcripts() -> None:
    s = Session()
    s.speech_turn()
    exc = s.reject(ResponseCancel(event_id="x", response_id="resp_9"))
    assert exc.code == ErrorCode.RESPONSE_NOT_ACTIVE
    outs = s.send(ResponseCancel(event_id="k"))
    assert kinds(outs) == [
        "Abort",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[0].request_id == "resp_1:asr:1"
    assert outs[3].response.status == "cancelled"
    assert outs[3].response.status_details.reason == "client_cancelled"
    assert outs[3].epoch == 1
    # late results are fenced
    assert s.back(AsrTranscript(request_id="resp_1:asr:1", text="late")) == []
    # a named finished response is a no-op, anything else is refused
    assert s.send(ResponseCancel(response_id="resp_1")) == []
    assert s.reject(ResponseCancel()).code == ErrorCode.RESPONSE_NOT_ACTIVE


def started_audio(s: Session) -> None:
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hi"))
    s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="speak", text="Hello there."))
    s.back(TtsAudio(request_id="resp_1:tts:1", pcm16=CHUNK * 10, text="Hello there."))


def test_output_audio_buffer_clear_cancels_with_cleared_first() -> None:
    s = Session()
    started_audio(s)
    outs = s.send(OutputAudioBufferClear())
    assert kinds(outs) == [
        "Abort",
        "output_audio_buffer.cleared",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[1].response_id == "resp_1"
    assert outs[7].response.status_details.reason == "output_audio_buffer_clear"
    # nothing left to clear: cleared without a response id, epoch unchanged
    epoch = s.p.epoch
    outs = s.send(OutputAudioBufferClear())
    assert kinds(outs) == ["output_audio_buffer.cleared"]
    assert outs[0].response_id is None and s.p.epoch == epoch


def test_playback_ack_and_cleared_only_path_after_done() -> None:
    s = Session()
    started_audio(s)
    outs = s.send(PlaybackAck(response_id="resp_1", item_id="item_2", played_ms=400))
    assert kinds(outs) == ["playback.acknowledged"] and outs[0].played_ms == 400
    outs = s.send(PlaybackAck(response_id="resp_1", played_ms=5000))
    assert outs[0].played_ms == 1000  # capped at generated
    outs = s.send(PlaybackAck(response_id="resp_1", played_ms=10))
    assert outs[0].played_ms == 1000  # monotonic
    assert s.reject(PlaybackAck(response_id="resp_1", item_id="item_1", played_ms=1)).code == (
        ErrorCode.PLAYBACK_ITEM_MISMATCH
    )
    assert s.reject(PlaybackAck(response_id="resp_7", played_ms=1)).code == (
        ErrorCode.PLAYBACK_ITEM_NOT_FOUND
    )

    s2 = Session()
    started_audio(s2)
    s2.back(TtsDone(request_id="resp_1:tts:1"))
    assert s2.p.active is None and s2.p.playing()
    outs = s2.send(ResponseCancel())
    assert kinds(outs) == ["output_audio_buffer.cleared"]
    assert outs[0].response_id == "resp_1" and outs[0].epoch == 1
    assert not s2.p.playing()
    assert s2.reject(ResponseCancel()).code == ErrorCode.RESPONSE_NOT_ACTIVE


def test_playback_may_still_be_playing_until_its_deadline() -> None:
    s = Session()
    s.now = 100
    started_audio(s)  # first audio at 100 ms, 1000 ms generated
    s.back(TtsDone(request_id="resp_1:tts:1"))
    assert s.p.next_deadline() == 2100
    s.p.handle_timeout(2099)
    assert s.p.playing()
    s.p.handle_timeout(2100)
    assert not s.p.playing()
    assert s.p.next_outputs() == []
    assert s.p.next_deadline() == 300_100


def test_truncate_cuts_a_completed_assistant_audio_item() -> None:
    s = Session()
    started_audio(s)
    # still in progress: not a completed item
    exc = s.reject(ConversationItemTruncate(item_id="item_2", audio_end_ms=0))
    assert (exc.code, exc.param) == (ErrorCode.INVALID_TRUNCATE, "audio_end_ms")
    s.back(TtsDone(request_id="resp_1:tts:1"))
    assert s.reject(ConversationItemTruncate(item_id="item_1", audio_end_ms=0)).code == (
        ErrorCode.INVALID_TRUNCATE
    )
    exc = s.reject(ConversationItemTruncate(item_id="item_2", audio_end_ms=1001))
    assert (exc.code, exc.param) == (ErrorCode.INVALID_TRUNCATE, "audio_end_ms")
    assert s.reject(ConversationItemTruncate(item_id="nope", audio_end_ms=0)).code == (
        ErrorCode.ITEM_NOT_FOUND
    )
    outs = s.send(ConversationItemTruncate(item_id="item_2", audio_end_ms=500))
    assert kinds(outs) == ["conversation.item.truncated"]
    outs = s.send(ConversationItemRetrieve(item_id="item_2"))
    assert outs[0].item.content[0].transcript == "Hello "
    # a user-created assistant item belongs to no response with audio
    text = ContentPart(type="output_text", text="hi")
    s.send(ConversationItemCreate(item=ConversationItem(id="a1", role="assistant", content=[text])))
    exc = s.reject(ConversationItemTruncate(item_id="a1", audio_end_ms=0))
    assert (exc.code, exc.param) == (ErrorCode.INVALID_TRUNCATE, "audio_end_ms")
    # a cancelled response's item is completed with its played prefix
    c = Session()
    started_audio(c)
    c.send(PlaybackAck(response_id="resp_1", played_ms=500))
    outs = c.send(ResponseCancel())
    assert outs[-4].item.status == "completed"
    assert outs[-4].item.content[0].transcript == "Hello "
    assert c.reject(ConversationItemTruncate(item_id="item_2", audio_end_ms=1001)).code == (
        ErrorCode.INVALID_TRUNCATE
    )
    assert kinds(c.send(ConversationItemTruncate(item_id="item_2", audio_end_ms=0))) == [
        "conversation.item.truncated"
    ]


def test_barge_in_via_vad_scores_cancels_and_commits_the_new_turn() -> None:
    td = TurnDetection(silence_duration_ms=96, min_speech_duration_ms=64, prefix_padding_ms=64)
    s = Session(config=SessionConfig(turn_detection=td))
    outs = s.send(InputAudioBufferAppend(audio=bytes(16_000)))  # 500 ms
    assert kinds(outs) == ["ScoreVad"] and outs[0].start_ms == 0
    assert isinstance(outs[0], ScoreVad)
    outs = s.back(VadScores((0.1, 0.9, 0.9, 0.1, 0.1, 0.1)))
    assert kinds(outs) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
        "response.created",
        "SubmitAsr",
    ]
    assert (outs[0].audio_start_ms, outs[0].item_id) == (0, "item_1")
    assert (outs[1].audio_end_ms, outs[1].item_id) == (192, "item_1")
    assert outs[3].item_id == "item_1" and outs[3].client_event_id is None
    # silence began at 96 ms: the ASR gets 296 ms; the rest of the append stays in the
    # buffer, the start of whatever comes next (D35)
    assert len(outs[5].pcm16) == 296 * 32
    assert s.p.pending_bytes() == (500 - 296) * 32
    # speech during the reply barges in
    s.send(InputAudioBufferAppend(audio=bytes(16_000)))
    outs = s.back(VadScores((0.9, 0.9)))
    assert kinds(outs) == [
        "input_audio_buffer.speech_started",
        "Abort",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[0].audio_start_ms == 192 - 64
    assert outs[4].response.status_details.reason == "turn_detected"
    # a middle score never ends speech; low ones do, after the silence duration
    outs = s.back(VadScores((0.4, 0.4, 0.4, 0.4)))
    assert outs == []
    outs = s.back(VadScores((0.1, 0.1)))
    assert kinds(outs)[:2] == ["input_audio_buffer.speech_stopped", "conversation.item.added"]


def test_vad_without_interrupt_defers_the_commit() -> None:
    td = TurnDetection(silence_duration_ms=32, min_speech_duration_ms=32, interrupt_response=False)
    s = Session(config=SessionConfig(turn_detection=td))
    s.send(InputAudioBufferAppend(audio=bytes(16_000)))
    # silence from 320 ms: the cut (520 ms) is past the append, so nothing stays (D35)
    s.back(VadScores((0.9,) * 10 + (0.1,)))
    assert s.p.active is not None
    outs = s.back(VadScores((0.9, 0.1)))  # nothing appended since the VAD commit
    assert kinds(outs) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "error",
    ]
    assert outs[2].error.code == "input_audio_buffer_empty" and outs[2].error.event_id is None
    s.send(InputAudioBufferAppend(audio=bytes(16_000)))  # 500..1000 ms
    outs = s.back(VadScores((0.1,) * 3 + (0.9, 0.1)))  # speech at 512 ms, silence at 544
    assert kinds(outs) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
    ]
    assert len(s.p.deferred) == 1
    # the ASR gets the utterance up to 200 ms after its final silence began (744 ms)
    assert len(s.p.deferred[0].audio) == (744 - 500) * 32
    # the rest of the append (744..1000 ms) stays in the buffer (D35)
    assert s.p.pending_bytes() == (1000 - 500) * 32


def test_item_delete_and_recreate_is_a_new_version() -> None:
    s = Session()
    s.speech_turn()  # item_1 waits for resp_1:asr:1
    assert kinds(s.send(ConversationItemDelete(item_id="item_1"))) == ["conversation.item.deleted"]
    assert s.reject(ConversationItemDelete(item_id="item_1")).code == ErrorCode.ITEM_NOT_FOUND
    audio = ContentPart(type="input_audio", audio=SPEECH)
    outs = s.send(
        ConversationItemCreate(item=ConversationItem(id="item_1", role="user", content=[audio]))
    )
    assert kinds(outs) == ["conversation.item.added"]  # audio without transcript: no done
    exc = s.reject(ConversationItemCreate(item=ConversationItem(id="item_1", role="user")))
    assert (exc.code, exc.param) == (ErrorCode.BAD_EVENT, "item.id")
    # the old version's transcript is dropped, but the request is answered
    outs = s.back(AsrTranscript(request_id="resp_1:asr:1", text="old"))
    assert kinds(outs) == ["SubmitVlm"]
    s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="listen"))
    outs = s.send(ResponseCreate())
    assert kinds(outs) == ["response.created", "SubmitAsr"]
    assert outs[1].item == ItemRef("item_1", 2, 0)
    outs = s.back(AsrTranscript(request_id="resp_2:asr:1", text="new"))
    assert kinds(outs)[:2] == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    outs = s.send(ConversationItemRetrieve(item_id="item_1"))
    assert kinds(outs) == ["conversation.item.retrieved"]
    assert outs[0].item.content[0].transcript == "new"


def test_text_and_image_items_go_straight_to_the_vlm() -> None:
    s = Session()
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    item = ConversationItem(
        role="user",
        content=[
            ContentPart(type="input_text", text="what"),
            ContentPart(type="input_image", image_url=url),
        ],
    )
    outs = s.send(ConversationItemCreate(item=item))
    assert kinds(outs) == ["conversation.item.added", "conversation.item.done"]
    outs = s.send(ResponseCreate(event_id="rc"))
    assert kinds(outs) == ["response.created", "SubmitVlm"]
    assert outs[1].prompt.transcript == "what" and outs[1].prompt.frames == (PNG,)


def test_response_create_without_input_and_with_a_buffered_frame() -> None:
    s = Session()
    assert s.reject(ResponseCreate(event_id="r")).code == ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT
    s.send(InputAudioBufferAppend(video_frames=[JPEG]))
    outs = s.send(ResponseCreate(event_id="r2"))
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.created",
        "SubmitVlm",
    ]
    assert outs[1].client_event_id is None


def test_stage_failure_variants_abort_and_evict() -> None:
    s = Session()
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hi"))
    s.back(VlmDelta(request_id="resp_1:vlm:1", text="One. Two. "))
    outs = s.back(
        StageFailure(
            request_id="resp_1:tts:2",
            code=ErrorCode.STAGE_FAILED,
            message="boom",
            may_have_accepted=True,
            engine_dead=True,
        )
    )
    assert kinds(outs) == [
        "Abort",
        "EvictReplica",
        "Abort",
        "Abort",
        "error",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert [o.request_id for o in outs if isinstance(o, Abort)] == [
        "resp_1:tts:2",
        "resp_1:vlm:1",
        "resp_1:tts:1",
    ]
    assert isinstance(outs[1], EvictReplica) and outs[1].stage == "tts"
    assert outs[4].error.code == "runtime_data_plane_stream_failed"
    assert outs[4].error.type == "server_error"
    assert outs[5].response.status == "failed"
    # stale failure: dropped
    assert (
        s.back(StageFailure(request_id="resp_1:tts:1", code=ErrorCode.ENGINE_ERROR, message=""))
        == []
    )


def test_clear_drops_the_buffer_only() -> None:
    s = Session()
    s.speech_turn()
    s.send(InputAudioBufferAppend(audio=SPEECH, video_frames=[JPEG]))
    outs = s.send(InputAudioBufferClear())
    assert kinds(outs) == ["input_audio_buffer.cleared"]
    assert s.p.pending_bytes() == 0 and s.p.active is not None
    assert s.reject(InputAudioBufferCommit()).code == ErrorCode.INPUT_AUDIO_BUFFER_EMPTY


def test_idle_timeout_and_close_end_everything() -> None:
    s = Session(config=SessionConfig(idle_timeout_s=2.0))
    s.now = 1500
    assert kinds(s.send(SessionHeartbeat())) == ["session.heartbeat_ack"]
    assert s.p.next_deadline() == 3500
    with pytest.raises(RemoteProtocolError):
        s.p.receive(InputAudioBufferCommit(), 3000)  # refused: no refresh
    assert s.p.next_deadline() == 3500
    s.p.handle_timeout(3499)
    assert s.p.next_outputs() == []
    s.speech_turn()  # accepted at 1500 (s.now)
    s.p.handle_timeout(3500)
    outs = s.p.next_outputs()
    assert kinds(outs) == ["Abort", "session.closed", "CloseSession"]
    assert outs[1].reason == "idle_timeout"
    assert isinstance(outs[2], CloseSession)
    assert s.p.next_deadline() is None
    s.p.receive(InputAudioBufferCommit(), 4000)  # ignored, no raise
    s.p.backend_event(AsrTranscript(request_id="resp_1:asr:1", text="x"), 4000)
    assert s.p.next_outputs() == []

    c = Session()
    c.speech_turn()
    outs = c.send(SessionClose(reason="bye"))
    assert kinds(outs) == ["Abort", "session.closed", "CloseSession"]
    assert outs[1].reason == "bye"


def test_idle_retention_frees_room_before_the_backpressure_check() -> None:
    s = Session(limits=Limits(max_pending_input_bytes=20_000))
    for _ in range(5):  # 400 ms of quiet each: the idle pre-roll keeps only the newest
        s.send(InputAudioBufferAppend(audio=bytes(12_800)))
    assert s.p.pending_bytes() == 12_800
    s.send(InputAudioBufferAppend(audio=SPEECH))  # capturing from here on
    exc = s.reject(InputAudioBufferAppend(audio=bytes(12_800)))
    assert exc.code == ErrorCode.INPUT_BACKPRESSURE


def test_session_update_refusal_carries_the_validator_code() -> None:
    s = Session()
    patch = SessionPatch(turn_detection={"type": "semantic_vad", "eagerness": "eager"})
    exc = s.reject(SessionUpdate(event_id="u", session=patch))
    assert (exc.code, exc.event_id) == (ErrorCode.UNSUPPORTED_TURN_DETECTION, "u")
    outs = s.send(SessionUpdate(session=SessionPatch(turn_detection={"threshold": 0.6})))
    assert kinds(outs) == ["session.updated"]
    outs = s.send(InputAudioBufferAppend(audio=QUIET))
    assert kinds(outs) == ["ScoreVad"]
    assert isinstance(outs[0], ScoreVad) and outs[0].pcm16 == QUIET


def test_vad_audio_start_is_not_before_the_last_reset() -> None:
    td = TurnDetection(min_speech_duration_ms=32, prefix_padding_ms=300)
    s = Session(config=SessionConfig(turn_detection=td))
    s.send(InputAudioBufferAppend(audio=bytes(6400)))  # 200 ms
    s.send(InputAudioBufferClear())  # reset at 200 ms
    s.send(InputAudioBufferAppend(audio=bytes(6400)))
    outs = s.back(VadScores((0.1,) * 8 + (0.9,)))  # frame 8 starts at 256 ms
    assert kinds(outs) == ["input_audio_buffer.speech_started"]
    assert outs[0].audio_start_ms == 200


def test_results_for_unknown_or_finished_requests_are_dropped() -> None:
    s = Session()
    started_audio(s)
    assert s.back(TtsAudio(request_id="resp_1:tts:9", pcm16=CHUNK)) == []
    assert s.back(AsrTranscript(request_id="resp_1:asr:1", text="again")) == []
    assert s.back(VlmDelta(request_id="resp_1:vlm:1", text="more. ")) == []
    assert s.back(TtsDone(request_id="resp_1:vlm:1")) == []  # wrong stage
    outs = s.back(TtsDone(request_id="resp_1:tts:1"))
    assert kinds(outs)[-3:] == ["response.done", "rate_limits.updated", "ResponseEnded"]
    assert s.back(TtsAudio(request_id="resp_1:tts:1", pcm16=CHUNK)) == []
    assert not any(isinstance(o, SubmitAsr | SubmitTts) for o in outs)


# --- the revised decisions (docs/session-semantics.md) ------------------------------------

IMAGE_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def create(role: str, *parts: ContentPart, item_id: str | None = None) -> ConversationItemCreate:
    return ConversationItemCreate(
        event_id="ic", item=ConversationItem(id=item_id, role=role, content=list(parts))
    )


def test_item_create_content_rules() -> None:
    s = Session()
    image = ContentPart(type="input_image", image_url=IMAGE_URL)
    audio = ContentPart(type="input_audio", audio=SPEECH)
    text = ContentPart(type="input_text", text="hi")
    for role in ("assistant", "system"):
        exc = s.reject(create(role, text, image))
        assert (exc.code, exc.param) == (ErrorCode.BAD_EVENT, "item.content[1].type")
    exc = s.reject(create("user", ContentPart(type="refusal", text="x")))
    assert (exc.code, exc.param) == (ErrorCode.BAD_EVENT, "item.content[0].type")
    exc = s.reject(create("user", audio, text, audio))
    assert (exc.code, exc.param) == (ErrorCode.BAD_EVENT, "item.content[2].transcript")
    exc = s.reject(create("user", ContentPart(type="input_audio", audio=b"\x00" * 3)))
    assert (exc.code, exc.param) == (ErrorCode.BAD_AUDIO, "item.content[0].audio")
    exc = s.reject(create("user", ContentPart(type="input_image", image_url="data:,x")))
    assert (exc.code, exc.param) == (ErrorCode.INVALID_IMAGE, "item.content[0].image_url")
    exc = s.reject(create("bot", text))
    assert (exc.code, exc.param) == (ErrorCode.BAD_EVENT, "item.role")
    # one untranscribed audio part beside transcribed ones and text is fine
    heard = ContentPart(type="input_audio", transcript="hello")
    assert kinds(s.send(create("user", heard, audio))) == ["conversation.item.added"]
    # assistant and system items are done at once, untranscribed audio or not
    for role in ("assistant", "system"):
        outs = s.send(create(role, audio))
        assert kinds(outs) == ["conversation.item.added", "conversation.item.done"]
    assert len(s.p.unanswered) == 1
    assert s.p.pending_bytes() == len(SPEECH)  # only the user item's audio is held


def test_user_item_audio_goes_through_asr_beside_text_at_its_content_index() -> None:
    s = Session()
    text = ContentPart(type="input_text", text="look:")
    outs = s.send(create("user", text, ContentPart(type="input_audio", audio=SPEECH), item_id="u1"))
    assert kinds(outs) == ["conversation.item.added"]  # awaits its transcript
    outs = s.send(ResponseCreate())
    assert kinds(outs) == ["response.created", "SubmitAsr"]
    assert outs[1].item == ItemRef("u1", 1, 1)
    assert s.p.pending_bytes() == 0  # audio released at its SubmitAsr
    outs = s.back(AsrTranscript(request_id="resp_1:asr:1", text="a cup"))
    assert kinds(outs) == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
        "SubmitVlm",
    ]
    assert outs[0].content_index == 1
    assert outs[1].item.content[1].transcript == "a cup"
    assert outs[2].prompt.transcript == "look: a cup"


def test_camera_profile_items_and_speech_commits_are_done_at_once() -> None:
    c = Session(profile="camera")
    outs = c.send(create("user", ContentPart(type="input_audio", audio=SPEECH)))
    assert kinds(outs) == ["conversation.item.added", "conversation.item.done"]
    c.send(InputAudioBufferAppend(audio=SPEECH, video_frames=[JPEG]))
    outs = c.send(InputAudioBufferCommit(event_id="c", create_response=True))
    assert kinds(outs) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.created",
        "SubmitVlm",
    ]
    assert [p.type for p in outs[0].item.content] == ["input_audio", "input_image"]
    assert c.p.pending_bytes() == 0  # everything released at the SubmitVlm


def test_created_items_do_not_count_toward_max_pending_commits() -> None:
    s = Session(limits=Limits(max_pending_commits=1))
    for _ in range(3):
        s.send(create("user", ContentPart(type="input_text", text="hi")))
    s.send(InputAudioBufferAppend(audio=SPEECH))
    s.send(InputAudioBufferCommit(event_id="r1"))  # retained: the one allowed
    s.send(InputAudioBufferAppend(audio=SPEECH))
    exc = s.reject(InputAudioBufferCommit(event_id="r2"))
    assert (exc.code, exc.event_id) == (ErrorCode.INPUT_BACKPRESSURE, "r2")
    # a quiet commit is never refused for backpressure
    s.send(InputAudioBufferClear())
    s.send(InputAudioBufferAppend(audio=QUIET))
    outs = s.send(InputAudioBufferCommit(event_id="q"))
    assert kinds(outs)[-1] == "response.listen"


def test_user_item_bytes_count_as_pending_input() -> None:
    s = Session(limits=Limits(max_pending_input_bytes=700))
    s.send(InputAudioBufferAppend(audio=QUIET))  # 640 bytes in the buffer
    image = ContentPart(type="input_image", image_url=IMAGE_URL)
    exc = s.reject(create("user", image))
    assert exc.code == ErrorCode.INPUT_BACKPRESSURE
    s.send(InputAudioBufferClear())
    s.send(create("user", image))
    assert s.p.pending_bytes() == len(PNG)


def test_commit_releases_audio_without_speech_and_keeps_frames_until_the_vlm() -> None:
    s = Session()
    s.speech_turn()  # resp_1 active
    s.send(InputAudioBufferAppend(audio=QUIET, video_frames=[JPEG]))
    s.send(InputAudioBufferCommit(event_id="d", create_response=True))  # deferred
    assert s.p.pending_bytes() == len(JPEG)
    s.send(InputAudioBufferAppend(audio=SPEECH))
    s.send(InputAudioBufferCommit(event_id="d2", create_response=True))  # deferred
    assert s.p.pending_bytes() == len(JPEG) + len(SPEECH)
    s.send(ResponseCancel())  # resp_2 takes both: ASR for the speech one
    assert s.p.pending_bytes() == len(JPEG)  # frames wait for the SubmitVlm
    s.back(AsrTranscript(request_id="resp_2:asr:1", text="and now"))
    assert s.p.pending_bytes() == 0


def test_manual_commit_during_vad_speech_resets_the_detector() -> None:
    td = TurnDetection(silence_duration_ms=64, min_speech_duration_ms=64)
    s = Session(config=SessionConfig(turn_detection=td))
    s.send(InputAudioBufferAppend(audio=bytes(16_000)))
    outs = s.back(VadScores((0.9, 0.9)))
    assert kinds(outs) == ["input_audio_buffer.speech_started"]
    outs = s.send(InputAudioBufferCommit(event_id="m"))
    assert outs[1].item_id == outs[0].item.id == "item_1"  # the speech_started id
    assert s.p.vad.state == "silence"
    assert s.back(VadScores((0.1, 0.1, 0.1))) == []  # no speech_stopped: it was committed
    # any change of turn_detection resets it too
    s.back(VadScores((0.9, 0.9)))
    assert s.p.vad.state == "speech"
    s.send(SessionUpdate(session=SessionPatch(turn_detection={**td.public(), "threshold": 0.6})))
    assert s.p.vad.state == "silence"
    assert s.p.buffer.speech_item_id is not None  # the buffer (and its speech) stays


def test_vad_stop_with_max_pending_commits_drops_the_utterance() -> None:
    td = TurnDetection(silence_duration_ms=32, min_speech_duration_ms=32, interrupt_response=False)
    s = Session(config=SessionConfig(turn_detection=td), limits=Limits(max_pending_commits=1))
    s.send(InputAudioBufferAppend(audio=bytes(3200)))  # 100 ms
    s.back(VadScores((0.9, 0.1)))  # resp_1
    s.send(InputAudioBufferAppend(audio=bytes(3200)))
    s.back(VadScores((0.1, 0.9, 0.1)))  # deferred: the one allowed
    s.send(InputAudioBufferAppend(audio=bytes(3200)))
    outs = s.back(VadScores((0.1, 0.1, 0.9, 0.1)))
    assert kinds(outs) == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "error",
        "input_audio_buffer.cleared",
    ]
    assert outs[2].error.code == "input_backpressure" and outs[2].error.event_id is None
    assert s.p.buffer.nbytes == 0
    assert s.p.pending_bytes() == len(s.p.deferred[0].audio)


def test_decision_text_is_the_whole_reply() -> None:
    s = Session()
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hi"))
    # no delta: the decision text is the reply
    outs = s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="speak", text="Yes. Sure"))
    assert [o.text for o in outs if isinstance(o, SubmitTts)] == ["Yes. Sure"]
    s.send(ResponseCancel())
    # deltas streamed: a decision with nothing left to speak adds nothing
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_2:asr:1", text="hi"))
    outs = s.back(VlmDelta(request_id="resp_2:vlm:1", text='He said "hi." Then (he left.) '))
    assert [o.text for o in outs if isinstance(o, SubmitTts)] == [
        'He said "hi."',
        "Then (he left.)",
    ]
    outs = s.back(VlmDecisionResult(request_id="resp_2:vlm:1", action="speak", text="ignored."))
    assert outs == []
    s.back(TtsDone(request_id="resp_2:tts:1"))
    outs = s.back(TtsDone(request_id="resp_2:tts:2"))
    assert kinds(outs) == ["response.done", "rate_limits.updated", "ResponseEnded"]


def test_listen_after_tts_completes_when_the_tts_finishes() -> None:
    s = Session()
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hi"))
    s.back(VlmDelta(request_id="resp_1:vlm:1", text="One. Two"))
    outs = s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="listen"))
    assert outs == []  # the unspoken rest is dropped, TTS is still open
    s.back(TtsAudio(request_id="resp_1:tts:1", pcm16=CHUNK, text="One."))
    outs = s.back(TtsDone(request_id="resp_1:tts:1"))
    assert kinds(outs)[-3:] == ["response.done", "rate_limits.updated", "ResponseEnded"]
    assert outs[-3].response.status == "completed"


def test_cancel_clears_every_response_that_may_still_be_playing() -> None:
    s = Session()
    started_audio(s)
    s.back(TtsDone(request_id="resp_1:tts:1"))  # resp_1 plays on
    s.speech_turn()  # resp_2
    s.back(AsrTranscript(request_id="resp_2:asr:1", text="hi"))
    s.back(VlmDecisionResult(request_id="resp_2:vlm:1", action="speak", text="Again."))
    s.back(TtsAudio(request_id="resp_2:tts:1", pcm16=CHUNK, text="Again."))
    s.back(TtsDone(request_id="resp_2:tts:1"))  # resp_2 plays on too
    s.speech_turn()  # resp_3, waiting for its transcript
    outs = s.send(ResponseCancel())
    assert kinds(outs) == [
        "Abort",
        "output_audio_buffer.cleared",
        "output_audio_buffer.cleared",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert [outs[1].response_id, outs[2].response_id] == ["resp_1", "resp_2"]
    assert not s.p.playing()


def test_cleared_only_path_clears_all_or_the_named_one() -> None:
    s = Session()
    started_audio(s)
    s.back(TtsDone(request_id="resp_1:tts:1"))
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_2:asr:1", text="hi"))
    s.back(VlmDecisionResult(request_id="resp_2:vlm:1", action="speak", text="Again."))
    s.back(TtsAudio(request_id="resp_2:tts:1", pcm16=CHUNK, text="Again."))
    s.back(TtsDone(request_id="resp_2:tts:1"))
    outs = s.send(OutputAudioBufferClear(response_id="resp_2"))
    assert [(tag(o), o.response_id) for o in outs] == [("output_audio_buffer.cleared", "resp_2")]
    assert s.p.playing()
    outs = s.send(ResponseCancel())
    assert [(tag(o), o.response_id) for o in outs] == [("output_audio_buffer.cleared", "resp_1")]
    assert s.p.epoch == 2


def test_playback_ack_finds_the_response_by_item_id() -> None:
    s = Session()
    started_audio(s)
    outs = s.send(PlaybackAck(item_id="item_2", played_ms=100))
    assert outs[0].response_id == "resp_1" and outs[0].played_ms == 100
    exc = s.reject(PlaybackAck(item_id="item_1", played_ms=100))
    assert (exc.code, exc.param) == (ErrorCode.PLAYBACK_ITEM_NOT_FOUND, "response_id")
    exc = s.reject(PlaybackAck(played_ms=100))
    assert (exc.code, exc.param) == (ErrorCode.PLAYBACK_ITEM_NOT_FOUND, "response_id")
    s.speech_turn()  # resp_2 has sent no audio
    exc = s.reject(PlaybackAck(response_id="resp_2", played_ms=0))
    assert (exc.code, exc.param) == (ErrorCode.PLAYBACK_ITEM_NOT_FOUND, "response_id")


def test_idle_timeout_zero_means_the_operators_and_zero_from_both_disables_it() -> None:
    s = Session(config=SessionConfig(idle_timeout_s=0.0))
    assert s.p.next_deadline() == 300_000  # the operator's default: 0 cannot lift it
    s = Session(config=SessionConfig(idle_timeout_s=0.0), limits=Limits(idle_timeout_s=0))
    assert s.p.next_deadline() is None
    s.p.handle_timeout(10**9)
    assert s.p.next_outputs() == [] and not s.p.closed
    s = Session(config=SessionConfig(idle_timeout_s=5.0), limits=Limits(idle_timeout_s=0))
    assert s.p.next_deadline() == 5_000  # no operator's timeout: the session's own applies


def test_resampled_length_is_floored() -> None:
    s = Session()
    s.send(InputAudioBufferAppend(audio=bytes(10), sample_rate_hz=44_100))  # 5 samples -> 1
    assert s.p.pending_bytes() == 2
    s.send(InputAudioBufferAppend(audio=bytes(4), sample_rate_hz=48_000))  # 2 samples -> 0
    assert s.p.pending_bytes() == 2 and s.p.clock_samples == 1


def test_blank_transcript_emits_only_the_item_done() -> None:
    s = Session()
    s.speech_turn()
    outs = s.back(AsrTranscript(request_id="resp_1:asr:1", text="  "))
    assert kinds(outs) == ["conversation.item.done", "SubmitVlm"]
    assert outs[1].prompt.transcript is None


def test_text_only_responses_emit_the_reply_as_text() -> None:
    s = Session(config=SessionConfig(output_modalities=("text",)))
    s.speech_turn()
    s.back(AsrTranscript(request_id="resp_1:asr:1", text="hi"))
    assert s.back(VlmDelta(request_id="resp_1:vlm:1", text="Hello. There ")) == []
    outs = s.back(VlmDecisionResult(request_id="resp_1:vlm:1", action="speak"))
    assert kinds(outs) == [
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert outs[3].delta == "Hello. There"
    assert outs[8].response.status == "completed"
