"""B9 VAD config (interrupt_response false), B10 server VAD, B11 barge-in and fencing."""

from __future__ import annotations

from spec import events as ev
from spec.effects import Abort, ScoreVad, SubmitAsr, SubmitTts, SubmitVlm
from spec.stage_results import AsrTranscript, TtsAudio, TtsDone, VlmDelta
from tests.conformance.harness import Driver, speech_pcm

VAD = {"turn_detection": {"type": "server_vad"}}
HI, LO, MID = 0.9, 0.1, 0.4  # above threshold, below threshold - 0.15, in the band


def _utterance(d: Driver) -> list[object]:
    d.append(speech_pcm(200))
    out = d.vad(HI, HI, HI)  # 96 ms of speech -> start
    out += d.vad(*([LO] * 16))  # 512 ms of low frames -> stop
    return out


def test_b9_interrupt_response_false_speech_during_a_reply_does_not_cancel_and_waits() -> None:
    d = Driver(config={"turn_detection": {"type": "server_vad", "interrupt_response": False}})
    _utterance(d)
    out = _utterance(d)
    assert "response.done" not in d.tags(out)
    assert d.p.statistics().active_response == "resp_1"
    assert d.p.statistics().queued[-1][1] == "deferred"
    d.transcribe("first")
    d.reply("One.")
    d.speak()
    assert d.p.statistics().active_response == "resp_2"


def test_b10_appends_are_scored_and_speech_starts_after_min_speech_with_prefix_padding() -> None:
    d = Driver(config=VAD)
    out = d.append(speech_pcm(640))
    [score] = [o for o in out if isinstance(o, ScoreVad)]
    assert (score.start_ms, len(score.pcm16)) == (0, 640 * 32)
    out = d.vad(*([LO] * 15), HI, HI)
    assert "input_audio_buffer.speech_started" not in d.tags(out)
    out = d.vad(HI)
    [started] = d.events("input_audio_buffer.speech_started", out)
    assert started.audio_start_ms == 15 * 32 - 300  # first speech frame minus prefix padding


def test_b10_speech_ends_only_below_threshold_minus_015_after_the_silence_duration() -> None:
    d = Driver(config=VAD)
    d.append(speech_pcm(2000))
    d.vad(HI, HI, HI)
    out = d.vad(*([MID] * 40))  # 1.28 s in the hysteresis band: cannot end
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    out = d.vad(LO)  # the silence run already exceeds 500 ms: a low frame ends it
    [stopped] = d.events("input_audio_buffer.speech_stopped", out)
    assert stopped.audio_end_ms == 44 * 32


def test_b10_turn_mode_stop_commits_and_creates_a_response() -> None:
    d = Driver(config=VAD)
    out = _utterance(d)
    assert d.tags(out)[:5] == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
        "response.created",
    ]
    started = d.events("input_audio_buffer.speech_started", out)[0]
    assert d.last(SubmitAsr).item.item_id == started.item_id


def test_b10_stop_without_create_response_retains_the_utterance() -> None:
    d = Driver(config={"turn_detection": {"type": "server_vad", "create_response": False}})
    out = _utterance(d)
    assert "response.created" not in d.tags(out)
    assert d.p.statistics().queued[0][1] == "retained"


def _playing_reply(d: Driver, done: bool) -> None:
    if d.p.config.turn_detection is not None:
        _utterance(d)
    else:
        d.append(speech_pcm(300))
        d.commit(create_response=True)
    d.transcribe("tell me a story")
    d.result(VlmDelta(d.last(SubmitVlm).request_id, "Once upon a time. "))
    d.speak(done=False)
    if done:
        d.result(TtsDone(d.last(SubmitTts).request_id))
        d.reply("")


def test_b11_speech_start_during_a_reply_cancels_it_with_one_done_and_a_clear() -> None:
    d = Driver(config=VAD)
    _playing_reply(d, done=False)
    epoch = d.p.epoch
    out = d.vad(HI, HI, HI)
    tags = d.tags(out)
    assert tags.count("response.done") == 1
    assert tags.index("output_audio_buffer.cleared") < tags.index("response.done")
    done = d.events("response.done", out)[0]
    assert (done.response.status, done.response.status_details.reason) == (
        "cancelled",
        "turn_detected",
    )
    assert {o.request_id for o in out if isinstance(o, Abort)} == {"resp_1:vlm:1", "resp_1:tts:1"}
    assert out[0].epoch == epoch  # speech_started, then everything of the cancel is fenced
    assert all(getattr(o, "epoch", epoch + 1) == epoch + 1 for o in out[1:])


def test_b11_speech_start_after_generation_with_audio_playing_clears_without_second_done() -> None:
    d = Driver(config=VAD)
    _playing_reply(d, done=True)
    assert d.events("response.done")[-1].response.status == "completed"
    out = d.vad(HI, HI, HI)
    assert d.tags(out) == ["input_audio_buffer.speech_started", "output_audio_buffer.cleared"]
    assert d.events("output_audio_buffer.cleared", out)[0].response_id == "resp_1"


def test_b11_nothing_of_a_cancelled_response_is_emitted_afterwards() -> None:
    d = Driver()
    _playing_reply(d, done=False)
    d.send(ev.ResponseCancel())
    tts, vlm = d.last(SubmitTts), d.last(SubmitVlm)
    late = [
        TtsAudio(tts.request_id, bytes(4800), "late"),
        TtsDone(tts.request_id),
        VlmDelta(vlm.request_id, "more words. "),
        AsrTranscript("resp_1:asr:1", "late transcript"),
    ]
    for result in late:
        assert d.result(result) == []


def test_b11_response_cancel_during_a_reply_and_after_it_while_audio_plays() -> None:
    d = Driver()
    _playing_reply(d, done=False)
    out = d.send(ev.ResponseCancel(event_id="x"))
    assert d.tags(out).count("response.done") == 1
    assert d.events("response.done", out)[0].response.status_details.reason == "client_cancelled"
    d2 = Driver()
    _playing_reply(d2, done=True)
    out = d2.send(ev.ResponseCancel())
    assert d2.tags(out) == ["output_audio_buffer.cleared"]
    err = d2.refuse(ev.ResponseCancel(event_id="nothing"))
    assert err.code.value == "response_not_active"


def test_b10_one_append_holding_two_utterances_makes_two_items_losing_no_audio() -> None:
    """One append holds speech, 608 ms of silence and more speech (a client that sends big
    chunks): two utterances, two committed items, and no audio lost. Precisely: the audio
    of the first item followed by that of the second is the input up to the second cut
    (200 ms after the second utterance's final silence began); the first item ends 200 ms
    after its final silence began, and the second begins right there (D35)."""
    d = Driver(config={"turn_detection": {"type": "server_vad", "create_response": False}})
    frame = 512 * 2  # bytes of one 32 ms VAD frame
    pcm = speech_pcm(32 * 30 + 32 * 19 + 32 * 30)
    pcm = pcm[: 30 * frame] + bytes(19 * frame) + pcm[49 * frame :]
    d.append(pcm)
    d.vad(*([HI] * 30), *([LO] * 19), *([HI] * 30))
    d.append(bytes(20 * frame))
    d.vad(*([LO] * 20))
    committed = d.events("input_audio_buffer.committed")
    assert len(committed) == 2
    assert len({c.item_id for c in committed}) == 2
    d.send(ev.ResponseCreate())
    first, second = d.effects(SubmitAsr)
    cut1 = (30 * 512 + 200 * 16) * 2
    assert first.pcm16 == pcm[:cut1]
    cut2 = (79 * 512 + 200 * 16) * 2
    assert first.pcm16 + second.pcm16 == (pcm + bytes(20 * frame))[:cut2]
