"""B32 semantic_vad: a pause goes under review by the end-of-turn model; its verdict ends
the turn or holds it until speech resumes or the eagerness's maximum wait runs out."""

from __future__ import annotations

import pytest

from spec import events as ev
from spec.effects import SubmitAsr, SubmitPartialAsr, SubmitTurnEnd, SubmitVlm
from spec.session_config import EAGERNESS, SEMANTIC_PAUSE_MS
from spec.stage_results import AsrPartial, TurnEndVerdict, VadScores
from spec.turn_detection import PAUSE_CLOCK_MARGIN_MS
from tests.conformance.harness import Driver, speech_pcm

HI, LO = 0.9, 0.1
PAUSE_FRAMES = -(-SEMANTIC_PAUSE_MS // 32)  # 7 frames: 224 ms


def _review_frames(eagerness: str) -> int:
    """The silent frames after which `eagerness` first asks the model (high: 2, 64 ms)."""
    return -(-EAGERNESS[eagerness].first_review_ms // 32)


def _semantic(eagerness: str = "medium", *, live: bool = False, **extra: object) -> Driver:
    d = Driver(config={"turn_detection": {"type": "semantic_vad", "eagerness": eagerness, **extra}})
    d.p.live.enabled = live  # the runtime does this when its ASR offers partials (B33)
    return d


def _pause(d: Driver, speech_frames: int = 3) -> SubmitTurnEnd:
    """Speech, then a pause long enough to be reviewed; returns the verdict request."""
    d.vad(*([HI] * speech_frames))
    before = len(d.effects(SubmitTurnEnd))
    d.vad(*([LO] * _review_frames(d.config["turn_detection"]["eagerness"])))
    requests = d.effects(SubmitTurnEnd)
    assert len(requests) == before + 1
    return requests[-1]


def test_b32_a_pause_asks_the_end_of_turn_model_about_the_utterance_so_far() -> None:
    d = _semantic()
    d.append(speech_pcm(2000))
    d.vad(HI, HI, HI)
    out = d.vad(*([LO] * (PAUSE_FRAMES - 1)))
    assert not d.effects(SubmitTurnEnd)  # 192 ms: not a pause yet
    out = d.vad(LO)
    [request] = [o for o in out if isinstance(o, SubmitTurnEnd)]
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    [started] = d.events("input_audio_buffer.speech_started")
    assert request.item_id == started.item_id
    # the utterance up to the last frame scored (the buffer holds audio not scored yet)
    assert len(request.pcm16) == (3 + PAUSE_FRAMES) * 512 * 2
    assert request.pcm16 == speech_pcm(2000)[: len(request.pcm16)]
    assert d.p.statistics().detector_state == "review"


def test_b32_a_finished_verdict_ends_the_turn_and_commits_it() -> None:
    d = _semantic()
    d.append(speech_pcm(2000))
    request = _pause(d)
    out = d.result(TurnEndVerdict(request.request_id, 0.9))
    assert d.tags(out)[:4] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
        "response.created",
    ]
    [stopped] = d.events("input_audio_buffer.speech_stopped", out)
    assert stopped.audio_end_ms == (3 + PAUSE_FRAMES) * 32
    assert stopped.item_id == request.item_id
    # the ASR hears the speech and 200 ms of the pause, as after server VAD's silence
    assert len(d.last(SubmitAsr).pcm16) == (3 * 512 + 200 * 16) * 2
    assert d.p.statistics().detector_state == "silence"


def test_b32_an_unfinished_verdict_holds_the_turn_until_speech_resumes() -> None:
    d = _semantic()
    d.append(speech_pcm(5000))
    first = _pause(d)
    out = d.result(TurnEndVerdict(first.request_id, 0.2))
    assert out == []
    assert d.p.statistics().detector_state == "held"
    d.vad(*([LO] * 20))  # 640 ms more: server VAD would have ended the turn long ago
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    d.vad(HI)
    assert d.p.statistics().detector_state == "speech"
    second = _pause(d)
    assert second.request_id != first.request_id
    d.result(TurnEndVerdict(second.request_id, 0.8))
    assert d.tags().count("input_audio_buffer.speech_started") == 1
    assert d.tags().count("input_audio_buffer.speech_stopped") == 1
    assert d.tags().count("input_audio_buffer.committed") == 1


def test_b32_a_verdict_the_speaker_outran_is_dropped() -> None:
    d = _semantic()
    d.append(speech_pcm(3000))
    request = _pause(d)
    d.vad(HI)  # speech resumed before the verdict came
    assert d.result(TurnEndVerdict(request.request_id, 0.99)) == []
    assert d.p.statistics().detector_state == "speech"
    assert d.result(TurnEndVerdict("turn_999", 0.99)) == []  # never asked for


def test_b32_a_verdict_after_a_commit_or_clear_is_dropped() -> None:
    d = _semantic()
    d.append(speech_pcm(3000))
    request = _pause(d)
    d.commit("c1")
    assert d.p.statistics().detector_state == "silence"
    # no pause deadline left: only the idle timeout's
    assert d.p.next_deadline() == d.now + int(d.limits.idle_timeout_s * 1000)
    assert d.result(TurnEndVerdict(request.request_id, 0.99)) == []
    d.append(speech_pcm(3000))
    request = _pause(d)
    d.send(ev.InputAudioBufferClear())
    assert d.result(TurnEndVerdict(request.request_id, 0.99)) == []


def test_b32_a_held_pause_ends_at_the_max_wait_on_the_audio_clock() -> None:
    d = _semantic("high")
    d.append(speech_pcm(5000))
    request = _pause(d)
    d.result(TurnEndVerdict(request.request_id, 0.1))
    wait_frames = -(-EAGERNESS["high"].max_wait_ms // 32)  # 63 frames: 2,016 ms
    out = d.vad(*([LO] * (wait_frames - _review_frames("high") - 1)))
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    # reviewed once more at 200 ms; its verdict never came, and the wait runs on
    assert len(d.effects(SubmitTurnEnd)) == 2
    out = d.vad(LO)
    assert d.tags(out)[:3] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
    ]


def test_b32_a_held_pause_ends_at_the_max_wait_on_the_session_clock() -> None:
    """Audio that stops arriving (a muted microphone) cannot hold a turn open."""
    d = _semantic("high")
    d.append(speech_pcm(1000))
    request = _pause(d)
    paused_at = d.now
    pause_ms = _review_frames("high") * 32
    wait = EAGERNESS["high"].max_wait_ms - pause_ms + PAUSE_CLOCK_MARGIN_MS
    assert d.p.next_deadline() == paused_at + wait
    d.result(TurnEndVerdict(request.request_id, 0.1), advance=50)
    deadline = d.p.next_deadline()
    assert deadline == d.now + wait
    d.p.handle_timeout(deadline - 1)
    assert d.take() == []
    d.p.handle_timeout(deadline)
    out = d.take()
    assert d.tags(out)[:3] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
    ]
    assert d.p.statistics().detector_state == "silence"


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_b32_eagerness_sets_the_verdict_threshold_and_the_max_wait(eagerness: str) -> None:
    policy = EAGERNESS[eagerness]
    d = _semantic(eagerness)
    d.append(speech_pcm(5000))
    request = _pause(d)
    wait = policy.max_wait_ms - _review_frames(eagerness) * 32 + PAUSE_CLOCK_MARGIN_MS
    assert d.p.next_deadline() == d.now + wait
    d.result(TurnEndVerdict(request.request_id, policy.threshold - 0.01))
    assert d.p.statistics().detector_state == "held"
    d.vad(HI)
    request = _pause(d)
    out = d.result(TurnEndVerdict(request.request_id, policy.threshold))
    if policy.first_review_ms < SEMANTIC_PAUSE_MS:  # an eager finish waits out 200 ms (D43)
        assert "input_audio_buffer.speech_stopped" not in d.tags(out)
        out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames(eagerness))))
    assert "input_audio_buffer.speech_stopped" in d.tags(out)


def test_b32_without_a_verdict_a_pause_ends_as_server_vad_would() -> None:
    """No end-of-turn model (or it failed): the silence duration of server VAD decides."""
    d = _semantic("low")
    d.append(speech_pcm(3000))
    request = _pause(d)
    d.result(TurnEndVerdict(request.request_id, None))
    assert d.p.statistics().detector_state == "held"
    silence_frames = -(-500 // 32)  # 16 frames, as server VAD counts them
    out = d.vad(*([LO] * (silence_frames - PAUSE_FRAMES - 1)))
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    out = d.vad(LO)
    assert "input_audio_buffer.speech_stopped" in d.tags(out)


def test_b32_a_late_missing_verdict_ends_an_overdue_pause_at_once() -> None:
    d = _semantic("low")
    d.append(speech_pcm(3000))
    request = _pause(d)
    d.vad(*([LO] * 20))  # the pause is already longer than the silence duration
    out = d.result(TurnEndVerdict(request.request_id, None))
    assert "input_audio_buffer.speech_stopped" in d.tags(out)


def test_b32_semantic_vad_still_interrupts_a_reply_when_speech_starts() -> None:
    d = _semantic()
    d.append(speech_pcm(2000))
    request = _pause(d)
    d.result(TurnEndVerdict(request.request_id, 0.9))
    d.transcribe("tell me a story")
    d.reply("Once upon a time.")
    d.speak(done=False)
    out = d.vad(HI, HI, HI)
    assert "input_audio_buffer.speech_started" in d.tags(out)
    [done] = d.events("response.done", out)
    assert done.response.status == "cancelled"


def test_b32_the_review_names_the_partial_asked_for_the_same_pause() -> None:
    d = _semantic(live=True)
    d.append(speech_pcm(2000))
    request = _pause(d)
    [partial] = d.effects(SubmitPartialAsr)
    assert request.partial_request_id == partial.request_id
    # without live transcripts there are no words to weigh: the verdict is the model's
    plain = _semantic()
    plain.append(speech_pcm(2000))
    assert _pause(plain).partial_request_id is None


@pytest.mark.parametrize(
    "words",
    [
        "Is the cup on the left bigger than",
        "I was wondering whether you...",
        "Could you tell me the",
    ],
)
def test_b32_pause_words_that_trail_off_hold_a_pause_the_model_calls_finished(
    words: str,
) -> None:
    d = _semantic(live=True)
    d.append(speech_pcm(5000))
    request = _pause(d)
    out = d.result(TurnEndVerdict(request.request_id, 0.97, words, punctuated=True))
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    assert d.p.statistics().detector_state == "held"
    # held as an unfinished verdict holds: until the eagerness's maximum wait
    d.vad(*([LO] * (EAGERNESS["medium"].max_wait_ms // 32 - PAUSE_FRAMES - 1)))
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    d.vad(LO)
    assert d.tags().count("input_audio_buffer.speech_stopped") == 1


def test_b32_an_unpunctuated_pause_holds_only_when_the_asr_punctuates() -> None:
    """Whisper leaves a phrase it hears cut off without a closing mark; an ASR that never
    punctuates says nothing by leaving one out."""
    for punctuated, held in ((True, True), (False, False)):
        d = _semantic(live=True)
        d.append(speech_pcm(5000))
        request = _pause(d)
        d.result(TurnEndVerdict(request.request_id, 0.97, "My favourite colour", punctuated))
        assert (d.p.statistics().detector_state == "held") is held
        assert ("input_audio_buffer.speech_stopped" in d.tags()) is not held


def test_b32_finished_words_never_end_a_pause_the_model_holds() -> None:
    """Under medium; under high a question the words close does (B44)."""
    d = _semantic(live=True)
    d.append(speech_pcm(5000))
    request = _pause(d)
    out = d.result(TurnEndVerdict(request.request_id, 0.2, "Is this red or blue?", True))
    assert out == []
    assert d.p.statistics().detector_state == "held"


def test_b32_finished_words_and_a_finished_sound_end_the_turn() -> None:
    d = _semantic(live=True)
    d.append(speech_pcm(5000))
    request = _pause(d)
    out = d.result(TurnEndVerdict(request.request_id, 0.9, "Is this red or blue?", True))
    assert "input_audio_buffer.speech_stopped" in d.tags(out)
    [partial] = d.effects(SubmitPartialAsr)
    # the commit holds what the pause's partial heard: its ASR is that partial (B33)
    assert d.effects(SubmitAsr) == []
    out = d.result(AsrPartial(partial.request_id, "Is this red or blue?"))
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "Is this red or blue?"
    assert d.effects(SubmitAsr) == [] and len(d.effects(SubmitVlm)) == 1


# --- the verdict waits for the pause's words (the session decides, not the runtime) ------

#: `SessionProtocol`'s default: the runtime's end-of-turn timeout
BUDGET_MS = 2000


def _reviewed_with_partial(d: Driver) -> tuple[SubmitTurnEnd, SubmitPartialAsr]:
    d.append(speech_pcm(5000))
    request = _pause(d)
    [partial] = d.effects(SubmitPartialAsr)
    assert request.partial_request_id == partial.request_id
    return request, partial


@pytest.mark.parametrize(
    ("words", "ends"), [("Is this red or blue?", True), ("Is it bigger than", False)]
)
def test_b32_a_verdict_before_its_pauses_words_waits_for_them(words: str, ends: bool) -> None:
    d = _semantic(live=True)
    request, partial = _reviewed_with_partial(d)
    assert d.result(TurnEndVerdict(request.request_id, 0.97)) == []  # waits for the words
    assert d.p.statistics().detector_state == "review"
    out = d.result(AsrPartial(partial.request_id, words))
    assert ("input_audio_buffer.speech_stopped" in d.tags(out)) is ends
    assert d.p.statistics().detector_state == ("silence" if ends else "held")


def test_b32_the_words_a_verdict_waits_for_come_at_most_within_its_budget() -> None:
    d = _semantic(live=True)
    request, partial = _reviewed_with_partial(d)
    asked_at = d.now
    d.result(TurnEndVerdict(request.request_id, 0.97))
    assert d.p.next_deadline() == asked_at + BUDGET_MS
    d.now = asked_at + BUDGET_MS - 1
    d.p.handle_timeout(d.now)
    assert d.take() == []
    d.now += 1
    d.p.handle_timeout(d.now)  # no words in time: the verdict alone ends the turn
    assert "input_audio_buffer.speech_stopped" in d.tags(d.take())
    # the words that come later are the commit's transcript: it holds the audio they heard
    out = d.result(AsrPartial(partial.request_id, "Is it bigger than"))
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "Is it bigger than"


def test_b32_words_already_heard_go_with_the_verdict_at_once() -> None:
    d = _semantic(live=True)
    request, partial = _reviewed_with_partial(d)
    d.result(AsrPartial(partial.request_id, "Is it bigger than"))
    d.result(TurnEndVerdict(request.request_id, 0.97))
    assert d.p.statistics().detector_state == "held"  # trailing words hold the pause


def test_b32_a_failed_partial_leaves_the_verdict_to_decide_alone() -> None:
    d = _semantic(live=True)
    request, partial = _reviewed_with_partial(d)
    d.result(TurnEndVerdict(request.request_id, 0.97))
    out = d.result(AsrPartial(partial.request_id, None))
    assert "input_audio_buffer.speech_stopped" in d.tags(out)


def test_b32_a_verdict_that_waits_is_dropped_when_speech_resumes() -> None:
    d = _semantic(live=True)
    request, partial = _reviewed_with_partial(d)
    d.result(TurnEndVerdict(request.request_id, 0.97))
    d.vad(HI)  # speech again: the verdict is no longer wanted
    assert d.p.next_deadline() != d.now + BUDGET_MS
    d.result(AsrPartial(partial.request_id, "Is this red or blue?"))
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    assert d.p.statistics().detector_state == "speech"


def test_b32_high_eagerness_asks_after_64_ms_and_a_held_pause_again_at_200_ms() -> None:
    """The eager detector asks early; a pause it held is asked about once more when it is
    as long as the model's own (Smart Turn is trained on 200 ms stops)."""
    d = _semantic("high")
    d.append(speech_pcm(3000))
    d.vad(HI, HI, HI)
    d.vad(LO)
    assert not d.effects(SubmitTurnEnd)
    [first] = [o for o in d.vad(LO) if isinstance(o, SubmitTurnEnd)]  # 64 ms
    d.result(TurnEndVerdict(first.request_id, 0.1))
    assert d.p.statistics().detector_state == "held"
    deadline = d.p.next_deadline()
    d.vad(*([LO] * (PAUSE_FRAMES - 3)))
    assert len(d.effects(SubmitTurnEnd)) == 1
    [second] = [o for o in d.vad(LO) if isinstance(o, SubmitTurnEnd)]  # 224 ms
    assert d.p.statistics().detector_state == "review"
    assert len(second.pcm16) == (3 + PAUSE_FRAMES) * 512 * 2
    assert d.p.next_deadline() == deadline  # the held pause's wait runs on
    assert d.result(TurnEndVerdict(first.request_id, 0.9)) == []  # the first: stale
    out = d.result(TurnEndVerdict(second.request_id, 0.9))
    assert d.tags(out)[:3] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
    ]


def test_b32_an_eager_finish_ends_the_turn_once_the_pause_is_as_long_as_the_models() -> None:
    """High asks at 64 ms, but a "finished" then holds the pause until it is 200 ms long
    (D43): on the audio clock, or on the session clock when audio stops coming."""
    d = _semantic("high")
    d.append(speech_pcm(3000))
    request = _pause(d)  # 64 ms
    out = d.result(TurnEndVerdict(request.request_id, 0.95))
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    assert d.p.statistics().detector_state == "held"
    # the wait is what the pause still lacks of 200 ms, not the eagerness's maximum
    deadline = d.p.next_deadline()
    rest = SEMANTIC_PAUSE_MS - _review_frames("high") * 32
    assert deadline == d.now + rest + PAUSE_CLOCK_MARGIN_MS
    assert d.effects(SubmitAsr) == []
    out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high") - 1)))  # 192 ms
    assert "input_audio_buffer.speech_stopped" not in d.tags(out)
    out = d.vad(LO)  # 224 ms: no second review, the first verdict's "finished" stands
    assert d.tags(out)[:3] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "input_audio_buffer.committed",
    ]
    assert len(d.effects(SubmitTurnEnd)) == 1
    # no more audio after an eager finish: the session clock ends the pause at 200 ms
    # and its margin
    c = _semantic("high")
    c.append(speech_pcm(3000))
    request = _pause(c)
    c.result(TurnEndVerdict(request.request_id, 0.95))
    deadline = c.p.next_deadline()
    c.p.handle_timeout(deadline - 1)
    assert "input_audio_buffer.speech_stopped" not in c.tags(c.take())
    c.p.handle_timeout(deadline)
    assert "input_audio_buffer.speech_stopped" in c.tags(c.take())


def test_b32_speech_inside_an_eager_finishs_wait_was_a_comma_and_the_turn_goes_on() -> None:
    """A 160 ms pause after "for me" in "Describe the picture for me, please.", which the
    model calls finished. Speech again before 200 ms resumes the turn; no commit."""
    d = _semantic("high")
    d.append(speech_pcm(5000))
    request = _pause(d)
    d.result(TurnEndVerdict(request.request_id, 0.95))
    d.vad(LO, LO, LO)  # 160 ms of pause in all
    d.vad(HI)
    assert d.p.statistics().detector_state == "speech"
    assert "input_audio_buffer.speech_stopped" not in d.tags()
    assert "input_audio_buffer.committed" not in d.tags()
    # the next pause is its own, asked early and decided again
    request = _pause(d)
    assert len(d.effects(SubmitTurnEnd)) == 2
    d.result(TurnEndVerdict(request.request_id, 0.95))
    out = d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    assert "input_audio_buffer.committed" in d.tags(out)


def test_b32_a_comma_whose_next_words_are_scored_late_is_not_cut_by_the_session_clock() -> None:
    """The same 160 ms comma, the frames after it scored 60 ms late (the VAD's tick, a
    busy loop while the pause's ASR and review run): the session clock stands in only for
    audio that stopped arriving, so it waits its margin and the audio clock decides."""
    d = _semantic("high")
    d.append(speech_pcm(5000))  # the speaker's audio is all there, ahead of the VAD
    request = _pause(d)  # 64 ms scored
    d.result(TurnEndVerdict(request.request_id, 0.95), advance=0)
    d.result(VadScores((LO,)), advance=0)  # 96 ms
    d.now += SEMANTIC_PAUSE_MS - 96 + 60  # the next frames come 60 ms past the wait
    d.p.handle_timeout(d.now)
    assert "input_audio_buffer.speech_stopped" not in d.tags(d.take())
    d.vad(LO, LO)  # 160 ms of pause in all
    d.vad(HI)  # "please"
    assert d.p.statistics().detector_state == "speech"
    assert "input_audio_buffer.committed" not in d.tags()


def test_b32_a_held_pause_is_asked_again_only_once_and_only_when_first_asked_early() -> None:
    d = _semantic("high")
    d.append(speech_pcm(5000))
    request = _pause(d)
    d.result(TurnEndVerdict(request.request_id, 0.1))
    d.vad(*([LO] * (PAUSE_FRAMES - _review_frames("high"))))
    [_, again] = d.effects(SubmitTurnEnd)
    d.result(TurnEndVerdict(again.request_id, 0.1))
    d.vad(*([LO] * 20))
    assert len(d.effects(SubmitTurnEnd)) == 2
    # speech again: the next pause is a new one, asked early and again
    d.vad(HI)
    d.vad(*([LO] * PAUSE_FRAMES))
    assert len(d.effects(SubmitTurnEnd)) == 3
    d.result(TurnEndVerdict(d.effects(SubmitTurnEnd)[-1].request_id, 0.1))
    d.vad(LO)
    assert len(d.effects(SubmitTurnEnd)) == 4
    # medium asks at 200 ms, and a pause it held is not asked again
    m = _semantic("medium")
    m.append(speech_pcm(5000))
    request = _pause(m)
    m.result(TurnEndVerdict(request.request_id, 0.1))
    m.vad(*([LO] * 40))
    assert len(m.effects(SubmitTurnEnd)) == 1
