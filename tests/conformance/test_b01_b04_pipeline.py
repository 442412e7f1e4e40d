"""B1 profiles, B2 deferred visuals, B3 context, B4 transcript write-back."""

from __future__ import annotations

import dataclasses

import pytest

from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ErrorCode, ErrorType, InvalidEvent
from spec.stage_results import TtsAudio, TtsDone, VlmDecisionResult, VlmDelta
from tests.conformance.harness import Driver, jpeg, speech_pcm
from transport.codec import decode_client_event


def test_b1_speech_commit_goes_asr_then_vlm_then_tts() -> None:
    d = Driver()
    d.speech_turn(event_id="c1")
    assert d.effects(SubmitVlm) == []
    asr = d.last(SubmitAsr)
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    assert vlm.prompt.transcript == "what colour is this"
    d.reply("It is red.")
    assert d.last(SubmitTts).text == "It is red."
    kinds = [type(o) for o in d.log if isinstance(o, SubmitAsr | SubmitVlm | SubmitTts)]
    assert kinds == [SubmitAsr, SubmitVlm, SubmitTts]
    assert asr.response_id == vlm.response_id


def test_b1_camera_commit_without_speech_skips_asr() -> None:
    d = Driver()
    d.append(frames=[jpeg("red")])
    d.commit(create_response=True)
    assert d.effects(SubmitAsr) == []
    assert d.last(SubmitVlm).prompt.frames == (jpeg("red"),)


def test_b1_text_item_skips_asr() -> None:
    d = Driver()
    part = ev.ContentPart(type="input_text", text="describe the scene")
    d.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=[part])))
    d.send(ev.ResponseCreate())
    assert d.effects(SubmitAsr) == []
    assert d.last(SubmitVlm).prompt.transcript == "describe the scene"


def test_b1_camera_profile_never_runs_asr() -> None:
    d = Driver(profile="camera")
    d.append(speech_pcm(300), frames=[jpeg()])
    d.commit(create_response=True)
    assert d.effects(SubmitAsr) == []
    assert d.last(SubmitVlm).prompt.transcript is None


def test_b2_frames_stay_raw_until_the_vlm_and_never_reach_the_asr() -> None:
    d = Driver()
    d.append(speech_pcm(300), frames=[jpeg("blue")])
    d.commit(create_response=True)
    asr = d.last(SubmitAsr)
    assert {f.name for f in dataclasses.fields(asr)} == {
        "request_id",
        "response_id",
        "epoch",
        "item",
        "pcm16",
        "language",  # the session's transcription language: a code, never media
    }
    assert asr.language is None  # detected by default
    assert jpeg("blue") not in asr.pcm16
    d.transcribe("what is this")
    assert d.last(SubmitVlm).prompt.frames == (jpeg("blue"),)


def test_b3_prompt_is_system_history_transcript_and_frames() -> None:
    d = Driver(config={"instructions": "be brief"})
    d.full_turn("hello there", "Hi.")
    d.append(speech_pcm(300), frames=[jpeg("green")])
    d.commit(create_response=True)
    d.transcribe("and now")
    prompt = d.last(SubmitVlm).prompt
    assert prompt.system == "be brief"
    assert prompt.history == (("user", "hello there"), ("assistant", "Hi."))
    assert (prompt.transcript, prompt.frames) == ("and now", (jpeg("green"),))


_TEXT = ev.ContentPart(type="input_text", text="look")


@pytest.mark.parametrize(
    ("role", "part", "code", "param"),
    [
        ("robot", _TEXT, ErrorCode.BAD_EVENT, "item.role"),
        ("user", ev.ContentPart(type="input_text"), ErrorCode.BAD_EVENT, "item.content[0].text"),
        (
            "user",
            ev.ContentPart(type="input_image", image_url="data:image/png;base64,bm90LWFuLWltYWdl"),
            ErrorCode.INVALID_IMAGE,
            "item.content[0].image_url",
        ),
        (
            "system",
            ev.ContentPart(type="input_image", image_url="data:image/png;base64,AAAA"),
            ErrorCode.BAD_EVENT,
            "item.content[0].type",
        ),
    ],
)
def test_b3_malformed_client_context_is_refused_where_it_enters_and_the_session_lives_on(
    role: str, part: ev.ContentPart, code: ErrorCode, param: str
) -> None:
    """Client-supplied prompt context (items: role, texts, images) is validated once, at
    `conversation.item.create`; the prompt built from session state is trusted after."""
    d = Driver(config={"instructions": "be brief"})
    d.full_turn("hello there", "Hi.")
    bad = ev.ConversationItemCreate(
        event_id="bad_1", item=ev.ConversationItem(role=role, content=[part])
    )
    err = d.refuse(bad)  # nothing emitted, no state changed
    assert (err.code, err.param, err.event_id) == (code, param, "bad_1")
    assert err.error_type is ErrorType.INVALID_REQUEST  # a request-local client error
    d.full_turn("and now", "Fine.")
    assert d.events("response.done")[-1].response.status == "completed"
    prompt = d.last(SubmitVlm).prompt
    assert prompt.history == (("user", "hello there"), ("assistant", "Hi."))
    assert (prompt.system, prompt.transcript, prompt.frames) == ("be brief", "and now", ())


def test_b3_malformed_instructions_are_refused_when_the_event_is_decoded() -> None:
    frame = b'{"type": "session.update", "event_id": "u1", "session": {"instructions": 5}}'
    with pytest.raises(InvalidEvent) as info:
        decode_client_event(frame)
    assert info.value.error_type is ErrorType.INVALID_REQUEST


def test_b3_a_prompt_the_vlm_stage_cannot_serve_fails_only_its_response() -> None:
    """A stage may still refuse a prompt's content (an undecodable frame, a turn over its
    context budget): `invalid_prompt_context`, a request-local error; the session goes on."""
    d = Driver()
    d.speech_turn()
    d.transcribe("hi")
    out = d.fail(d.last(SubmitVlm).request_id, ErrorCode.INVALID_PROMPT_CONTEXT)
    [error] = d.events("error", out)
    assert error.error.code == ErrorCode.INVALID_PROMPT_CONTEXT
    assert error.error.type == ErrorType.INVALID_REQUEST  # request-local: the client's
    assert d.events("response.done")[-1].response.status == "failed"
    d.full_turn("again", "Fine.")
    assert d.events("response.done")[-1].response.status == "completed"


def test_b4_transcript_is_written_to_its_item_and_stays_user_input_for_camera_turns() -> None:
    d = Driver()
    d.speech_turn()
    item_id = d.last(SubmitAsr).item.item_id
    out = d.transcribe("tell me the colour")
    done = d.events("conversation.item.input_audio_transcription.completed", out)
    assert [(e.item_id, e.content_index, e.transcript) for e in done] == [
        (item_id, 0, "tell me the colour")
    ]
    assert d.tags(out)[:2] == [
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    d.reply("It is red.")
    d.speak()
    for colour in ("blue", "green"):
        d.append(frames=[jpeg(colour)])
        d.commit(create_response=True)
        prompt = d.last(SubmitVlm).prompt
        assert ("user", "tell me the colour") in prompt.history
        assert ("assistant", "tell me the colour") not in prompt.history
        d.reply(f"It is {colour}.")
        d.speak()


def test_b1_the_first_tts_piece_ends_at_a_clause_later_pieces_at_sentences() -> None:
    """The first audio waits for a clause, not a sentence (section 3.2): a long enough
    clause starts TTS; a short one ("Yes,") waits; later pieces are whole sentences, and
    the transcript keeps its spacing exactly."""
    d = Driver()
    d.speech_turn()
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    for delta in ["Yes, this cup", " is red, bright red,", " and round. It", " is, too. Ok"]:
        d.result(VlmDelta(vlm.request_id, delta))
    d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    for tts in d.effects(SubmitTts):
        d.result(TtsAudio(tts.request_id, bytes(480), tts.text))
        d.result(TtsDone(tts.request_id))
    texts = [t.text for t in d.effects(SubmitTts)]
    assert texts == ["Yes, this cup is red,", "bright red, and round.", "It is, too.", "Ok"]
    done = d.events("response.output_audio_transcript.done")[-1]
    assert done.transcript == "Yes, this cup is red, bright red, and round. It is, too. Ok"


def test_b1_a_dash_between_spaces_ends_the_first_clause() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("what colour is this")
    vlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, "A red cup - well - and a pen-holder. "))
    assert [t.text for t in d.effects(SubmitTts)] == ["A red cup - well -", "and a pen-holder."]
