"""B33 live transcripts while the person speaks, B34 an interrupted reply keeps its text."""

from __future__ import annotations

from spec import events as ev
from spec.effects import SubmitTts, SubmitVlm
from spec.stage_results import TtsAudio, VlmDelta
from tests.conformance.harness import Driver, speech_pcm

VAD = {"turn_detection": {"type": "server_vad"}}
HI, LO = 0.9, 0.1


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
