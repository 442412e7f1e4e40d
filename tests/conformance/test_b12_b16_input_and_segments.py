"""B12 idle retention, B13 backpressure, B14 camera-only commit after retained speech,
B15 commit identity, B16 batched segments."""

from __future__ import annotations

from spec import events as ev
from spec.effects import SubmitAsr, SubmitVlm
from spec.errors import ErrorCode
from spec.limits import Limits
from spec.tables.input_buffer import PREROLL_MS
from tests.conformance.harness import Driver, jpeg, quiet_pcm, speech_pcm

VAD = {"turn_detection": {"type": "server_vad"}}


def test_b12_idle_camera_session_keeps_only_the_latest_frame_and_preroll() -> None:
    d = Driver(config=VAD)
    sizes = []
    for second in range(600):  # ten minutes of 1 fps frames and 20 ms silent chunks
        d.append(quiet_pcm(20), frames=[jpeg(f"f{second}")])
        for _ in range(49):
            d.append(quiet_pcm(20))
        sizes.append(d.p.pending_bytes)
    stats = d.p.statistics()
    assert stats.buffer_frames == 1
    assert stats.buffer_audio_bytes <= PREROLL_MS * 32
    assert max(sizes[10:]) == min(sizes[10:])  # flat
    assert d.p.pending_bytes == stats.buffer_audio_bytes + len(jpeg("f599"))


def test_b12_from_speech_start_the_whole_utterance_is_kept_until_commit() -> None:
    d = Driver()
    for _ in range(50):
        d.append(quiet_pcm(20))
    assert d.p.statistics().buffer_audio_bytes == PREROLL_MS * 32
    for _ in range(50):
        d.append(speech_pcm(100))
    assert d.p.statistics().buffer_audio_bytes >= 5000 * 32
    d.commit(create_response=True)
    assert len(d.last(SubmitAsr).pcm16) >= 5000 * 32
    assert d.p.statistics().buffer_audio_bytes == 0


def test_b13_append_over_the_cap_is_backpressure_with_event_id_and_buffer_untouched() -> None:
    d = Driver(limits=Limits(max_pending_input_bytes=40_000))
    d.append(speech_pcm(1000))  # 32,000 bytes
    before = d.p.statistics()
    err = d.refuse(ev.InputAudioBufferAppend(audio=speech_pcm(300), event_id="big"))
    assert (err.code, err.event_id) == (ErrorCode.INPUT_BACKPRESSURE, "big")
    assert d.p.error_event(err).error.type == "rate_limit_error"
    assert d.p.statistics() == before
    d.commit(create_response=True)  # the commit hands the bytes to the ASR: room again
    d.append(speech_pcm(1000))
    assert d.p.statistics().buffer_audio_bytes == 32_000


def test_b13_clear_frees_room_for_appends_again() -> None:
    d = Driver(limits=Limits(max_pending_input_bytes=40_000))
    d.append(speech_pcm(1000))
    d.refuse(ev.InputAudioBufferAppend(audio=speech_pcm(500)))
    d.send(ev.InputAudioBufferClear())
    d.append(speech_pcm(1000))


def test_b13_commits_beyond_the_pending_cap_get_backpressure() -> None:
    d = Driver(limits=Limits(max_pending_commits=2))
    for n in range(2):
        d.append(speech_pcm(100))
        d.commit(f"keep{n}")
    d.append(speech_pcm(100))
    err = d.refuse(ev.InputAudioBufferCommit(event_id="third"))
    assert (err.code, err.event_id) == (ErrorCode.INPUT_BACKPRESSURE, "third")
    d.send(ev.ResponseCreate())  # consumes the queue: commits are accepted again
    d.commit("third-again")


def test_b14_manual_four_step_sequence_keeps_the_pcm_and_concatenates_frames() -> None:
    d = Driver(config={"turn_detection": None, "extra_body": {"auto_response": False}})
    pcm = speech_pcm(400)
    d.send(
        ev.InputAudioBufferAppend(
            audio=pcm, format="pcm16", sample_rate_hz=16000, video_frames=[jpeg("held")]
        )
    )
    d.send(ev.InputAudioBufferCommit(final=True, create_response=False))
    d.send(ev.InputAudioBufferAppend(video_frames=[jpeg("later")]))
    d.send(ev.InputAudioBufferCommit(final=True, create_response=True))
    asr = d.last(SubmitAsr)
    assert (asr.pcm16, asr.item.item_id) == (pcm, "item_1")
    out = d.transcribe("what am I holding")
    [done] = d.events("conversation.item.input_audio_transcription.completed", out)
    assert done.item_id == "item_1"
    assert d.last(SubmitVlm).prompt.frames == (jpeg("held"), jpeg("later"))


def test_b14_the_same_merge_while_deferred_behind_an_active_response() -> None:
    d = Driver()
    d.speech_turn()  # resp_1 active
    pcm = speech_pcm(400)
    d.append(pcm, frames=[jpeg("held")])
    d.commit(create_response=False)
    d.append(frames=[jpeg("later")])
    d.commit(create_response=True)  # deferred behind resp_1
    d.transcribe("first")
    d.reply("", action="listen")
    asr = d.last(SubmitAsr)
    assert asr.response_id == "resp_2"
    assert asr.pcm16 == pcm
    d.transcribe("what am I holding", asr)
    assert d.last(SubmitVlm).prompt.frames == (jpeg("held"), jpeg("later"))


def test_b15_every_commit_gets_exactly_one_terminal_ack_with_its_event_id() -> None:
    d = Driver(limits=Limits(max_pending_commits=1))
    acks: dict[str, list[str]] = {}

    def commit(event_id: str, **kw: object) -> None:
        try:
            out = d.commit(event_id, **kw)
        except Exception as exc:  # refused: exactly one error, carrying the id
            acks.setdefault(event_id, []).append(f"error:{exc.code.value}")  # type: ignore[attr-defined]
            assert exc.event_id == event_id  # type: ignore[attr-defined]
            return
        for e in d.events("input_audio_buffer.committed", out):
            label = "no_response" if e.no_response else "committed"
            acks.setdefault(e.client_event_id, []).append(label)

    d.append(quiet_pcm(100))
    commit("quiet")
    commit("empty")
    d.append(speech_pcm(100))
    commit("retained")
    d.append(speech_pcm(100))
    commit("over-cap")
    d.append(frames=[jpeg()])
    d.send(ev.ResponseCreate())
    d.append(speech_pcm(100))
    commit("normal", create_response=True)
    assert acks == {
        "quiet": ["no_response"],
        "empty": ["error:input_audio_buffer_empty"],
        "retained": ["committed"],
        "over-cap": ["error:input_backpressure"],
        "normal": ["committed"],
    }


def test_b16_commits_queued_behind_an_active_response_stay_separate_segments() -> None:
    d = Driver()
    d.speech_turn()
    for n in range(2):
        d.append(speech_pcm(200 + n))
        d.commit(f"q{n}", create_response=True)
    d.transcribe("zero")
    d.reply("", action="listen")
    first, second = d.effects(SubmitAsr)[-2:]
    assert first.item != second.item
    assert first.response_id == second.response_id == "resp_2"
    out = d.transcribe("for the second", second)
    out += d.transcribe("for the first", first)
    written = {
        e.item_id: e.transcript
        for e in d.events("conversation.item.input_audio_transcription.completed", out)
    }
    assert written == {first.item.item_id: "for the first", second.item.item_id: "for the second"}
    assert d.last(SubmitVlm).prompt.transcript == "for the first for the second"
