"""B33 live transcripts while the person speaks, B34 an interrupted reply keeps its text."""

from __future__ import annotations

from spec import events as ev
from spec.effects import (
    LIVE_CADENCE_MS,
    SubmitAsr,
    SubmitPartialAsr,
    SubmitTts,
    SubmitTurnEnd,
    SubmitVlm,
)
from spec.stage_results import AsrPartial, TtsAudio, TurnEndVerdict, VlmDelta
from tests.conformance.harness import Driver, speech_pcm

VAD = {"turn_detection": {"type": "server_vad"}}
HI, LO = 0.9, 0.1
FRAME = 512 * 2  # bytes of one 32 ms VAD frame


def _live(config: dict[str, object] | None = None) -> Driver:
    # without preemptive responses (B35, their own tests): a commit's requests as they
    # are when the reply starts only at the turn's end
    config = {**(config or VAD), "extra_body": {"preemptive_response": False}}
    d = Driver(config=config)
    d.p.live.enabled = True  # the runtime does this when its ASR offers partials
    return d


def test_b33_a_pause_asks_for_the_utterance_so_far_and_new_words_become_deltas() -> None:
    d = _live()
    pcm = speech_pcm(32 * 60)
    d.append(pcm)
    out = d.vad(*([HI] * 10))
    assert d.effects(SubmitPartialAsr) == []  # speech goes on: no pause yet
    out = d.vad(LO)  # the first silent frame: a pause (D41)
    [started] = d.events("input_audio_buffer.speech_started")
    [partial] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    assert partial.item_id == started.item_id
    # all the speech a commit in this pause would hold: the audio scored up to here
    assert partial.pcm16 == pcm[: 11 * FRAME]
    d.vad(*([LO] * 6))
    assert d.effects(SubmitPartialAsr) == [partial]  # one a pause
    out = d.result(AsrPartial(partial.request_id, "what colour"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert (delta.item_id, delta.content_index, delta.delta) == (started.item_id, 0, "what colour")
    d.vad(*([HI] * 10), *([LO] * 7))  # speech goes on, then a second pause
    second = d.effects(SubmitPartialAsr)[-1]
    assert second is not partial
    out = d.result(AsrPartial(second.request_id, "What colour is this?"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert delta.delta == " is this?"  # only the words beyond those sent
    d.vad(*([LO] * 9))  # the turn ends in the pause that partial heard: its transcript
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == "What colour is this?"
    assert d.effects(SubmitAsr) == []


def test_b33_on_a_cadence_while_speech_goes_on_with_at_most_one_in_flight() -> None:
    d = _live()
    cadence = LIVE_CADENCE_MS // 32 + 1  # frames
    d.append(speech_pcm(32 * (3 * cadence + 10)))
    d.vad(*([HI] * (3 + 2 * cadence)))  # speech without a pause, two cadences long
    [first] = d.effects(SubmitPartialAsr)  # the next one fell due while this one ran
    d.result(AsrPartial(first.request_id, "one two"))
    d.vad(HI)
    [_, second] = d.effects(SubmitPartialAsr)
    assert len(second.pcm16) > len(first.pcm16)
    d.result(AsrPartial(second.request_id, None))  # a failed partial: nothing emitted
    assert len(d.events("conversation.item.input_audio_transcription.delta")) == 1


def test_b33_a_partial_answering_after_its_utterance_ended_is_dropped() -> None:
    d = _live()
    d.append(speech_pcm(32 * 60))
    d.vad(*([HI] * 10), *([LO] * 7))
    partial = d.last(SubmitPartialAsr)
    d.vad(*([LO] * 9))  # the turn ends: committed
    out = d.result(AsrPartial(partial.request_id, "too late"))
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    # no live text, but the commit holds the audio it heard: it is the item's transcript
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert (completed.item_id, completed.transcript) == (partial.item_id, "too late")


def test_b33_no_partial_when_the_asr_offers_none() -> None:
    d = Driver(config=VAD)  # live transcripts not enabled
    d.append(speech_pcm(32 * 200))
    d.vad(*([HI] * 100), *([LO] * 7))
    assert d.effects(SubmitPartialAsr) == []
    # (manual turns have their own live transcripts: B41)


def _reply_streaming(d: Driver) -> None:
    """A reply whose first sentence is playing and whose second is still being made."""
    d.speech_turn()
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "It is red. And it is round. "))
    first = d.effects(SubmitTts)[0]
    d.result(TtsAudio(first.request_id, bytes(48 * 1000), first.text))  # 1 s at 24 kHz


def test_b34_a_reply_cut_before_the_client_reported_playback_keeps_the_text_it_sent() -> None:
    """Barge-in during generation: the client reports its played position only after it
    stopped playback, so at the cut the server does not know what was heard; the done
    transcript is then everything sent, never an empty guess (D34)."""
    d = Driver()
    _reply_streaming(d)
    d.send(ev.ResponseCancel())
    [done] = d.events("response.output_audio_transcript.done")
    assert done.transcript == "It is red."
    [item_done] = d.events("response.output_item.done")
    assert item_done.item.content[0].transcript == "It is red."


def test_b34_a_late_played_position_cuts_the_reply_in_history_to_what_was_heard() -> None:
    d = Driver()
    _reply_streaming(d)
    d.send(ev.ResponseCancel())
    response_id = d.events("response.done")[0].response.id
    d.send(ev.PlaybackAck(response_id=response_id, played_ms=500))  # half of "It is red."
    d.full_turn("and now", "Ok.")
    history = d.effects(SubmitVlm)[-1].prompt.history
    assert ("assistant", "It is") in history


def test_b34_a_reply_cut_after_a_playback_report_keeps_the_played_prefix() -> None:
    d = Driver()
    _reply_streaming(d)
    response_id = d.events("response.created")[0].response.id
    d.send(ev.PlaybackAck(response_id=response_id, played_ms=500))
    d.send(ev.ResponseCancel())
    [done] = d.events("response.output_audio_transcript.done")
    assert done.transcript == "It is"


def test_b34_speech_during_a_reply_without_a_report_keeps_the_text_sent() -> None:
    d = Driver(config=VAD)
    d.append(speech_pcm(200))
    d.vad(HI, HI, HI)
    d.vad(*([LO] * 16))
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "It is red. And round. "))
    first = d.effects(SubmitTts)[0]
    d.result(TtsAudio(first.request_id, bytes(48 * 400), first.text))
    d.append(speech_pcm(200))
    out = d.vad(HI, HI, HI)  # barge-in
    assert "output_audio_buffer.cleared" in d.tags(out)
    [done] = d.events("response.output_audio_transcript.done", out)
    assert done.transcript == "It is red."


def test_b33_a_pause_under_semantic_review_is_transcribed_while_the_model_decides() -> None:
    """semantic_vad (B32): the pause's partial holds what a finishing verdict commits, so
    the session answers that commit's ASR with it instead of transcribing after the
    verdict (the reply no longer waits for the verdict and then the ASR)."""
    d = _live({"turn_detection": {"type": "semantic_vad", "eagerness": "high"}})
    pcm = speech_pcm(32 * 60)
    d.append(pcm)
    out = d.vad(*([HI] * 10), *([LO] * 2))  # high reviews a pause of 64 ms
    [review] = [o for o in out if isinstance(o, SubmitTurnEnd)]
    [partial] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    assert partial.item_id == review.item_id
    assert review.partial_request_id == partial.request_id
    assert partial.pcm16 == pcm[: 11 * FRAME]  # asked at the pause's first silent frame
    assert d.result(TurnEndVerdict(review.request_id, 0.95)) == []  # waits for the words
    out = d.result(AsrPartial(partial.request_id, "What colour is this?"))  # finished
    # ... once the pause is as long as the model's own (an eager review, D43)
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    out = d.vad(*([LO] * 5))
    assert "input_audio_buffer.speech_stopped" in d.tags(out)
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "What colour is this?" and d.effects(SubmitAsr) == []
    # the commit holds 200 ms after the silence began; the partial heard 32 ms of it
    [committed] = d.events("input_audio_buffer.committed", out)
    assert committed.item_id == partial.item_id


def test_b33_a_held_semantic_pause_sends_its_partial_as_live_text() -> None:
    d = _live({"turn_detection": {"type": "semantic_vad", "eagerness": "medium"}})
    d.append(speech_pcm(32 * 60))
    out = d.vad(*([HI] * 10), *([LO] * 7))
    [review] = [o for o in out if isinstance(o, SubmitTurnEnd)]
    [partial] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    d.result(TurnEndVerdict(review.request_id, 0.1))  # not finished: the pause is held
    out = d.result(AsrPartial(partial.request_id, "I want to know"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert delta.delta == "I want to know"
    assert d.effects(SubmitAsr) == []  # the turn goes on


def test_b33_a_pause_supersedes_a_cadence_partial_still_out_and_the_review_names_it() -> None:
    """A pause that falls while a cadence partial is still out gets its own partial: the
    end-of-turn review reads the pause's words (B32), and a finishing verdict's commit is
    answered with them. The superseded partial's answer is dropped, so at most two are
    ever out (a pause never supersedes a pause's partial)."""
    d = _live({"turn_detection": {"type": "semantic_vad", "eagerness": "medium"}})
    cadence = LIVE_CADENCE_MS // 32 + 1  # frames
    pcm = speech_pcm(32 * (cadence + 40))
    d.append(pcm)
    d.vad(*([HI] * (cadence + 5)))
    [ticked] = d.effects(SubmitPartialAsr)  # on the cadence, still out at the pause
    out = d.vad(*([LO] * 7))
    [review] = [o for o in out if isinstance(o, SubmitTurnEnd)]
    [pause] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    assert review.partial_request_id == pause.request_id != ticked.request_id
    assert pause.pcm16 == pcm[: (cadence + 6) * FRAME]
    out = d.result(AsrPartial(ticked.request_id, "I want"))  # superseded: dropped
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    out = d.result(AsrPartial(pause.request_id, "I want to know"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert delta.delta == "I want to know"


def test_b33_under_server_vad_a_pause_supersedes_a_cadence_partial_for_its_commit() -> None:
    """The same under server VAD: the turn ending in that pause commits the audio the
    pause's partial heard, so the session answers the commit's ASR with it."""
    d = _live()
    cadence = LIVE_CADENCE_MS // 32 + 1  # frames
    pcm = speech_pcm(32 * (cadence + 40))
    d.append(pcm)
    d.vad(*([HI] * (cadence + 5)))
    [ticked] = d.effects(SubmitPartialAsr)
    d.vad(*([LO] * 7))
    [_, pause] = d.effects(SubmitPartialAsr)
    assert pause.pcm16 == pcm[: (cadence + 6) * FRAME]
    d.vad(*([LO] * 9))  # the turn ends in the pause: its ASR waits for the pause's partial
    assert d.effects(SubmitAsr) == []
    out = d.result(AsrPartial(ticked.request_id, "I want"))  # superseded: dropped
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    assert d.events("conversation.item.input_audio_transcription.completed", out) == []
    out = d.result(AsrPartial(pause.request_id, "I want to know"))
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "I want to know" and d.effects(SubmitAsr) == []


# --- a commit's ASR reuses the partial that heard its audio (decided in the session) ------


def _turn_ending_in_a_pause(d: Driver) -> tuple[SubmitPartialAsr, bytes]:
    """Speech, a pause with its partial (asked at its first silent frame), then the turn
    ends in it (500 ms)."""
    pcm = speech_pcm(32 * 60)
    d.append(pcm)
    d.vad(*([HI] * 10), *([LO] * 7))
    [partial] = d.effects(SubmitPartialAsr)
    return partial, pcm


def test_b33_a_commit_of_audio_a_partial_already_heard_takes_its_text() -> None:
    d = _live()
    partial, _ = _turn_ending_in_a_pause(d)
    d.result(AsrPartial(partial.request_id, "what colour is this"))
    out = d.vad(*([LO] * 9))  # the turn ends in that pause
    assert d.effects(SubmitAsr) == []
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "what colour is this"
    assert d.tags(out).index("response.created") < d.tags(out).index(
        "conversation.item.input_audio_transcription.completed"
    )
    assert len(d.effects(SubmitVlm)) == 1


def test_b33_a_partial_that_failed_leaves_the_commit_its_own_asr() -> None:
    d = _live()
    partial, pcm = _turn_ending_in_a_pause(d)
    d.vad(*([LO] * 9))
    assert d.effects(SubmitAsr) == []
    d.result(AsrPartial(partial.request_id, None))
    # the commit's own audio: to 200 ms after the silence began
    assert d.last(SubmitAsr).pcm16 == pcm[: 10 * FRAME + 200 * 32]


def test_b33_a_commit_of_other_audio_is_transcribed_at_once() -> None:
    d = _live()
    partial, _ = _turn_ending_in_a_pause(d)
    d.vad(*([HI] * 5), *([LO] * 16))  # speech again: the turn holds more than it heard
    assert len(d.last(SubmitAsr).pcm16) > len(partial.pcm16)


def test_b33_a_response_cancelled_while_its_asr_waits_for_a_partial_sends_none() -> None:
    d = _live()
    partial, _ = _turn_ending_in_a_pause(d)
    d.vad(*([LO] * 9))
    [created] = d.events("response.created")
    d.send(ev.ResponseCancel(response_id=created.response.id))
    d.result(AsrPartial(partial.request_id, None))
    assert d.effects(SubmitAsr) == []


def test_b33_a_pause_does_not_supersede_a_pause_partial_still_out() -> None:
    """Bounded: a second pause while the first pause's partial is still out asks none
    until that one answers, then on its next silent frame, with the audio up to there."""
    d = _live()
    pcm = speech_pcm(32 * 80)
    d.append(pcm)
    d.vad(*([HI] * 10), *([LO] * 3))
    [first] = d.effects(SubmitPartialAsr)
    d.vad(*([HI] * 10), *([LO] * 3))  # speech again, and a second pause
    assert d.effects(SubmitPartialAsr) == [first]
    d.result(AsrPartial(first.request_id, "look"))
    [second] = [o for o in d.vad(LO) if isinstance(o, SubmitPartialAsr)]
    assert second.pcm16 == pcm[: 27 * FRAME]
    d.vad(*([LO] * 12))  # the turn ends in the second pause: its partial's words
    d.result(AsrPartial(second.request_id, "look at this"))
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == "look at this" and d.effects(SubmitAsr) == []


def test_b33_a_client_commit_in_a_pause_is_transcribed_on_its_own() -> None:
    """D41 reuses a pause's partial only for the commit the detector makes in that pause:
    a client's commit may hold audio the VAD has not scored yet, speech or not."""
    d = _live()
    pcm = speech_pcm(32 * 60)
    d.append(pcm)
    d.vad(*([HI] * 10), *([LO] * 3))
    [partial] = d.effects(SubmitPartialAsr)
    d.result(AsrPartial(partial.request_id, "what colour"))
    d.commit("c1")
    d.send(ev.ResponseCreate())
    assert d.last(SubmitAsr).pcm16 == pcm
