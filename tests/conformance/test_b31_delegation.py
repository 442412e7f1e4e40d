"""B31: a delegated question is answered by the background model as a follow-up response
(docs/session-semantics.md 3.6, decision D32), driven on `SessionProtocol` alone."""

from __future__ import annotations

from spec import events as ev
from spec.effects import Abort, SubmitDelegation, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from spec.stage_results import (
    DelegationAnswer,
    StageFailure,
    TtsAudio,
    TtsDone,
    VlmDecisionResult,
    VlmDelta,
)
from tests.conformance.harness import Driver, item_create, speech_pcm

NOTE = "Let me check."
QUESTION = "How far is the moon?"
ANSWER = "About 384,000 kilometres. It varies a little."


def delegating(**kw: object) -> Driver:
    d = Driver(**kw)  # type: ignore[arg-type]
    d.p.delegation = True
    return d


def delegate(d: Driver) -> SubmitDelegation:
    """A spoken turn the VLM delegates: the note streams, the decision carries the question."""
    d.speech_turn()
    d.transcribe("how far is the moon")
    vlm: SubmitVlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, NOTE))
    d.result(VlmDecisionResult(vlm.request_id, "delegate", NOTE, question=QUESTION))
    return d.last(SubmitDelegation)


def finish_speaking(d: Driver) -> list[object]:
    """Every open TTS request of the active response plays one chunk and ends."""
    out: list[object] = []
    for tts in d.effects(SubmitTts):
        out += d.result(TtsAudio(tts.request_id, bytes(4800), tts.text))
        out += d.result(TtsDone(tts.request_id))
    return out


def test_b31_the_question_goes_to_the_background_model_with_the_conversation() -> None:
    d = delegating()
    d.full_turn("hello", "Hi there.")
    request = delegate(d)
    assert request.question == QUESTION
    assert request.transcript == "how far is the moon"
    assert ("user", "hello") in request.history and ("assistant", "Hi there.") in request.history
    assert request.request_id == "resp_2:delegation:1" and request.response_id == "resp_2"
    assert [t.text for t in d.effects(SubmitTts)][-1] == NOTE  # the question is never spoken


def test_b31_an_answer_after_the_note_is_spoken_as_a_server_created_response() -> None:
    d = delegating()
    request = delegate(d)
    finish_speaking(d)
    assert d.events("response.done")[-1].response.status == "completed"
    since = len(d.log)
    out = d.result(DelegationAnswer(request.request_id, ANSWER))
    assert d.tags(out)[0] == "response.created"
    follow_up = out[0].response.id
    assert follow_up == "resp_2"
    # spoken sentence by sentence, like a streamed reply
    assert [t.text for t in d.effects(SubmitTts, since)] == [
        "About 384,000 kilometres.",
        "It varies a little.",
    ]
    out = finish_speaking_from(d, since)
    assert d.tags(out)[-3:] == ["response.done", "rate_limits.updated", "ResponseEnded"]
    done = d.events("response.done", out)[0]
    assert (done.response.id, done.response.status) == (follow_up, "completed")
    assert done.response.output[0].content[0].transcript == ANSWER
    # the answer is part of the conversation: the next prompt's history has it
    d.full_turn("thanks", "You're welcome.")
    assert ("assistant", ANSWER) in d.last(SubmitVlm).prompt.history


def finish_speaking_from(d: Driver, since: int) -> list[object]:
    out: list[object] = []
    for tts in d.effects(SubmitTts, since):
        out += d.result(TtsAudio(tts.request_id, bytes(4800), tts.text))
        out += d.result(TtsDone(tts.request_id))
    return out


def test_b31_an_answer_waits_behind_the_active_response_never_over_it() -> None:
    d = delegating()
    request = delegate(d)
    assert d.p.statistics().active_response == "resp_1"
    assert d.result(DelegationAnswer(request.request_id, ANSWER)) == []  # it waits
    out = finish_speaking(d)
    tags = d.tags(out)
    # the note ends first, then the follow-up starts
    assert tags.index("response.done") < tags.index("response.created")
    assert d.events("response.created", out)[0].response.id == "resp_2"


def test_b31_user_input_deferred_meanwhile_goes_before_a_waiting_answer() -> None:
    d = delegating()
    request = delegate(d)
    d.result(DelegationAnswer(request.request_id, ANSWER))
    d.append(speech_pcm(300))
    d.commit(create_response=True)  # deferred behind the note
    finish_speaking(d)
    created = d.events("response.created")
    assert [r.response.id for r in created] == ["resp_1", "resp_2"]
    assert d.p.statistics().active_state == "transcribing"  # the user's turn, not the answer


def test_b31_barge_in_aborts_the_delegation_and_a_late_answer_is_dropped() -> None:
    d = delegating(config={"turn_detection": {"type": "server_vad"}})
    d.send(item_create(ev.ContentPart(type="input_text", text="how far is the moon")))
    d.send(ev.ResponseCreate())
    vlm: SubmitVlm = d.last(SubmitVlm)
    d.result(VlmDecisionResult(vlm.request_id, "delegate", NOTE, question=QUESTION))
    request: SubmitDelegation = d.last(SubmitDelegation)
    d.append(speech_pcm(300))
    out = d.vad(0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9)  # speech starts: barge-in
    assert "input_audio_buffer.speech_started" in d.tags(out)
    assert Abort(request.request_id, "delegation", "resp_1") in out
    assert d.events("response.done", out)[0].response.status == "cancelled"
    assert d.result(DelegationAnswer(request.request_id, ANSWER)) == []  # fenced


def test_b31_response_cancel_drops_an_answer_that_was_waiting() -> None:
    d = delegating()
    request = delegate(d)
    d.result(DelegationAnswer(request.request_id, ANSWER))  # waits behind the note
    out = d.send(ev.ResponseCancel())
    assert d.events("response.done", out)[0].response.status == "cancelled"
    assert "response.created" not in d.tags(out)
    assert d.p.statistics().active_response is None


def test_b31_response_cancel_with_only_a_delegation_open_aborts_it() -> None:
    d = delegating()
    request = delegate(d)
    finish_speaking(d)
    out = d.send(ev.ResponseCancel(event_id="c1"))
    assert Abort(request.request_id, "delegation", "resp_1") in out
    assert "response.done" not in d.tags(out)  # the note had ended; only its audio is cleared
    assert d.result(DelegationAnswer(request.request_id, ANSWER)) == []
    # with nothing left to cancel, a cancel is refused as before
    assert d.refuse(ev.ResponseCancel(event_id="c2")).code is ErrorCode.RESPONSE_NOT_ACTIVE


def test_b31_a_background_failure_is_a_typed_error_and_nothing_else_changes() -> None:
    d = delegating()
    request = delegate(d)
    out = d.result(StageFailure(request.request_id, ErrorCode.STAGE_FAILED, "HTTP 500"))
    assert d.tags(out) == ["error"]
    assert out[0].error.code == "delegation_failed"
    assert out[0].error.type == "server_error"
    assert d.p.statistics().active_response == "resp_1"  # the note goes on
    finish_speaking(d)
    assert d.events("response.done")[-1].response.status == "completed"
    assert d.result(DelegationAnswer(request.request_id, ANSWER)) == []


def test_b31_closing_the_session_aborts_the_delegation() -> None:
    d = delegating()
    request = delegate(d)
    finish_speaking(d)
    out = d.send(ev.SessionClose(reason="bye"))
    assert out[0] == Abort(request.request_id, "delegation", "resp_1")
    assert d.result(DelegationAnswer(request.request_id, ANSWER)) == []


def test_b31_without_a_background_model_the_question_is_dropped() -> None:
    d = Driver()
    d.speech_turn()
    d.transcribe("how far is the moon")
    vlm: SubmitVlm = d.last(SubmitVlm)
    d.result(VlmDecisionResult(vlm.request_id, "delegate", NOTE, question=QUESTION))
    assert d.effects(SubmitDelegation) == []
    assert [t.text for t in d.effects(SubmitTts)] == [NOTE]


def test_b31_a_text_only_session_shows_the_answer_as_text() -> None:
    d = delegating(config={"output_modalities": ["text"]})
    request = delegate(d)
    out = d.result(DelegationAnswer(request.request_id, ANSWER))
    assert "response.output_text.delta" in d.tags(out)
    assert d.events("response.output_text.done", out)[0].text == ANSWER
    assert d.events("response.done", out)[-1].response.status == "completed"
