"""B1 profiles, B2 deferred visuals, B3 context, B4 transcript write-back."""

from __future__ import annotations

import dataclasses

import pytest

from backends.base import InvalidPromptContext, validate_prompt_context
from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from tests.conformance.harness import Driver, jpeg, speech_pcm


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
    }
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


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"system": 3},
        {"system": "s", "history": "x"},
        {"system": "s", "history": [{"role": "robot", "text": "x"}]},
        {"system": "s", "transcript": 5},
        {"system": "s", "frames": ["not-bytes"]},
        "nope",
    ],
)
def test_b3_malformed_prompt_context_is_a_request_local_error_and_the_next_succeeds(
    context: object,
) -> None:
    with pytest.raises(InvalidPromptContext) as info:
        validate_prompt_context(context)
    assert info.value.code is ErrorCode.INVALID_PROMPT_CONTEXT
    # the session carries on: a stage failure with that code fails only its response
    d = Driver()
    d.speech_turn()
    d.transcribe("hi")
    d.fail(d.last(SubmitVlm).request_id, ErrorCode.INVALID_PROMPT_CONTEXT)
    assert d.events("response.done")[-1].response.status == "failed"
    d.full_turn("again", "Fine.")
    assert d.events("response.done")[-1].response.status == "completed"
    good = validate_prompt_context({"system": "s", "history": [{"role": "user", "text": "x"}]})
    assert validate_prompt_context(good) == good


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
