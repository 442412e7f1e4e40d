"""B35 preemptive response: the reply starts during a pause, before the turn has ended,
and reaches the client only when the turn ends on the same words and frames."""

from __future__ import annotations

from typing import Any

import msgspec

from spec import events as ev
from spec.effects import (
    Abort,
    SpeculationOutcome,
    SubmitPartialAsr,
    SubmitTts,
    SubmitVlm,
)
from spec.errors import ErrorCode
from spec.stage_results import (
    AsrPartial,
    StageFailure,
    TtsAudio,
    TtsDone,
    VlmDecisionResult,
    VlmDelta,
)
from tests.conformance.harness import Driver, jpeg, speech_pcm

VAD = {"turn_detection": {"type": "server_vad"}}
HI, LO = 0.9, 0.1
WORDS = "what colour is this"
REPLY = "It is red. The cup is red too."
PCM = bytes(300 * 48)  # 300 ms of 24 kHz pcm16


def _driver(*, preempt: bool = True, **config: Any) -> Driver:
    d = Driver(config={**VAD, **config, "extra_body": {"preemptive_response": preempt}})
    d.p.live.enabled = True  # the runtime does this when its ASR offers partials
    return d


def _pause(d: Driver, words: str = WORDS) -> list[Any]:
    """Speech, then a pause (224 ms of silence; its partial asked on the first frame)
    whose live partial heard `words`."""
    d.append(speech_pcm(32 * 60))
    d.vad(*([HI] * 10), *([LO] * 7))
    partial = d.last(SubmitPartialAsr)
    return d.result(AsrPartial(partial.request_id, words))


def _end_turn(d: Driver) -> list[Any]:
    """The silence goes on until server VAD ends the turn (500 ms)."""
    return d.vad(*([LO] * 9))


def _answer(d: Driver, vlm: SubmitVlm) -> list[Any]:
    """The VLM streams REPLY and decides; every TTS request it led to speaks and ends."""
    out = d.result(VlmDelta(vlm.request_id, REPLY[:11]))
    out += d.result(VlmDelta(vlm.request_id, REPLY[11:]))
    out += d.result(VlmDecisionResult(vlm.request_id, "speak", REPLY))
    for tts in d.effects(SubmitTts):
        out += d.result(TtsAudio(tts.request_id, PCM, tts.text))
        out += d.result(TtsDone(tts.request_id))
    return out


def _wire(outputs: list[Any]) -> list[dict[str, Any]]:
    """The server events as the client reads them, without their ids."""
    wire = []
    for o in outputs:
        if isinstance(o, ev.ServerEvent):
            data = msgspec.to_builtins(o)
            data.pop("event_id", None)
            wire.append(data)
    return wire


def _spoken(d: Driver) -> list[Any]:
    return [o for o in d.log if isinstance(o, ev.ServerEvent)]


def test_b35_a_reply_prepared_in_the_pause_is_adopted_with_the_events_the_client_would_see() -> (
    None
):
    off = _driver(preempt=False)
    _pause(off)
    baseline = _end_turn(off)
    baseline += _answer(off, off.last(SubmitVlm))

    on = _driver()
    _pause(on)
    [vlm] = on.effects(SubmitVlm)  # the reply starts in the pause
    assert vlm.response_id.startswith("spec_")
    before = len(_spoken(on))
    held = _answer(on, vlm)
    assert _wire(held) == []  # P2: nothing of it reaches the wire before the turn ends
    assert len(on.effects(SubmitTts)) == 2  # its sentences are already being spoken
    adopted = _end_turn(on)
    assert _wire(adopted) == _wire(baseline)  # the same events, ids and order, at once
    assert len(_spoken(on)) - before == len(_wire(baseline))
    assert len(on.effects(SubmitVlm)) == 1  # no second request: the prepared one served
    assert [o.outcome for o in on.effects(SpeculationOutcome)] == ["started", "adopted"]
    assert on.effects(Abort) == []


def test_b35_results_that_come_after_the_turn_ended_stream_to_the_adopted_response() -> None:
    on = _driver()
    _pause(on)
    [vlm] = on.effects(SubmitVlm)
    on.result(VlmDelta(vlm.request_id, "It is red. "))  # one sentence, before the end
    out = _end_turn(on)
    assert "response.created" in on.tags(out)
    [first] = on.effects(SubmitTts)
    out = on.result(TtsAudio(first.request_id, PCM, first.text))
    assert "response.output_audio.delta" in on.tags(out)  # live now, not held
    on.result(VlmDelta(vlm.request_id, "The cup is red too."))
    on.result(VlmDecisionResult(vlm.request_id, "speak", REPLY))
    second = on.last(SubmitTts)
    assert second.text == "The cup is red too."
    # its later sentences join the prepared reply's TTS queue, so they play in order
    assert second.response_id == first.response_id == vlm.response_id
    on.result(TtsDone(first.request_id))
    on.result(TtsAudio(second.request_id, PCM, second.text))
    out = on.result(TtsDone(second.request_id))
    [done] = on.events("response.done", out)
    assert done.response.status == "completed"


def test_b35_speech_after_the_pause_discards_the_prepared_reply_silently() -> None:
    on = _driver()
    _pause(on)
    [vlm] = on.effects(SubmitVlm)
    on.result(VlmDelta(vlm.request_id, "It is red. "))
    [tts] = on.effects(SubmitTts)
    out = on.vad(HI)  # the person goes on speaking
    assert _wire(out) == []  # no client event
    aborted = {(a.request_id, a.stage) for a in on.effects(Abort)}
    assert aborted == {(vlm.request_id, "vlm"), (tts.request_id, "tts")}
    assert [o.outcome for o in on.effects(SpeculationOutcome)] == ["started", "discarded"]
    # late results of the dropped requests are fenced; the turn then ends normally
    assert _wire(on.result(TtsAudio(tts.request_id, PCM, tts.text))) == []
    on.vad(*([LO] * 16))  # another pause, whose words come only after the turn ended
    on.result(AsrPartial(on.last(SubmitPartialAsr).request_id, WORDS))
    assert on.last(SubmitVlm).response_id.startswith("resp_")


def test_b35_a_frame_that_arrives_before_the_turn_ends_discards_it_and_starts_afresh() -> None:
    on = _driver()
    _pause(on)
    [vlm] = on.effects(SubmitVlm)
    on.append(frames=[jpeg("new")])  # the camera shows something else before the end
    _end_turn(on)
    assert [o.outcome for o in on.effects(SpeculationOutcome)] == ["started", "discarded"]
    fresh = on.last(SubmitVlm)
    assert fresh.request_id != vlm.request_id and fresh.prompt.frames == (jpeg("new"),)
    assert any(a.request_id == vlm.request_id for a in on.effects(Abort))


def test_b35_other_words_at_the_turn_end_discard_the_prepared_reply() -> None:
    on = _driver()
    _pause(on)
    on.vad(HI, *([LO] * 7))  # more speech, then a second pause with other words
    partial = on.last(SubmitPartialAsr)
    on.result(AsrPartial(partial.request_id, WORDS + " please"))
    outcomes = [o.outcome for o in on.effects(SpeculationOutcome)]
    assert outcomes == ["started", "discarded", "started"]  # P1: one at a time
    second = on.last(SubmitVlm)
    assert second.prompt.transcript == WORDS + " please"
    _end_turn(on)
    assert [o.outcome for o in on.effects(SpeculationOutcome)][-1] == "adopted"


def test_b35_a_failed_preparation_is_dropped_and_the_turn_asks_afresh_without_an_error() -> None:
    on = _driver()
    _pause(on)
    [vlm] = on.effects(SubmitVlm)
    out = on.result(StageFailure(vlm.request_id, ErrorCode.STAGE_FAILED, "down"))
    assert _wire(out) == []
    out = _end_turn(on)
    assert "error" not in on.tags(out)
    assert on.last(SubmitVlm).request_id != vlm.request_id


def test_b35_the_session_switch_turns_it_off() -> None:
    off = _driver(preempt=False)
    _pause(off)
    assert off.effects(SubmitVlm) == [] and off.effects(SpeculationOutcome) == []
    off.send(ev.SessionUpdate(session=ev.SessionPatch(extra_body={"preemptive_response": True})))
    assert off.p.config.preemptive_response
    bad = off.refuse(
        ev.SessionUpdate(session=ev.SessionPatch(extra_body={"preemptive_response": "yes"}))
    )
    assert bad.param == "session.extra_body.preemptive_response"


def test_b35_no_reply_is_prepared_while_a_response_is_active() -> None:
    on = _driver(**{"turn_detection": {"type": "server_vad", "interrupt_response": False}})
    _pause(on)
    _end_turn(on)  # the first turn's response is active (its VLM has not decided)
    on.append(speech_pcm(32 * 60))
    on.vad(*([HI] * 10), *([LO] * 7))  # the person speaks again, and pauses
    on.result(AsrPartial(on.last(SubmitPartialAsr).request_id, "and this one"))
    assert [o.outcome for o in on.effects(SpeculationOutcome)] == ["started", "adopted"]


def test_b35_a_turn_that_creates_no_response_prepares_none() -> None:
    on = _driver(**{"turn_detection": {"type": "server_vad", "create_response": False}})
    _pause(on)
    assert on.effects(SubmitVlm) == []


def test_b35_clear_and_close_discard_the_prepared_reply() -> None:
    on = _driver()
    _pause(on)
    on.send(ev.InputAudioBufferClear())
    assert [o.outcome for o in on.effects(SpeculationOutcome)] == ["started", "discarded"]
    again = _driver()
    _pause(again)
    [vlm] = again.effects(SubmitVlm)
    again.send(ev.SessionClose())
    assert any(a.request_id == vlm.request_id for a in again.effects(Abort))


def test_b35_words_that_speech_outran_prepare_no_reply() -> None:
    """A pause's words that answer after speech went on are no longer all that was said:
    no reply is prepared from them, and the turn is transcribed afresh."""
    d = _driver()
    d.append(speech_pcm(32 * 60))
    d.vad(*([HI] * 10), LO)
    partial = d.last(SubmitPartialAsr)
    d.vad(HI, HI, LO)  # speech again, then a pause whose partial waits for this one
    out = d.result(AsrPartial(partial.request_id, WORDS))
    assert not [o for o in out if isinstance(o, SpeculationOutcome)]
    assert not d.effects(SubmitVlm)
