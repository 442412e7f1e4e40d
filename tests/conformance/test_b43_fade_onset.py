"""B43 the pause's onset by energy: the first frame of speech whose level falls far below
the utterance's loudest (FADE_DB) asks the pause's words and lets the reply start there,
while Silero's lag still scores the frames speech; speech after the dip discards that
work, and a dip never ends a turn.

Every figure keeps a margin from a threshold: probabilities 0.9 / 0.1 around 0.5 (and
its 0.35 hysteresis), speech at -20 dBFS, a soft frame 10 dB down (20 dB above the floor),
a faded one at -90 dBFS (40 dB under it)."""

from __future__ import annotations

from typing import Any

from spec.effects import SpeculationOutcome, SubmitAsr, SubmitPartialAsr, SubmitTurnEnd, SubmitVlm
from spec.stage_results import AsrPartial, TurnEndVerdict
from spec.turn_detection import FADE_DB
from tests.conformance.harness import Driver, speech_pcm

HI, LO = 0.9, 0.1
LOUD, SOFT, FADED = -20.0, -30.0, -90.0
FRAME = 1024  # bytes of one 32 ms frame of 16 kHz pcm16
WORDS = "what colour is this"

assert LOUD - FADE_DB - FADED >= 30 and SOFT - (LOUD - FADE_DB) >= 15  # the margins


def _driver(turn_detection: dict[str, Any] | None = None, *, preempt: bool = True) -> Driver:
    config = {
        "turn_detection": turn_detection or {"type": "server_vad"},
        "extra_body": {"preemptive_response": preempt},
    }
    d = Driver(config=config)
    d.p.live.enabled = True  # the runtime does this when its ASR offers partials
    return d


def _speech(d: Driver, frames: int = 10) -> None:
    d.vad(*([HI] * frames), levels=(LOUD,) * frames)


def _fade(d: Driver, frames: int = 1) -> list[Any]:
    """Frames Silero's lag still scores speech, far below the utterance's floor."""
    return d.vad(*([HI] * frames), levels=(FADED,) * frames)


def test_b43_the_first_faded_frame_asks_the_pause_words_before_silero_scores_a_pause() -> None:
    d = _driver()
    pcm = speech_pcm(32 * 60)
    d.append(pcm)
    _speech(d)
    d.vad(HI, levels=(SOFT,))  # a softer sound of speech, well above the floor
    assert d.effects(SubmitPartialAsr) == []
    out = _fade(d)
    [partial] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    assert partial.pcm16 == pcm[: 12 * FRAME]  # all that was scored, the faded frame too
    assert d.p.statistics().detector_state == "fading"
    assert "input_audio_buffer.speech_stopped" not in d.tags()


def test_b43_the_fades_words_start_the_reply_and_the_turn_end_adopts_it_and_them() -> None:
    d = _driver()
    d.append(speech_pcm(32 * 60))
    _speech(d)
    _fade(d)
    partial = d.last(SubmitPartialAsr)
    d.result(AsrPartial(partial.request_id, WORDS))
    [vlm] = d.effects(SubmitVlm)  # the reply starts while Silero still hears speech
    assert vlm.response_id.startswith("spec_") and vlm.prompt.transcript == WORDS
    _fade(d, 3)  # the lag's frames change nothing
    d.vad(*([LO] * 17))  # server VAD ends the turn (500 ms of silence)
    assert "input_audio_buffer.speech_stopped" in d.tags()
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == WORDS and d.effects(SubmitAsr) == []  # the fade's words
    assert [o.outcome for o in d.effects(SpeculationOutcome)] == ["started", "adopted"]
    assert len(d.effects(SubmitVlm)) == 1


def test_b43_speech_after_a_dip_discards_the_prepared_reply_and_the_turn_goes_on() -> None:
    d = _driver()
    d.append(speech_pcm(32 * 80))
    _speech(d)
    _fade(d, 2)  # a stop consonant's closure, say
    d.result(AsrPartial(d.last(SubmitPartialAsr).request_id, "what"))
    assert [o.outcome for o in d.effects(SpeculationOutcome)] == ["started"]
    out = d.vad(HI, levels=(LOUD,))  # loud speech again
    assert [o.outcome for o in d.effects(SpeculationOutcome)] == ["started", "discarded"]
    assert d.p.statistics().detector_state == "speech"
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    # the next pause asks its own words, and its turn ends on them
    _speech(d, 5)
    _fade(d)
    second = d.last(SubmitPartialAsr)
    d.result(AsrPartial(second.request_id, WORDS))
    d.vad(*([LO] * 17))
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == WORDS
    assert [o.outcome for o in d.effects(SpeculationOutcome)][-1] == "adopted"


def test_b43_a_fade_never_ends_a_turn_while_silero_scores_speech() -> None:
    d = _driver()
    d.append(speech_pcm(32 * 60))
    _speech(d)
    _fade(d, 40)  # 1.3 s far below the floor, all scored speech
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    d.vad(*([LO] * 17))
    assert len(d.events("input_audio_buffer.speech_stopped")) == 1


def test_b43_the_floor_follows_the_utterance_not_a_fixed_level() -> None:
    """A quiet speaker (-60 dBFS) fades at -100, not at a level a loud one would."""
    d = _driver()
    d.append(speech_pcm(32 * 60))
    d.vad(*([HI] * 10), levels=(-60.0,) * 10)
    d.vad(HI, HI, levels=(-70.0, -75.0))  # 10-15 dB down: still speech
    assert d.effects(SubmitPartialAsr) == []
    d.vad(HI, levels=(-100.0,))
    assert len(d.effects(SubmitPartialAsr)) == 1


def test_b43_without_levels_the_pause_begins_with_silero_as_before() -> None:
    d = _driver()
    d.append(speech_pcm(32 * 60))
    d.vad(*([HI] * 14))
    assert d.effects(SubmitPartialAsr) == []
    d.vad(LO)
    assert len(d.effects(SubmitPartialAsr)) == 1


def test_b43_under_semantic_vad_the_review_reads_the_words_asked_at_the_fade() -> None:
    d = _driver({"type": "semantic_vad", "eagerness": "high"}, preempt=False)
    d.append(speech_pcm(32 * 60))
    _speech(d)
    _fade(d, 2)
    [partial] = d.effects(SubmitPartialAsr)
    d.result(AsrPartial(partial.request_id, WORDS + "?"))
    out = d.vad(LO, LO, LO)  # Silero's pause: reviewed after 64 ms
    [review] = [o for o in out if isinstance(o, SubmitTurnEnd)]
    assert review.partial_request_id == partial.request_id
    assert len(d.effects(SubmitPartialAsr)) == 1  # no second partial for the same pause
    d.vad(*([LO] * 5))  # the pause reaches Smart Turn's 200 ms
    d.result(TurnEndVerdict(review.request_id, 0.9))
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == WORDS + "?"
