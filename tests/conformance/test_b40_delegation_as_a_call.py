"""B40: when a session offers the delegation's function (a tool named `delegate`, or the
one `extra_body.delegation_tool` names), JoyAI's delegated question becomes a call of it
that the client answers; without one, `[delegation]` answers as before (B31)
(docs/session-semantics.md 3.8), driven on `SessionProtocol` alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spec import events as ev
from spec.effects import SubmitDelegation, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from spec.stage_results import VlmDecisionResult, VlmDelta
from tests.conformance.harness import Driver, item_create

NOTE = "Let me check."
QUESTION = "How far is the moon?"
DELEGATE: dict[str, Any] = {
    "type": "function",
    "name": "delegate",
    "description": "Hand a question to a stronger model.",
    "parameters": {
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
}


def delegating(**config: Any) -> Driver:
    d = Driver(config=config)
    d.p.delegation = True  # a background model is configured too: the call wins
    return d


def delegate(d: Driver) -> list[Any]:
    d.send(item_create(ev.ContentPart(type="input_text", text="how far is the moon")))
    d.send(ev.ResponseCreate())
    vlm: SubmitVlm = d.last(SubmitVlm)
    d.result(VlmDelta(vlm.request_id, NOTE))
    return d.result(VlmDecisionResult(vlm.request_id, "delegate", NOTE, question=QUESTION))


def test_b40_a_declared_delegate_tool_turns_the_question_into_a_call() -> None:
    d = delegating(tools=[DELEGATE])
    out = delegate(d)
    assert not d.effects(SubmitDelegation)  # the client answers it, not [delegation]
    [args] = d.events("response.function_call_arguments.done", out)
    assert args.name == "delegate" and json.loads(args.arguments) == {"question": QUESTION}
    assert [t.text for t in d.effects(SubmitTts)] == [NOTE]  # the note is still spoken
    d.speak()
    [done] = d.events("response.done")
    assert done.response.status == "completed"
    assert {i.type for i in done.response.output} == {"function_call", "message"}
    # the client answers; the follow-up speaks from the answer
    d.send(
        ev.ConversationItemCreate(
            item=ev.ConversationItem(
                type="function_call_output", call_id=args.call_id, output="384,400 km"
            )
        )
    )
    d.send(ev.ResponseCreate())
    assert d.last(SubmitVlm).prompt.transcript == "[delegate returned] 384,400 km"


@pytest.mark.parametrize(
    ("parameters", "key"),
    [
        ({"type": "object", "properties": {"query": {"type": "string"}}}, "query"),
        (
            {
                "type": "object",
                "properties": {"topic": {"type": "string"}, "query": {"type": "string"}},
                "required": ["query"],
            },
            "query",
        ),
        (
            {
                "type": "object",
                "properties": {"topic": {"type": "string"}, "query": {"type": "string"}},
            },
            "question",
        ),
    ],
    ids=["its-only-property", "its-only-required-one", "else-question"],
)
def test_b40_the_session_may_name_another_function_with_its_own_parameter(
    parameters: dict[str, Any], key: str
) -> None:
    """The question is the value of the function's only property, else of its only
    required one, else of `question`."""
    expert = {"type": "function", "name": "ask_expert", "parameters": parameters}
    d = delegating(tools=[expert], extra_body={"delegation_tool": "ask_expert"})
    [args] = d.events("response.function_call_arguments.done", delegate(d))
    assert (args.name, json.loads(args.arguments)) == ("ask_expert", {key: QUESTION})


def test_b40_without_the_function_offered_the_background_model_answers_as_before() -> None:
    weather = {"type": "function", "name": "get_weather"}
    for config in ({}, {"tools": [weather]}, {"tools": [DELEGATE], "tool_choice": "none"}):
        d = delegating(**config)
        out = delegate(d)
        assert d.last(SubmitDelegation).question == QUESTION
        assert not d.events("response.function_call_arguments.done", out)


def test_b40_a_delegation_tool_that_is_no_function_name_is_refused() -> None:
    error = Driver().refuse(
        ev.SessionUpdate(session=ev.SessionPatch(extra_body={"delegation_tool": "two words"}))
    )
    assert (error.code, error.param) == (
        ErrorCode.BAD_EVENT,
        "session.extra_body.delegation_tool",
    )
