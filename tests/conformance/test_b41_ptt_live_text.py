"""B41 live transcripts while a push-to-talk hold is held (manual turns)."""

from __future__ import annotations

from spec.effects import LIVE_CADENCE_MS, SubmitAsr, SubmitPartialAsr
from spec.stage_results import AsrPartial
from tests.conformance.harness import Driver, quiet_pcm, speech_pcm

MANUAL: dict[str, object] = {"turn_detection": None}


def _held(live: bool = True) -> Driver:
    # without preemptive responses (B35): a commit's requests as they are when the reply
    # starts only at the turn's end
    d = Driver(config={**MANUAL, "extra_body": {"preemptive_response": False}})
    d.p.live.enabled = live  # the runtime does this when its ASR offers partials
    return d


def test_b41_a_hold_is_transcribed_at_its_pause_and_the_release_takes_those_words() -> None:
    d = _held()
    words = speech_pcm(400) + speech_pcm(300)
    d.append(words[: 400 * 32])
    d.append(words[400 * 32 :])
    assert d.effects(SubmitPartialAsr) == []  # speech goes on: no pause yet
    d.append(quiet_pcm(40))  # the first quiet append: the hold's pause
    [partial] = d.effects(SubmitPartialAsr)
    assert partial.pcm16 == words + quiet_pcm(40)  # all the audio held
    out = d.result(AsrPartial(partial.request_id, "what colour is this"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert (delta.item_id, delta.delta) == (partial.item_id, "what colour is this")
    d.append(quiet_pcm(60))  # the key is released a little later
    assert d.effects(SubmitPartialAsr) == [partial]  # one per quiet run
    d.commit(create_response=True)
    [added] = d.events("conversation.item.added")
    assert added.item.id == partial.item_id  # the item the live text named
    [completed] = d.events("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == "what colour is this"
    assert d.effects(SubmitAsr) == []  # no second transcription at the release


def test_b41_a_pause_partial_answering_after_the_release_is_the_commits_transcript() -> None:
    d = _held()
    d.append(speech_pcm(500))
    d.append(quiet_pcm(40))
    partial = d.last(SubmitPartialAsr)
    out = d.commit(create_response=True)
    assert d.events("conversation.item.input_audio_transcription.completed", out) == []
    out = d.result(AsrPartial(partial.request_id, "is it dark"))
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "is it dark"
    assert d.effects(SubmitAsr) == []


def test_b41_speech_after_the_pause_partial_gives_the_release_its_own_asr() -> None:
    d = _held()
    d.append(speech_pcm(500))
    d.append(quiet_pcm(40))
    partial = d.last(SubmitPartialAsr)
    d.result(AsrPartial(partial.request_id, "is it"))
    d.append(speech_pcm(300))  # the person goes on: the partial heard only a part
    d.commit(create_response=True)
    [submit] = d.effects(SubmitAsr)
    assert submit.pcm16 == speech_pcm(500) + quiet_pcm(40) + speech_pcm(300)
    out = d.transcribe("is it dark in here")
    [completed] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert completed.transcript == "is it dark in here"


def test_b41_a_failed_pause_partial_leaves_the_release_its_own_asr() -> None:
    d = _held()
    d.append(speech_pcm(500))
    d.append(quiet_pcm(40))
    partial = d.last(SubmitPartialAsr)
    d.commit(create_response=True)
    assert d.effects(SubmitAsr) == []  # it waits for the partial's words
    d.result(AsrPartial(partial.request_id, None))
    [submit] = d.effects(SubmitAsr)
    assert submit.pcm16 == partial.pcm16


def test_b41_on_a_cadence_while_speech_is_held_with_at_most_one_in_flight() -> None:
    d = _held()
    chunk = 200  # ms per append
    for _ in range(2 * LIVE_CADENCE_MS // chunk + 2):  # two cadences of speech, no pause
        d.append(speech_pcm(chunk))
    [first] = d.effects(SubmitPartialAsr)  # the next fell due while this one ran
    assert len(first.pcm16) > LIVE_CADENCE_MS * 32
    d.result(AsrPartial(first.request_id, "one two"))
    d.append(speech_pcm(chunk))
    [_, second] = d.effects(SubmitPartialAsr)
    assert len(second.pcm16) > len(first.pcm16)


def test_b41_a_pause_supersedes_a_cadence_partial_still_out() -> None:
    d = _held()
    for _ in range(LIVE_CADENCE_MS // 200 + 2):
        d.append(speech_pcm(200))
    [cadence] = d.effects(SubmitPartialAsr)
    d.append(quiet_pcm(40))
    [_, pause] = d.effects(SubmitPartialAsr)
    out = d.result(AsrPartial(cadence.request_id, "superseded"))
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    out = d.result(AsrPartial(pause.request_id, "all of it"))
    [delta] = d.events("conversation.item.input_audio_transcription.delta", out)
    assert delta.delta == "all of it"


def test_b41_no_partial_when_the_asr_offers_none() -> None:
    d = _held(live=False)
    d.append(speech_pcm(500))
    d.append(quiet_pcm(40))
    d.commit(create_response=True)
    assert d.effects(SubmitPartialAsr) == []
    assert len(d.effects(SubmitAsr)) == 1


def test_b41_a_cleared_hold_drops_its_partial_and_the_next_hold_starts_afresh() -> None:
    from spec import events as ev

    d = _held()
    d.append(speech_pcm(500))
    d.append(quiet_pcm(40))
    first = d.last(SubmitPartialAsr)
    d.send(ev.InputAudioBufferClear())
    out = d.result(AsrPartial(first.request_id, "gone"))
    assert d.events("conversation.item.input_audio_transcription.delta", out) == []
    d.append(speech_pcm(300))
    d.append(quiet_pcm(40))
    second = d.last(SubmitPartialAsr)
    assert second.item_id != first.item_id
    assert second.pcm16 == speech_pcm(300) + quiet_pcm(40)
