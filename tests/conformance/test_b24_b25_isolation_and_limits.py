"""B24 isolation, B25 limits."""

from __future__ import annotations

import pytest

from core.admission import SessionSlots
from spec import events as ev
from spec.effects import SubmitAsr
from spec.errors import ErrorCode
from spec.limits import Limits
from tests.conformance.harness import Driver, jpeg, speech_pcm


def test_b24_one_sessions_bad_input_and_backend_failure_do_not_affect_another() -> None:
    good, bad = Driver(), Driver()
    good.speech_turn()
    for event in (
        ev.InputAudioBufferAppend(audio=b"\x01"),
        ev.InputAudioBufferCommit(),
        ev.ConversationItemDelete(item_id="nope"),
        ev.ResponseCancel(),
    ):
        bad.refuse(event)
    bad.speech_turn()
    bad.fail(bad.last(SubmitAsr).request_id, ErrorCode.ENGINE_ERROR)
    assert bad.events("response.done")[-1].response.status == "failed"
    good.transcribe("fine")
    good.reply("All good.")
    good.speak()
    assert good.events("response.done")[-1].response.status == "completed"
    assert good.events("error") == []


@pytest.mark.parametrize(
    ("frames", "param"),
    [
        ([jpeg(), jpeg(), jpeg()], "video_frames"),
        ([b""], "video_frames[0]"),
        ([jpeg(), b"GIF89a"], "video_frames[1]"),
        ([b"\xff\xd8" + bytes(100)], "video_frames[0]"),
    ],
)
def test_b25_frame_count_size_and_kind_are_enforced(frames: list[bytes], param: str) -> None:
    d = Driver(limits=Limits(max_video_frame_bytes=80))
    err = d.refuse(ev.InputAudioBufferAppend(video_frames=frames, event_id="f"))
    assert (err.code, err.param, err.event_id) == (ErrorCode.INVALID_VIDEO_FRAMES, param, "f")


@pytest.mark.parametrize(
    ("kwargs", "code", "param"),
    [
        ({"format": "mp3"}, ErrorCode.UNSUPPORTED_AUDIO_FORMAT, "format"),
        ({"sample_rate_hz": 96_000}, ErrorCode.UNSUPPORTED_AUDIO_FORMAT, "sample_rate_hz"),
        ({"sample_rate_hz": 4_000}, ErrorCode.UNSUPPORTED_AUDIO_FORMAT, "sample_rate_hz"),
        ({"audio": b"\x00\x01\x02"}, ErrorCode.BAD_AUDIO, "audio"),
        ({"audio": b""}, ErrorCode.INVALID_INPUT_MODALITY, "audio"),
    ],
)
def test_b25_formats_and_sample_rates_are_enforced(
    kwargs: dict, code: ErrorCode, param: str
) -> None:
    d = Driver()
    err = d.refuse(ev.InputAudioBufferAppend(**{"audio": speech_pcm(10), **kwargs}))
    assert (err.code, err.param) == (code, param)


@pytest.mark.parametrize(
    ("fmt", "rate", "width"),
    [
        ("pcm16", 24_000, 2),
        ("pcm_f32le", 48_000, 4),
        ("g711_ulaw", 8_000, 1),
        ("g711_alaw", 8_000, 1),
        ("pcm16", 8_000, 2),
    ],
)
def test_b25_every_input_format_and_rate_is_converted_to_16k(
    fmt: str, rate: int, width: int
) -> None:
    d = Driver()
    d.append(bytes(rate // 10 * width), format=fmt, sample_rate_hz=rate)  # 100 ms
    assert abs(d.p.statistics().buffer_audio_bytes - 3200) <= 2


def test_b25_idle_timeout_closes_the_session() -> None:
    d = Driver(config={"idle_timeout_s": 5})
    d.append(speech_pcm(100))
    deadline = d.p.next_deadline()
    assert deadline == d.now + 5000
    d.p.handle_timeout(deadline - 1)
    assert not d.p.closed
    d.p.handle_timeout(deadline)
    out = d.take()
    assert d.tags(out) == ["session.closed", "CloseSession"]
    assert out[0].reason == "idle_timeout"
    d.p.receive(ev.SessionHeartbeat(), d.now + 1)  # ignored after close (I9)
    assert d.take() == []
    assert d.p.next_deadline() is None


def test_b25_max_sessions_is_enforced_with_resource_exhausted() -> None:
    slots = SessionSlots(2)
    slots.admit("a")
    slots.admit("b")
    slots.admit("a")  # idempotent
    with pytest.raises(Exception) as info:
        slots.admit("c")
    assert info.value.code is ErrorCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert info.value.error_type.value == "rate_limit_error"  # type: ignore[attr-defined]
    slots.release("a")
    slots.release("a")
    slots.admit("c")
    assert slots.in_use == 2
