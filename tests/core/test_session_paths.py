"""SessionProtocol paths beyond the behaviour list: session events, items, text replies,
clears, deadlines and the VAD backpressure drop (docs/session-semantics.md)."""

from __future__ import annotations

import base64

import pytest

from spec import events as ev
from spec.effects import Abort, CloseSession, SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from spec.limits import Limits
from spec.stage_results import TtsAudio, TtsDone, VlmDecisionResult, VlmDelta
from tests.conformance.harness import Driver, item_create, jpeg, speech_pcm

PNG = b"\x89PNG\r\n\x1a\n" + bytes(20)


def test_session_update_heartbeat_resume_and_event_ack() -> None:
    d = Driver()
    out = d.send(ev.SessionUpdate(session=ev.SessionPatch(instructions="be kind")))
    assert d.tags(out) == ["session.updated"]
    assert out[0].session.instructions == "be kind"
    assert d.tags(d.send(ev.SessionHeartbeat())) == ["session.heartbeat_ack"]
    assert d.send(ev.SessionResume(session_id="x")) == []
    assert d.send(ev.SessionEventAck(server_event_seq=3)) == []
    err = d.refuse(
        ev.SessionUpdate(session=ev.SessionPatch(input_audio_format="mp3"), event_id="u1")
    )
    assert (err.code, err.event_id) == (ErrorCode.UNSUPPORTED_AUDIO_FORMAT, "u1")


def test_turning_vad_on_mid_speech_resets_the_detector() -> None:
    d = Driver(config={"turn_detection": {"type": "server_vad"}})
    d.append(speech_pcm(100))
    d.vad(0.9, 0.9, 0.9)
    assert d.p.statistics().detector_state == "speech"
    d.send(
        ev.SessionUpdate(
            session=ev.SessionPatch(turn_detection={"type": "server_vad", "threshold": 0.6})
        )
    )
    assert d.p.statistics().detector_state == "silence"
    d.send(ev.SessionUpdate(session=ev.SessionPatch(turn_detection=None)))
    assert d.vad(0.9, 0.9, 0.9) == []  # scores without server VAD are ignored


def test_close_aborts_open_requests_then_nothing_more_is_emitted() -> None:
    d = Driver()
    d.speech_turn()
    asr = d.last(SubmitAsr)
    out = d.send(ev.SessionClose(reason="bye"))
    assert out[0] == Abort(asr.request_id, "asr", "resp_1")
    assert d.tags(out)[1:] == ["session.closed", "CloseSession"]
    assert isinstance(out[2], CloseSession) and out[2].reason == "bye"
    assert d.result(VlmDelta("resp_1:vlm:1", "late")) == []
    assert d.send(ev.SessionHeartbeat()) == []
    assert d.p.next_deadline() is None
    d.p.handle_timeout(10**9)
    assert d.take() == []


def test_shutdown_closes_with_going_away() -> None:
    d = Driver()
    out = d.send(ev.SessionClose(reason="shutdown"))
    assert int(out[-1].code) == 1001


def test_text_image_assistant_and_system_items() -> None:
    d = Driver()
    image = "data:image/png;base64," + base64.b64encode(PNG).decode()
    out = d.send(
        item_create(
            ev.ContentPart(type="input_text", text="what is this"),
            ev.ContentPart(type="input_image", image_url=image),
            item_id="q1",
        )
    )
    assert d.tags(out) == ["conversation.item.added", "conversation.item.done"]
    d.send(item_create(ev.ContentPart(type="output_text", text="earlier reply"), role="assistant"))
    d.send(item_create(ev.ContentPart(type="input_text", text="rules"), role="system"))
    retrieved = d.send(ev.ConversationItemRetrieve(item_id="q1"))[0]
    assert retrieved.item.content[0].text == "what is this"
    d.send(ev.ResponseCreate())
    prompt = d.last(SubmitVlm).prompt
    assert prompt.frames == (PNG,)
    assert prompt.transcript == "what is this"
    assert prompt.history == (("assistant", "earlier reply"), ("system", "rules"))


@pytest.mark.parametrize(
    ("parts", "role", "code", "param"),
    [
        ([ev.ContentPart(type="input_text")], "user", ErrorCode.BAD_EVENT, "item.content[0].text"),
        (
            [ev.ContentPart(type="input_audio", audio=b"\x00")],
            "user",
            ErrorCode.BAD_AUDIO,
            "item.content[0].audio",
        ),
        (
            [ev.ContentPart(type="input_image", image_url="http://x/y.png")],
            "user",
            ErrorCode.INVALID_IMAGE,
            "item.content[0].image_url",
        ),
        (
            [ev.ContentPart(type="input_image", image_url="data:image/png;base64,!!")],
            "user",
            ErrorCode.INVALID_IMAGE,
            "item.content[0].image_url",
        ),
        (
            [ev.ContentPart(type="input_image", image_url="data:image/png;base64,AAAA")],
            "assistant",
            ErrorCode.BAD_EVENT,
            "item.content[0].type",
        ),
        ([ev.ContentPart(type="video")], "user", ErrorCode.BAD_EVENT, "item.content[0].type"),
        (
            [
                ev.ContentPart(type="input_audio", audio=b"\x00\x01"),
                ev.ContentPart(type="input_audio", audio=b"\x00\x01"),
            ],
            "user",
            ErrorCode.BAD_EVENT,
            "item.content[1].transcript",
        ),
        ([], "robot", ErrorCode.BAD_EVENT, "item.role"),
    ],
)
def test_bad_items_are_refused_with_their_param(
    parts: list[ev.ContentPart], role: str, code: ErrorCode, param: str
) -> None:
    d = Driver()
    err = d.refuse(item_create(*parts, role=role))
    assert (err.code, err.param) == (code, param)


def test_item_type_duplicate_id_and_unknown_ids() -> None:
    d = Driver()
    bad_type = ev.ConversationItemCreate(item=ev.ConversationItem(type="mcp_call"))
    assert d.refuse(bad_type).param == "item.type"
    d.send(item_create(ev.ContentPart(type="input_text", text="x"), item_id="a"))
    assert d.refuse(item_create(item_id="a")).param == "item.id"
    for event in (
        ev.ConversationItemDelete(item_id="zz"),
        ev.ConversationItemRetrieve(item_id="zz"),
        ev.ConversationItemTruncate(item_id="zz", audio_end_ms=1),
    ):
        assert d.refuse(event).code is ErrorCode.ITEM_NOT_FOUND


def test_created_items_count_toward_pending_bytes() -> None:
    d = Driver(limits=Limits(max_pending_input_bytes=1000))
    err = d.refuse(item_create(ev.ContentPart(type="input_audio", audio=bytes(2000))))
    assert err.code is ErrorCode.INPUT_BACKPRESSURE
    d.send(item_create(ev.ContentPart(type="input_audio", audio=bytes(800)), item_id="x"))
    assert d.p.pending_bytes == 800
    d.send(ev.ConversationItemDelete(item_id="x"))
    assert d.p.pending_bytes == 0


def test_truncate_cuts_a_completed_reply_at_the_heard_audio() -> None:
    d = Driver()
    d.full_turn("say it", "hello there")  # 500 ms of audio
    out = d.send(ev.ConversationItemTruncate(item_id="item_2", audio_end_ms=200))
    assert d.tags(out) == ["conversation.item.truncated"]
    retrieved = d.send(ev.ConversationItemRetrieve(item_id="item_2"))[0]
    assert retrieved.item.content[0].transcript == "hell"
    for bad in (
        ev.ConversationItemTruncate(item_id="item_2", audio_end_ms=9999),
        ev.ConversationItemTruncate(item_id="item_1", audio_end_ms=1),
    ):
        assert d.refuse(bad).code is ErrorCode.INVALID_TRUNCATE


def test_a_text_only_response_emits_the_text_done_chain() -> None:
    d = Driver(config={"output_modalities": ["text"]})
    d.speech_turn()
    d.transcribe("hi")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "Hello. "))
    out = d.result(VlmDecisionResult(vlm.request_id, "speak", "Hello."))
    assert d.effects(SubmitTts) == []
    assert d.tags(out) == [
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    d.append(speech_pcm(200))
    d.commit(create_response=True)
    d.transcribe("again")
    assert d.tags(d.reply("", action="listen"))[0] == "response.listen"


def test_per_response_modalities_and_decision_text_without_deltas() -> None:
    d = Driver()
    d.append(speech_pcm(200))
    d.commit()
    d.send(ev.ResponseCreate(response=ev.ResponseCreateParams(modalities=["audio"])))
    d.transcribe("hi")
    d.result(VlmDecisionResult(d.last(SubmitVlm).request_id, "delegate", "Let me check."))
    assert d.last(SubmitTts).text == "Let me check."


def test_listen_after_speech_was_sent_completes_when_tts_finishes() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("hi")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "One. Two"))
    d.result(VlmDecisionResult(vlm.request_id, "listen"))
    tts = d.last(SubmitTts)
    assert tts.text == "One."
    d.result(TtsAudio(tts.request_id, bytes(480), "One."))
    out = d.result(TtsDone(tts.request_id))
    assert d.events("response.done", out)[0].response.status == "completed"


def test_output_audio_buffer_clear_paths() -> None:
    d = Driver()
    out = d.send(ev.OutputAudioBufferClear())  # nothing to clear
    assert d.tags(out) == ["output_audio_buffer.cleared"] and out[0].response_id is None
    assert d.p.epoch == 0
    d.speech_turn()  # active, no audio yet
    out = d.send(ev.OutputAudioBufferClear())
    assert d.tags(out)[1] == "output_audio_buffer.cleared"  # after the ASR abort, before done
    assert d.events("response.done", out)[0].response.status_details.reason == (
        "output_audio_buffer_clear"
    )
    assert d.p.epoch == 1
    err = d.refuse(ev.OutputAudioBufferClear(response_id="resp_9"))
    assert err.code is ErrorCode.RESPONSE_NOT_ACTIVE
    assert d.send(ev.OutputAudioBufferClear(response_id="resp_1")) == []


def test_playback_drains_at_its_deadline() -> None:
    d = Driver()
    d.full_turn()
    deadline = d.p.next_deadline()
    assert deadline is not None
    d.p.handle_timeout(deadline)
    assert d.p.statistics().playing == ()
    assert d.p.next_deadline() == d.p._last_activity_ms + 300_000  # the idle timeout remains


def test_a_vad_stop_with_too_many_commits_waiting_drops_the_utterance() -> None:
    d = Driver(
        config={"turn_detection": {"type": "server_vad", "create_response": False}},
        limits=Limits(max_pending_commits=1),
    )
    for _ in range(2):
        d.append(speech_pcm(300))
        out = d.vad(0.9, 0.9, 0.9) + d.vad(*([0.05] * 16))
    assert d.tags(out)[-2:] == ["error", "input_audio_buffer.cleared"]
    assert d.events("error", out)[0].error.code == "input_backpressure"
    assert d.p.statistics().buffer_audio_bytes == 0


def test_a_commit_mid_speech_under_vad_commits_the_utterance_and_resets() -> None:
    d = Driver(config={"turn_detection": {"type": "server_vad"}})
    d.append(speech_pcm(300))
    started = d.events("input_audio_buffer.speech_started", d.vad(0.9, 0.9, 0.9))[0]
    out = d.commit("manual", create_response=True)
    assert d.events("input_audio_buffer.committed", out)[0].item_id == started.item_id
    assert d.p.statistics().detector_state == "silence"
    assert d.send(ev.InputAudioBufferClear()) and d.p.pending_bytes == 0


def test_response_create_from_the_idle_camera_frame_and_without_input() -> None:
    d = Driver()
    assert d.refuse(ev.ResponseCreate()).code is ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT
    d.append(frames=[jpeg("now")])
    out = d.send(ev.ResponseCreate())
    assert "response.created" in d.tags(out)
    assert d.last(SubmitVlm).prompt.frames == (jpeg("now"),)
    assert d.refuse(ev.ResponseCreate()).code is ErrorCode.RESPONSE_ALREADY_ACTIVE


def test_an_ack_by_item_id_and_one_for_a_response_without_audio() -> None:
    d = Driver()
    d.full_turn()
    out = d.send(ev.PlaybackAck(item_id="item_2", played_ms=100))
    assert out[0].response_id == "resp_1"
    d.append(speech_pcm(200))
    d.commit(create_response=True)
    err = d.refuse(ev.PlaybackAck(response_id="resp_2", played_ms=1))
    assert err.code is ErrorCode.PLAYBACK_ITEM_NOT_FOUND


def test_b11_cancel_naming_an_older_still_playing_reply_clears_it_alone() -> None:
    d = Driver()
    d.full_turn()  # resp_1: all audio sent, none acked: it may still be playing
    d.speech_turn()  # resp_2 active
    out = d.send(ev.ResponseCancel(response_id="resp_1"))
    assert d.tags(out) == ["output_audio_buffer.cleared"]
    assert out[0].response_id == "resp_1"
    d.transcribe("and now?")
    d.reply("Still here.")
    done = d.speak()[-3]
    assert (done.response.id, done.response.status) == ("resp_2", "completed")


def test_an_assistant_item_deleted_mid_reply_gets_no_item_done() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("hello")
    d.reply("Hi there.")
    d.speak(done=False)
    assistant = d.events("response.output_item.added")[-1].item.id
    d.send(ev.ConversationItemDelete(item_id=assistant))
    out = d.result(TtsDone(d.last(SubmitTts).request_id))
    assert "response.output_item.done" in d.tags(out)
    assert "conversation.item.done" not in d.tags(out)
    assert d.tags(out)[-3:] == ["response.done", "rate_limits.updated", "ResponseEnded"]


def test_b11_a_cancel_fails_waiting_transcriptions_as_commit_aborted() -> None:
    d = Driver()
    d.speech_turn()
    out = d.send(ev.ResponseCancel())
    [failed] = d.events("conversation.item.input_audio_transcription.failed", out)
    assert failed.error.code == ErrorCode.COMMIT_ABORTED.value
    [item_done] = d.events("conversation.item.done", out)
    assert item_done.item.status == "completed"


def test_b11_clearing_an_older_reply_keeps_the_epoch_of_the_active_one() -> None:
    d = Driver()
    d.full_turn()
    d.speech_turn()
    epoch = d.p.epoch
    d.send(ev.ResponseCancel(response_id="resp_1"))
    assert d.p.epoch == epoch
    d.transcribe("and now?")
    assert d.last(SubmitVlm).epoch == epoch
