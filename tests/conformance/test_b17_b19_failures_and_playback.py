"""B17 stage failure, B18 submission compensation, B19 playback truth."""

from __future__ import annotations

from spec import events as ev
from spec.effects import Abort, EvictReplica, SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from spec.stage_results import StageFailure
from tests.conformance.harness import Driver, speech_pcm


def test_b17_a_stage_failure_fails_only_the_owning_response_and_the_session_goes_on() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("hi")
    out = d.fail(d.last(SubmitVlm).request_id, ErrorCode.ENGINE_ERROR)
    assert d.tags(out) == ["error", "response.done", "rate_limits.updated", "ResponseEnded"]
    assert d.events("error", out)[0].error.code == "engine_error"
    assert d.events("response.done", out)[0].response.status == "failed"
    d.full_turn("again", "Fine.")
    assert d.events("response.done")[-1].response.status == "completed"


def test_b17_asr_finished_then_the_next_step_failed_cleans_up_and_fails_the_rest() -> None:
    d = Driver()
    d.speech_turn()  # resp_1 active
    for n in range(2):
        d.append(speech_pcm(200 + n))
        d.commit(f"seg{n}", create_response=True)
    d.transcribe("one")
    d.reply("", action="listen")  # resp_2 starts with two segments
    first, second = d.effects(SubmitAsr)[-2:]
    d.transcribe("finished", first)
    out = d.fail(second.request_id, ErrorCode.STAGE_FAILED)
    assert d.tags(out) == [
        "error",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    assert d.events("conversation.item.input_audio_transcription.failed", out)[0].item_id == (
        second.item.item_id
    )
    assert d.p.statistics().active_response is None
    assert d.p.pending_bytes == 0
    d.full_turn()  # no stall


def test_b17_failure_starts_the_deferred_commit_next() -> None:
    d = Driver()
    d.speech_turn()
    d.append(speech_pcm(200))
    d.commit("waiting", create_response=True)
    d.fail(d.last(SubmitAsr).request_id, ErrorCode.STAGE_FAILED)
    assert d.p.statistics().active_response == "resp_2"


def test_b18_submission_failure_after_possible_acceptance_aborts_once_keeping_the_error() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("hi")
    d.reply("Hello there.")
    tts = d.last(SubmitTts)
    out = d.result(
        StageFailure(
            tts.request_id, ErrorCode.STAGE_FAILED, "submit: queue closed", may_have_accepted=True
        )
    )
    aborts = [o for o in out if isinstance(o, Abort)]
    assert aborts == [Abort(tts.request_id, "tts", "resp_1")]
    assert d.events("error", out)[0].error.message == "submit: queue closed"
    assert len(d.events("response.done", out)) == 1


def test_b18_cancellation_during_submission_then_the_late_failure_is_fenced() -> None:
    d = Driver()
    d.speech_turn()
    asr = d.last(SubmitAsr)
    out = d.send(ev.ResponseCancel())
    assert Abort(asr.request_id, "asr", "resp_1") in out
    late = StageFailure(asr.request_id, ErrorCode.STAGE_FAILED, "cancelled", may_have_accepted=True)
    assert d.result(late) == []
    assert len(d.events("response.done")) == 1


def test_b18_a_dead_replica_is_evicted_at_once_and_the_request_failed_exactly_once() -> None:
    d = Driver()
    d.speech_turn()
    asr = d.last(SubmitAsr)
    dead = StageFailure(
        asr.request_id,
        ErrorCode.ENGINE_ERROR,
        "engine dead",
        may_have_accepted=True,
        engine_dead=True,
    )
    out = d.result(dead)
    assert [o for o in out if isinstance(o, EvictReplica)] == [EvictReplica("asr")]
    assert [o for o in out if isinstance(o, Abort)] == [Abort(asr.request_id, "asr", "resp_1")]
    assert d.result(dead) == []  # a second report of the same death changes nothing
    assert len(d.events("response.done")) == 1


def test_b19_playback_ack_moves_a_monotonic_cursor_capped_at_generated() -> None:
    d = Driver()
    d.full_turn()  # 500 ms of audio
    played = []
    for ms in (100, 50, 300, 9999):
        out = d.send(ev.PlaybackAck(response_id="resp_1", item_id="item_2", played_ms=ms))
        played.append(d.events("playback.acknowledged", out)[0].played_ms)
    assert played == [100, 100, 300, 500]
    err = d.refuse(ev.PlaybackAck(response_id="resp_9", played_ms=1))
    assert (
        err.code is ErrorCode.RESPONSE_NOT_ACTIVE or err.code is ErrorCode.PLAYBACK_ITEM_NOT_FOUND
    )
    err = d.refuse(ev.PlaybackAck(response_id="resp_1", item_id="item_1", played_ms=1))
    assert err.code is ErrorCode.PLAYBACK_ITEM_MISMATCH


def test_b19_a_cancelled_reply_keeps_only_its_played_prefix_in_history() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("say hello")
    d.reply("hello there")
    d.speak(ms=1000, done=False)  # "hello there" over 1000 ms
    d.send(ev.PlaybackAck(response_id="resp_1", played_ms=400))
    out = d.send(ev.ResponseCancel())
    assert d.events("response.output_audio_transcript.done", out)[0].transcript == "hell"
    d.append(speech_pcm(300))
    d.commit(create_response=True)
    d.transcribe("and?")
    assert ("assistant", "hell") in d.last(SubmitVlm).prompt.history


def test_b19_a_late_ack_for_an_older_response_affects_only_that_response() -> None:
    d = Driver()
    d.full_turn("one", "First reply.")
    d.full_turn("two", "Second reply.")
    out = d.send(ev.PlaybackAck(response_id="resp_1", played_ms=250))
    assert d.events("playback.acknowledged", out)[0].response_id == "resp_1"
    assert d.p._responses["resp_2"].playback.played_ms == 0
    assert d.p.statistics().playing == ("resp_1", "resp_2")
