"""B21 Client playback: speech start, `output_audio_buffer.cleared` or a cancelled
`response.done` clear queued local audio at once, also after generation completed; audio
of an older response after an interrupt is dropped; the played cursor is reported (and
acknowledged) after the clear, from the worklet's report made before it dropped the audio."""

from __future__ import annotations

from tests.web.client_driver import Driver


def vad_reply(d: Driver, response_id: str = "resp_1", chunks: int = 1) -> None:
    d.committed("item_1", None)
    d.created(response_id)
    for _ in range(chunks):
        d.delta(response_id, "item_2")


def test_b21_vad_speech_start_during_generation_clears_at_once() -> None:
    d = Driver("vad").ready()
    vad_reply(d)
    d.step("playback_started", response_id="resp_1")
    out = d.speech_started()
    assert d.of("clear", out) == [{"kind": "clear", "response_id": "resp_1"}]
    assert d.playback_state("resp_1") == "cleared"
    late = d.delta("resp_1", "item_2")
    assert d.of("play", late) == []
    assert d.of("fenced", late) == [{"kind": "fenced", "response_id": "resp_1", "audio_ms": 1.0}]
    d.step("playback_stopped", response_id="resp_1", played_ms=30.0)
    assert [(a["response_id"], a["played_ms"], a["item_id"]) for a in d.sent("playback.ack")] == [
        ("resp_1", 30.0, "item_2")
    ]
    d.done("resp_1", "cancelled")
    assert len(d.of("clear")) == 1


def test_b21_vad_speech_start_after_generation_completed_with_audio_queued_clears_it() -> None:
    d = Driver("vad").ready()
    vad_reply(d, chunks=8)
    d.server("response.output_audio.done", response_id="resp_1", item_id="item_2")
    d.done("resp_1")
    assert d.playback_state("resp_1") == "draining"
    out = d.speech_started()
    assert d.of("clear", out) == [{"kind": "clear", "response_id": "resp_1"}]
    d.server("output_audio_buffer.cleared", response_id="resp_1")
    assert len(d.of("clear")) == 1


def test_b21_speech_start_does_not_clear_a_drained_reply() -> None:
    d = Driver("vad").ready()
    vad_reply(d)
    d.done("resp_1")
    d.step("playback_drained", response_id="resp_1", played_ms=1.0)
    assert d.of("clear", d.speech_started()) == []


def test_b21_late_audio_of_an_older_response_after_interrupt_is_dropped() -> None:
    d = Driver("vad").ready()
    vad_reply(d)
    d.speech_started("item_3")
    d.done("resp_1", "cancelled")
    d.committed("item_3", None)
    d.created("resp_2")
    d.delta("resp_2", "item_4")
    late = d.delta("resp_1", "item_2")
    assert d.of("play", late) == []
    stale_clear = d.server("output_audio_buffer.cleared", response_id="resp_1")
    assert d.of("clear", stale_clear) == []
    assert d.playback_state("resp_2") == "queued"
    assert d.hold_state("hold_2") == "answering"


def test_b21_cancelled_done_and_cleared_event_clear_playback() -> None:
    d = Driver("ptt").ready()
    d.committed("item_1", d.hold())
    d.created("resp_1")
    d.delta("resp_1")
    assert len(d.of("clear", d.done("resp_1", "cancelled"))) == 1
    d.committed("item_2", d.hold())
    d.created("resp_2")
    d.delta("resp_2")
    d.done("resp_2")
    out = d.server("output_audio_buffer.cleared")
    assert d.of("clear", out) == [{"kind": "clear", "response_id": "resp_2"}]


def test_b21_failed_done_plays_out_what_arrived() -> None:
    d = Driver("ptt").ready()
    d.committed("item_1", d.hold())
    d.created("resp_1")
    d.delta("resp_1")
    out = d.done("resp_1", "failed")
    assert d.of("drain", out) == [{"kind": "drain", "response_id": "resp_1"}]
    assert [o["code"] for o in d.of("notice", out)] == ["response_failed"]
    assert d.snapshot()["connection"] == "ready"


def test_b21_played_cursor_is_monotonic_and_reports_after_the_end_are_ignored() -> None:
    d = Driver("vad").ready()
    vad_reply(d)
    d.speech_started()
    d.step("playback_stopped", response_id="resp_1", played_ms=40.0)
    d.step("playback_stopped", response_id="resp_1", played_ms=10.0)
    assert [a["played_ms"] for a in d.sent("playback.ack")] == [40.0, 40.0]
    assert d.step("playback_drained", response_id="resp_1", played_ms=99.0) == []
    assert d.step("playback_started", response_id="resp_unknown") == []
