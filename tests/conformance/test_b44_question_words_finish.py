"""B44 a question the words close ends an eager pause: under `semantic_vad` eagerness high,
a pause whose words (the pause's partial, from an ASR that punctuates) end with a question
mark counts as finished though the end-of-turn model holds it; the turn ends once the
pause is 200 ms long (D43), as after the model's own early finish. Other eagernesses, a
period, an open word before the mark and an ASR that never punctuates leave the verdict
to the model.

Every probability keeps a margin from its threshold: 0.03 (Smart Turn's score for a
pitch-shifted "Is this more orange or more red?") under high's 0.3, speech 0.9 and
silence 0.1 around 0.5 and its 0.35 hysteresis."""

from __future__ import annotations

import pytest

from spec.effects import SubmitPartialAsr, SubmitTurnEnd
from spec.session_config import EAGERNESS, SEMANTIC_PAUSE_MS
from spec.stage_results import AsrPartial, TurnEndVerdict
from spec.turn_detection import PAUSE_CLOCK_MARGIN_MS
from tests.conformance.harness import Driver, speech_pcm

HI, LO = 0.9, 0.1
#: Smart Turn's score for a complete question it hears as unfinished
HELD = 0.03
QUESTION = "Is this more orange or more red?"
PAUSE_FRAMES = -(-SEMANTIC_PAUSE_MS // 32)  # 7 frames: 224 ms
STOPPED = "input_audio_buffer.speech_stopped"


def _review_frames(eagerness: str) -> int:
    """The silent frames after which `eagerness` first asks the model (high: 2, 64 ms)."""
    return -(-EAGERNESS[eagerness].first_review_ms // 32)


def _semantic(eagerness: str = "high", *, punctuated: bool = True) -> Driver:
    d = Driver(
        config={"turn_detection": {"type": "semantic_vad", "eagerness": eagerness}},
        punctuated_transcripts=punctuated,
    )
    d.p.live.enabled = True  # the runtime does this when its ASR offers partials (B33)
    return d


def _pause(d: Driver) -> tuple[SubmitTurnEnd, SubmitPartialAsr]:
    """Speech, then a pause long enough to be reviewed: the review and the pause's partial."""
    d.append(speech_pcm(5000))
    d.vad(HI, HI, HI)
    d.vad(*([LO] * _review_frames(d.config["turn_detection"]["eagerness"])))
    [request] = d.effects(SubmitTurnEnd)
    [partial] = d.effects(SubmitPartialAsr)
    assert request.partial_request_id == partial.request_id
    return request, partial


def test_b44_a_question_the_model_holds_ends_the_turn_at_the_200_ms_pause_under_high() -> None:
    d = _semantic()
    request, partial = _pause(d)  # 64 ms
    d.result(AsrPartial(partial.request_id, QUESTION))
    out = d.result(TurnEndVerdict(request.request_id, HELD))
    # finished by the words, held as the model's early finish is until 200 ms (D43)
    assert STOPPED not in d.tags(out)
    assert d.p.statistics().detector_state == "held"
    rest = SEMANTIC_PAUSE_MS - _review_frames("high") * 32
    assert d.p.next_deadline() == d.now + rest + PAUSE_CLOCK_MARGIN_MS
    out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high") - 1)))  # 192 ms
    assert STOPPED not in d.tags(out)
    out = d.vad(LO)  # 224 ms: no second review, the words' finish stands
    assert d.tags(out)[:3] == [STOPPED, "conversation.item.added", "input_audio_buffer.committed"]
    assert len(d.effects(SubmitTurnEnd)) == 1
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == QUESTION  # the commit's words are the pause's (B33)


def test_b44_a_question_at_the_second_review_ends_the_turn_at_once() -> None:
    """The first review's words had not come; the held pause's review at 200 ms brings
    them, and the pause is already as long as the model's own."""
    d = _semantic()
    first, _ = _pause(d)
    d.result(TurnEndVerdict(first.request_id, HELD, "", punctuated=True))  # nothing heard
    assert d.p.statistics().detector_state == "held"
    d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    second = d.last(SubmitTurnEnd)
    assert second.request_id != first.request_id
    out = d.result(TurnEndVerdict(second.request_id, 0.02, "Is the screen black?", True))
    assert d.tags(out)[:3] == [STOPPED, "conversation.item.added", "input_audio_buffer.committed"]


@pytest.mark.parametrize("eagerness", ["low", "medium", "auto"])
def test_b44_under_a_patient_eagerness_a_question_the_model_holds_waits_its_max_wait(
    eagerness: str,
) -> None:
    d = _semantic(eagerness)
    request, partial = _pause(d)
    d.result(AsrPartial(partial.request_id, QUESTION))
    d.result(TurnEndVerdict(request.request_id, HELD))
    assert d.p.statistics().detector_state == "held"
    wait_frames = -(-EAGERNESS[eagerness].max_wait_ms // 32)
    out = d.vad(*([LO] * (wait_frames - _review_frames(eagerness) - 1)))
    assert STOPPED not in d.tags(out)
    out = d.vad(LO)
    assert STOPPED in d.tags(out)


@pytest.mark.parametrize(
    "words",
    [
        "What your country can do for you.",  # Whisper closes a fragment with a period
        "Thank you very much!",
        "Is it bigger than the?",  # a question mark after a word that cannot close it
        "Is this more orange or",  # Whisper's cut-off phrase: no mark
    ],
)
def test_b44_words_without_a_closing_question_mark_do_not_finish(words: str) -> None:
    d = _semantic()
    request, partial = _pause(d)
    d.result(AsrPartial(partial.request_id, words))
    d.result(TurnEndVerdict(request.request_id, HELD))
    assert d.p.statistics().detector_state == "held"
    out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))  # 224 ms
    assert STOPPED not in d.tags(out)
    assert len(d.effects(SubmitTurnEnd)) == 2  # the held pause's second review (B32)


def test_b44_the_question_of_an_asr_that_never_punctuates_does_not_finish() -> None:
    """Its question mark, if it wrote one, would not be a choice it makes for questions."""
    d = _semantic(punctuated=False)
    request, partial = _pause(d)
    d.result(AsrPartial(partial.request_id, QUESTION))
    d.result(TurnEndVerdict(request.request_id, HELD))
    assert d.p.statistics().detector_state == "held"
    d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    assert STOPPED not in d.tags()
    # the same from a verdict that carries its own words
    c = _semantic()
    request, _ = _pause(c)
    c.result(TurnEndVerdict(request.request_id, HELD, QUESTION, punctuated=False))
    assert c.p.statistics().detector_state == "held"
    c.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    assert STOPPED not in c.tags()


def test_b44_speech_before_200_ms_after_a_question_was_a_comma_and_the_turn_goes_on() -> None:
    """A speaker asks "Is it red? Or more orange?": speech again inside the 200 ms after
    the first question resumes the turn; no commit, and the next pause is decided afresh."""
    d = _semantic()
    request, partial = _pause(d)
    d.result(AsrPartial(partial.request_id, "Is it red?"))
    d.result(TurnEndVerdict(request.request_id, HELD))
    d.vad(LO, LO, LO)  # 160 ms of pause in all
    d.vad(HI)
    assert d.p.statistics().detector_state == "speech"
    assert STOPPED not in d.tags() and "input_audio_buffer.committed" not in d.tags()
    d.vad(HI, HI)
    d.vad(*([LO] * _review_frames("high")))
    again = d.last(SubmitTurnEnd)
    assert again.request_id != request.request_id
    d.result(TurnEndVerdict(again.request_id, HELD, "Is it red? Or more orange?", True))
    out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    assert d.tags(out).count(STOPPED) == 1 and d.tags().count("input_audio_buffer.committed") == 1


@pytest.mark.parametrize("late_frames", [0, 5], ids=["inside_200_ms", "after_200_ms"])
def test_b44_the_verdict_that_came_before_its_question_words_waits_for_them_then_finishes(
    late_frames: int,
) -> None:
    """The model holds; its verdict waits for the pause's words (B32), which close a
    question: inside 200 ms the pause is then held until it is 200 ms long, after it the
    turn ends at once."""
    d = _semantic()
    request, partial = _pause(d)
    assert d.result(TurnEndVerdict(request.request_id, HELD)) == []  # waits for the words
    assert d.p.statistics().detector_state == "review"
    d.vad(*([LO] * late_frames))
    assert STOPPED not in d.tags()
    out = d.result(AsrPartial(partial.request_id, QUESTION))
    paused = (_review_frames("high") + late_frames) * 32
    if paused < SEMANTIC_PAUSE_MS:
        assert STOPPED not in d.tags(out)
        assert d.p.statistics().detector_state == "held"
        out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high") - late_frames)))
    tags = [t for t in d.tags(out) if not t.endswith("transcription.delta")]  # the words
    assert tags[:3] == [STOPPED, "conversation.item.added", "input_audio_buffer.committed"]
    assert len(d.effects(SubmitTurnEnd)) == 1


def test_b44_without_a_verdict_question_words_wait_the_silence_duration() -> None:
    """No end-of-turn verdict (the model failed): the pause ends as server VAD's would
    (D33), whatever its words; the words only weigh with a verdict."""
    d = _semantic()
    request, _ = _pause(d)
    d.result(TurnEndVerdict(request.request_id, None, QUESTION, punctuated=True))
    assert d.p.statistics().detector_state == "held"
    silence_frames = -(-500 // 32)  # 16 frames, as server VAD counts them
    out = d.vad(*([LO] * (silence_frames - _review_frames("high") - 1)))
    assert STOPPED not in d.tags(out)
    out = d.vad(LO)
    assert STOPPED in d.tags(out)
