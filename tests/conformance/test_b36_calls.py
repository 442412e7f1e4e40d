"""B36 / D42 at the protocol: a call reports the audio it sent as played, before each
microphone packet, and a barge-in then keeps in history only what went out."""

from __future__ import annotations

from core.outbox import Outbox
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from spec import events as ev
from spec.effects import SubmitTts, SubmitVlm
from spec.stage_results import TtsAudio, VlmDelta
from tests.conformance.harness import Driver, speech_pcm
from tests.conformance.test_b33_b34_live_text import HI, LO, VAD
from tests.web.client_driver import Driver as ClientDriver


def test_b36_a_barge_in_on_a_call_keeps_what_its_track_sent() -> None:
    d = Driver(config=VAD)
    buffer = OutputAudioBuffer(Outbox(event_prefix="event_call"))
    d.append(speech_pcm(200))
    d.vad(HI, HI, HI)
    d.vad(*([LO] * 16))
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "It is red. And round. "))
    first = d.effects(SubmitTts)[0]
    d.result(TtsAudio(first.request_id, bytes(48 * 400), first.text))
    response_id = d.events("response.created")[0].response.id
    # the call queued the chunk and paced 300 ms of it before the next microphone packet
    buffer.queued(response_id, 400.0)
    for _ in range(15):
        buffer.paced(response_id, 20.0)
    due = buffer.ack_due()
    assert due == (response_id, 300.0)
    out = d.send(ev.PlaybackAck(event_id="call_ack_1", response_id=due[0], played_ms=due[1]))
    assert "error" not in d.tags(out)
    d.append(speech_pcm(200))
    out = d.vad(HI, HI, HI)  # barge-in
    assert "output_audio_buffer.cleared" in d.tags(out)
    [done] = d.events("response.output_audio_transcript.done", out)
    assert done.transcript == "It is red. And round."[: len(done.transcript)]
    assert len(done.transcript) < len("It is red. And round.")


def test_b36_a_ptt_call_sends_its_microphone_track_only_inside_a_hold() -> None:
    # Regression: the track streamed between holds, so the server's input buffer filled
    # with idle audio until the next press cleared it (16 MiB: about 8 minutes idle).
    d = ClientDriver("ptt", media="tracks").ready()
    assert d.of("microphone") == []  # ready, no hold: the track stays off
    assert d.of("microphone", d.step("press")) == [{"kind": "microphone", "sending": True}]
    d.step("mic", audio="BBBB", samples=640)
    out = d.step("release")
    assert d.of("microphone", out) == [{"kind": "microphone", "sending": False}]
    assert d.sent("input_audio_buffer.append") == []  # the track carried the audio
    assert [e["type"] for e in d.sent()][-1] == "input_audio_buffer.commit"


def test_b36_a_hands_free_call_stops_its_microphone_track_while_muted() -> None:
    d = ClientDriver("vad", media="tracks").ready()
    assert d.of("microphone") == [{"kind": "microphone", "sending": True}]
    out = d.step("mute", muted=True)
    assert d.of("microphone", out) == [{"kind": "microphone", "sending": False}]
    out = d.step("mute", muted=False)
    assert d.of("microphone", out) == [{"kind": "microphone", "sending": True}]
