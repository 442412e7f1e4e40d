"""B5 item versions, B6 quiet commit, B7 empty commit, B8 silent camera commit."""

from __future__ import annotations

from spec import events as ev
from spec.effects import SubmitAsr, SubmitVlm
from spec.errors import ErrorCode
from spec.tables import PlaybackState
from tests.conformance.harness import Driver, jpeg, quiet_pcm, speech_pcm


def _audio_item(item_id: str, pcm: bytes) -> ev.ConversationItemCreate:
    part = ev.ContentPart(type="input_audio", audio=pcm)
    return ev.ConversationItemCreate(item=ev.ConversationItem(id=item_id, content=[part]))


def test_b5_old_versions_transcript_is_dropped_and_the_new_version_accepts_its_own() -> None:
    d = Driver()
    d.send(_audio_item("item_x", speech_pcm(300)))
    d.send(ev.ResponseCreate())
    old = d.last(SubmitAsr)
    assert (old.item.item_id, old.item.version) == ("item_x", 1)
    d.send(ev.ConversationItemDelete(item_id="item_x"))
    d.send(_audio_item("item_x", speech_pcm(200)))
    out = d.transcribe("old words", old)
    assert d.events("conversation.item.input_audio_transcription.completed", out) == []
    d.reply("", action="listen")
    d.send(ev.ResponseCreate())
    new = d.last(SubmitAsr)
    assert (new.item.item_id, new.item.version) == ("item_x", 2)
    out = d.transcribe("new words", new)
    [done] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert (done.item_id, done.transcript) == ("item_x", "new words")


def test_b6_quiet_commit_acks_no_response_with_its_event_id_then_listens() -> None:
    d = Driver()
    d.append(quiet_pcm(400))
    out = d.commit("evt_quiet", create_response=True)
    assert d.tags(out) == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.listen",
    ]
    committed = d.events("input_audio_buffer.committed", out)[0]
    assert (committed.no_response, committed.client_event_id) == (True, "evt_quiet")
    assert d.events("response.listen", out)[0].reason == "silence_or_noise"
    assert d.p.pending_bytes == 0


def test_b6_quiet_commit_leaves_other_commits_and_the_active_response_untouched() -> None:
    d = Driver()
    d.speech_turn()
    d.append(speech_pcm(200))
    d.commit("deferred", create_response=True)
    before = d.p.statistics()
    d.append(quiet_pcm(200))
    d.commit("quiet")
    after = d.p.statistics()
    assert after.active_response == before.active_response == "resp_1"
    assert after.queued == before.queued
    assert after.epoch == before.epoch


def test_b6_quiet_commit_after_response_done_before_drain_keeps_playback_state() -> None:
    d = Driver()
    d.full_turn()
    assert d.p.statistics().playing == ("resp_1",)
    d.append(quiet_pcm(300))
    out = d.commit("q1")
    assert d.tags(out)[-1] == "response.listen"
    assert d.p.statistics().playing == ("resp_1",)
    assert d.p._responses["resp_1"].playback.state is PlaybackState.SENT
    # the reply still drains normally afterwards
    d.send(ev.PlaybackAck(response_id="resp_1", played_ms=500))
    assert d.p.statistics().playing == ()


def test_b7_empty_commit_is_refused_with_its_event_id_and_changes_nothing() -> None:
    d = Driver()
    err = d.refuse(ev.InputAudioBufferCommit(event_id="evt_empty"))
    assert (err.code, err.event_id) == (ErrorCode.INPUT_AUDIO_BUFFER_EMPTY, "evt_empty")
    assert d.p.error_event(err).error.event_id == "evt_empty"
    d.speech_turn()
    err = d.refuse(ev.InputAudioBufferCommit(event_id="again"))
    assert err.code is ErrorCode.INPUT_AUDIO_BUFFER_EMPTY


def test_b7_commit_after_clear_is_empty() -> None:
    d = Driver()
    d.append(speech_pcm(200))
    out = d.send(ev.InputAudioBufferClear())
    assert d.tags(out) == ["input_audio_buffer.cleared"]
    assert d.p.pending_bytes == 0
    assert d.refuse(ev.InputAudioBufferCommit()).code is ErrorCode.INPUT_AUDIO_BUFFER_EMPTY


def test_b8_silent_camera_commit_enters_the_vlm_directly_and_releases_its_bytes() -> None:
    d = Driver()
    d.append(quiet_pcm(200), frames=[jpeg("red")])
    assert d.p.pending_bytes > 0
    d.commit(create_response=True)
    assert d.effects(SubmitAsr) == []
    assert d.last(SubmitVlm).prompt.frames == (jpeg("red"),)
    assert d.p.pending_bytes == 0
