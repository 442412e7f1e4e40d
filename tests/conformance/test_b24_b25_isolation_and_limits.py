"""B24 isolation, B25 limits."""

from __future__ import annotations

import pytest

from core.admission import SessionSlots
from spec import events as ev
from spec.effects import SubmitAsr, SubmitVlm
from spec.errors import ErrorCode
from spec.limits import Limits
from spec.session_config import MAX_NESTING
from tests.conformance.harness import Driver, item_create, jpeg, speech_pcm


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


# --- near-valid input is valid or a typed client error, never a crash (section 10) ---


@pytest.mark.parametrize(
    ("fmt", "rate"),
    [
        ("pcm16", 24_000),
        ("pcm16", 8_000),
        ("pcm16", 48_000),
        ("pcm_f32le", 24_000),
        ("g711_ulaw", 8_000),
    ],
)
def test_b25_a_camera_only_append_is_valid_at_every_input_rate(fmt: str, rate: int) -> None:
    """Reproduction: a frame-only append after `session.update` to 24 kHz input crashed the
    resampler (`array of sample points is empty`)."""
    d = Driver(config={"input_audio_format": fmt, "sample_rate_hz": rate})
    assert d.append(frames=[jpeg()]) == []
    stats = d.p.statistics()
    assert (stats.buffer_frames, stats.buffer_audio_bytes) == (1, 0)
    # and with an explicit override on the append itself
    assert d.append(frames=[jpeg("blue")], format=fmt, sample_rate_hz=rate) == []


@pytest.mark.parametrize("asked", [0.0, 301.0, 3_600.0, 604_800.0, None])
def test_b25_the_operators_idle_timeout_is_a_ceiling_the_client_can_only_lower(
    asked: float | None,
) -> None:
    """Reproduction: `idle_timeout_s: 0` (or a large value) lifted the operator's timeout."""
    d = Driver(limits=Limits(idle_timeout_s=300))
    d.send(ev.SessionUpdate(session=ev.SessionPatch(idle_timeout_s=asked)))
    assert d.p.next_deadline() == d.now + 300_000
    d.send(ev.SessionUpdate(session=ev.SessionPatch(idle_timeout_s=5)))  # lowering works
    assert d.p.next_deadline() == d.now + 5_000


def test_b25_a_client_idle_timeout_applies_when_the_operator_has_none() -> None:
    d = Driver(limits=Limits(idle_timeout_s=0))
    assert d.p.next_deadline() is None
    d.send(ev.SessionUpdate(session=ev.SessionPatch(idle_timeout_s=0)))
    assert d.p.next_deadline() is None
    d.send(ev.SessionUpdate(session=ev.SessionPatch(idle_timeout_s=7)))
    assert d.p.next_deadline() == d.now + 7_000


@pytest.mark.parametrize(
    "asked", [1e306, 1e9, float("inf"), float("nan"), -1.0, 604_801.0], ids=repr
)
def test_b25_a_non_finite_negative_or_huge_idle_timeout_is_refused(asked: float) -> None:
    """Reproduction: `idle_timeout_s: 1e306` overflowed in the timer (a crash loop)."""
    d = Driver()
    err = d.refuse(ev.SessionUpdate(session=ev.SessionPatch(idle_timeout_s=asked), event_id="u"))
    assert (err.code, err.param, err.event_id) == (
        ErrorCode.BAD_EVENT,
        "session.idle_timeout_s",
        "u",
    )
    assert d.p.next_deadline() == d.now + 300_000  # unchanged


def test_b25_free_form_session_objects_nest_at_most_max_nesting_deep() -> None:
    deep: object = {}
    for _ in range(MAX_NESTING):
        deep = [deep]
    d = Driver()
    err = d.refuse(ev.SessionUpdate(session=ev.SessionPatch(extra_body={"x": deep})))
    assert (err.code, err.param) == (ErrorCode.BAD_EVENT, "session.extra_body")
    shallow: object = {}
    for _ in range(MAX_NESTING - 2):
        shallow = [shallow]
    assert d.events(
        "session.updated",
        d.send(ev.SessionUpdate(session=ev.SessionPatch(extra_body={"x": shallow}))),
    )


@pytest.mark.parametrize(
    ("kwargs", "ok_bytes"),
    [
        ({}, 32_000),  # 16 kHz pcm16: the hot path
        ({"sample_rate_hz": 48_000}, 96_000),
        ({"format": "g711_ulaw"}, 8_000),
        ({"format": "pcm_f32le", "sample_rate_hz": 24_000}, 96_000),
    ],
)
def test_b25_audio_per_append_is_bounded_after_decoding(kwargs: dict, ok_bytes: int) -> None:
    """Reproduction: a 14 kB compressed append inflating to 14 MB of audio cost 210 ms of
    loop CPU and 2.4 s of the VAD batch every session shares."""
    d = Driver(limits=Limits(max_append_audio_ms=1_000))
    d.append(bytes(ok_bytes), **kwargs)  # exactly 1 s: accepted
    assert d.p.statistics().buffer_audio_bytes > 0
    err = d.refuse(ev.InputAudioBufferAppend(audio=bytes(ok_bytes * 2), event_id="big", **kwargs))
    assert (err.code, err.param, err.event_id) == (ErrorCode.EVENT_TOO_LARGE, "audio", "big")


def test_b25_the_default_audio_per_append_bounds_a_14_mb_append() -> None:
    d = Driver()
    err = d.refuse(ev.InputAudioBufferAppend(audio=bytes(14_000_000)))
    assert err.code is ErrorCode.EVENT_TOO_LARGE


def _text_item(text: str, role: str = "system") -> ev.ClientEvent:
    return item_create(ev.ContentPart(type="input_text", text=text), role=role)


def test_b25_beyond_max_items_the_oldest_completed_items_are_deleted() -> None:
    """Reproduction: per-session state was unbounded (591 MB in 10 s from one client)."""
    d = Driver(limits=Limits(max_items=3))
    for i in range(3):
        d.send(_text_item(f"note {i}"))
    first = [e.item.id for e in d.events("conversation.item.added")]
    out = d.send(_text_item("note 3"))
    assert [e.item_id for e in d.events("conversation.item.deleted", out)] == [first[0]]
    assert len(d.p.statistics().items) == 3
    err = d.refuse(ev.ConversationItemRetrieve(item_id=first[0]))
    assert err.code is ErrorCode.ITEM_NOT_FOUND
    d.send(_text_item("hello", role="user"))
    d.send(ev.ResponseCreate())
    history = [t.text for t in d.last(SubmitVlm).prompt.history]
    assert history == ["note 2", "note 3"]  # the oldest left history too


def test_b25_items_still_in_progress_are_never_truncated() -> None:
    d = Driver(limits=Limits(max_items=2))
    d.speech_turn()  # a user item awaiting its transcript: in progress
    spoken = d.events("conversation.item.added")[0].item.id
    d.send(_text_item("note a"))
    d.send(_text_item("note b"))  # over the limit: the oldest *completed* item goes
    items = d.p.statistics().items
    assert (items[0][0], items[0][2]) == (spoken, "in_progress")
    assert [s for _, _, s in items] == ["in_progress", "completed"]
    d.transcribe("hello")  # now completed and the oldest: it goes next time
    d.send(_text_item("note c"))
    assert spoken not in [i for i, _, _ in d.p.statistics().items]


def test_b25_an_item_with_more_than_max_content_parts_is_refused() -> None:
    """Reproduction: one item with 400,000 content parts cost 110 MB from 43 kB."""
    parts = [ev.ContentPart(type="input_text", text="x")] * 65
    d = Driver()
    err = d.refuse(item_create(*parts))
    assert (err.code, err.param) == (ErrorCode.BAD_EVENT, "item.content")
    assert d.events("conversation.item.added", d.send(item_create(*parts[:64])))


def test_b25_beyond_max_responses_the_oldest_finished_are_forgotten() -> None:
    d = Driver(config={"output_modalities": ["text"]}, limits=Limits(max_responses=1))
    for words in ("first question", "second question"):
        d.speech_turn()
        d.transcribe(words)
        d.reply(f"answer to {words}")
    first, second = (e.response.id for e in d.events("response.done"))
    assert list(d.p._responses) == [second]
    err = d.refuse(ev.ResponseCancel(response_id=first))
    assert (err.code, err.param) == (ErrorCode.RESPONSE_NOT_ACTIVE, "response_id")
    d.speech_turn()
    d.transcribe("third")
    history = [t.text for t in d.last(SubmitVlm).prompt.history]
    assert "answer to first question" in history  # its item stays, with its own text


def test_b25_a_response_whose_audio_may_still_play_is_remembered() -> None:
    d = Driver(limits=Limits(max_responses=1))
    d.full_turn()
    d.full_turn(transcript="again")
    first, second = (e.response.id for e in d.events("response.done"))
    assert list(d.p._responses) == [first, second]  # the first may still be playing
    d.send(ev.PlaybackAck(response_id=first, played_ms=500))  # played out
    assert list(d.p._responses) == [second]


def test_b25_beyond_max_history_bytes_the_oldest_completed_items_are_deleted() -> None:
    d = Driver(limits=Limits(max_history_bytes=10))
    d.send(_text_item("0123456789"))  # exactly 10 bytes: kept
    first = d.events("conversation.item.added")[-1].item.id
    out = d.send(_text_item("abc"))
    assert [e.item_id for e in d.events("conversation.item.deleted", out)] == [first]
    assert len(d.p.statistics().items) == 1
    out = d.send(_text_item("x" * 11))  # alone over the limit: it goes too, oldest first
    assert len(d.events("conversation.item.deleted", out)) == 2
    assert d.p.statistics().items == ()
