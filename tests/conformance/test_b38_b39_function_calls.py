"""B38: a response's function call streams its arguments into a `function_call` item and
ends (done, or `incomplete` when cut); B39: the client answers a call once with a
`function_call_output` item and the follow-up response speaks from it
(docs/session-semantics.md 3.8), driven on `SessionProtocol` alone."""

from __future__ import annotations

from typing import Any

from spec import events as ev
from spec.effects import Abort, SubmitTts, SubmitVlm
from spec.errors import ErrorCode
from spec.limits import MAX_FUNCTION_ARGUMENTS_BYTES
from spec.stage_results import VlmCallDelta, VlmDecisionResult, VlmDelta
from tests.conformance.harness import Driver, item_create, speech_pcm

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
ARGUMENTS = ('{"city"', ': "Par', 'is"}')
VAD = {"turn_detection": {"type": "server_vad"}}
HI, LO = 0.9, 0.1


def with_tools(tool_choice: object = "auto", **config: Any) -> Driver:
    return Driver(config={"tools": [WEATHER], "tool_choice": tool_choice, **config})


def ask(d: Driver, text: str = "weather in Paris?") -> SubmitVlm:
    d.send(item_create(ev.ContentPart(type="input_text", text=text)))
    d.send(ev.ResponseCreate())
    return d.last(SubmitVlm)


def stream_call(d: Driver, vlm: SubmitVlm, pieces: tuple[str, ...] = ARGUMENTS) -> list[Any]:
    out: list[Any] = []
    for piece in pieces:
        out += d.result(VlmCallDelta(vlm.request_id, 0, "get_weather", piece))
    return out


def called(d: Driver) -> ev.ConversationItem:
    """A turn whose response calls get_weather with ARGUMENTS and ends."""
    vlm = ask(d)
    stream_call(d, vlm)
    d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    item: ev.ConversationItem = d.events("response.output_item.done")[-1].item
    return item


def answer(call_id: str, output: str = '{"sky": "sunny"}', **kw: Any) -> ev.ConversationItemCreate:
    return ev.ConversationItemCreate(
        item=ev.ConversationItem(type="function_call_output", call_id=call_id, output=output, **kw)
    )


# --- B38: the call --------------------------------------------------------------------


def test_b38_the_model_gets_the_offered_tools_and_tool_choice() -> None:
    vlm = ask(with_tools("required"))
    assert [t.name for t in vlm.tools] == ["get_weather"]
    assert vlm.tool_choice.mode == "required"
    assert ask(with_tools("none")).tools == ()
    assert ask(Driver()).tools == ()


def test_b38_a_call_streams_its_arguments_and_the_response_completes_with_it() -> None:
    d = with_tools()
    vlm = ask(d)
    since = len(d.log)
    out = stream_call(d, vlm)
    out += d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    assert d.tags(out) == [
        "conversation.item.added",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * 3,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
        "ResponseEnded",
    ]
    added = d.events("conversation.item.added", out)[0].item
    assert (added.type, added.name, added.arguments, added.status) == (
        "function_call",
        "get_weather",
        "",
        "in_progress",
    )
    deltas = d.events("response.function_call_arguments.delta", out)
    assert "".join(e.delta for e in deltas) == "".join(ARGUMENTS)
    assert {(e.call_id, e.item_id, e.response_id) for e in deltas} == {
        (added.call_id, added.id, "resp_1")
    }
    [args_done] = d.events("response.function_call_arguments.done", out)
    assert (args_done.name, args_done.arguments) == ("get_weather", "".join(ARGUMENTS))
    [done] = d.events("response.done", out)
    assert done.response.status == "completed"
    [item] = done.response.output
    assert (item.type, item.call_id, item.arguments, item.status) == (
        "function_call",
        added.call_id,
        "".join(ARGUMENTS),
        "completed",
    )
    assert not d.events("response.listen", d.log[since:])  # a call is no silence


def test_b38_a_spoken_note_and_a_call_have_their_own_output_indices() -> None:
    d = with_tools()
    vlm = ask(d)
    d.result(VlmDelta(vlm.request_id, "Let me look that up."))
    stream_call(d, vlm)
    d.result(VlmDecisionResult(vlm.request_id, "speak", "Let me look that up."))
    d.speak()
    [call_added, note_added] = d.events("response.output_item.added")
    assert (call_added.output_index, note_added.output_index) == (0, 1)
    assert {e.output_index for e in d.events("response.output_audio.delta")} == {1}
    [done] = d.events("response.done")
    assert [i.type for i in done.response.output] == ["function_call", "message"]


def test_b38_a_call_of_a_function_the_session_does_not_offer_is_dropped() -> None:
    for d, name in ((with_tools(), "book_flight"), (with_tools("none"), "get_weather")):
        vlm = ask(d)
        out = d.result(VlmCallDelta(vlm.request_id, 0, name, "{}"))
        assert out == []
        d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
        assert not d.events("response.function_call_arguments.done")
        assert d.events("response.done")[-1].response.output == []


def test_b38_a_named_tool_choice_offers_that_function_only() -> None:
    other = {**WEATHER, "name": "get_time"}
    d = Driver(
        config={"tools": [WEATHER, other], "tool_choice": {"type": "function", "name": "get_time"}}
    )
    vlm = ask(d)
    assert d.result(VlmCallDelta(vlm.request_id, 0, "get_weather", "{}")) == []
    assert d.tags(d.result(VlmCallDelta(vlm.request_id, 1, "get_time", "{}")))[0] == (
        "conversation.item.added"
    )


def test_b38_cancel_during_the_arguments_ends_the_call_incomplete_and_keeps_the_history() -> None:
    d = with_tools()
    d.send(item_create(ev.ContentPart(type="input_text", text="earlier"), item_id="kept"))
    vlm = ask(d)
    stream_call(d, vlm, ARGUMENTS[:2])
    out = d.send(ev.ResponseCancel())
    [args_done] = d.events("response.function_call_arguments.done", out)
    assert args_done.arguments == "".join(ARGUMENTS[:2])  # what came, as OpenAI sends it
    [item_done] = d.events("response.output_item.done", out)
    assert item_done.item.status == "incomplete"
    [done] = d.events("response.done", out)
    assert done.response.status == "cancelled"
    assert [i.status for i in done.response.output] == ["incomplete"]
    assert any(isinstance(o, Abort) for o in out)
    # a late delta of the cancelled request is fenced
    assert d.result(VlmCallDelta(vlm.request_id, 0, "get_weather", "more")) == []
    # no other item lost: the earlier item stays, and the cut call too
    retrieved = d.send(ev.ConversationItemRetrieve(item_id="kept"))
    assert d.events("conversation.item.retrieved", retrieved)
    call = d.send(ev.ConversationItemRetrieve(item_id=args_done.item_id))
    assert d.events("conversation.item.retrieved", call)[0].item.status == "incomplete"


def test_b38_a_barge_in_during_the_arguments_cuts_the_call_and_starts_the_next_turn() -> None:
    d = with_tools(**VAD)
    vlm = ask(d)
    stream_call(d, vlm, ARGUMENTS[:1])
    d.append(speech_pcm(200))
    out = d.vad(HI, HI, HI)  # speech during the call's arguments: barge-in
    assert "input_audio_buffer.speech_started" in d.tags(out)
    [item_done] = d.events("response.output_item.done", out)
    assert item_done.item.type == "function_call" and item_done.item.status == "incomplete"
    assert d.events("response.done", out)[0].response.status == "cancelled"
    out = d.vad(*([LO] * 16))
    assert "response.created" in d.tags(out)  # the user's new turn is answered


def test_b38_arguments_past_their_bound_cut_the_call() -> None:
    d = with_tools()
    vlm = ask(d)
    stream_call(d, vlm, ("{",))
    out = d.result(
        VlmCallDelta(vlm.request_id, 0, "get_weather", "x" * MAX_FUNCTION_ARGUMENTS_BYTES)
    )
    [item_done] = d.events("response.output_item.done", out)
    assert item_done.item.status == "incomplete" and item_done.item.arguments == "{"
    assert d.result(VlmCallDelta(vlm.request_id, 0, "get_weather", "}")) == []
    d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    assert d.events("response.done")[-1].response.status == "completed"


# --- B39: the output and the follow-up --------------------------------------------------


def test_b39_the_output_is_added_and_the_follow_up_speaks_from_it() -> None:
    d = with_tools()
    call = called(d)
    out = d.send(answer(call.call_id or ""))
    [added] = d.events("conversation.item.added", out)
    assert (added.item.type, added.item.call_id, added.item.output) == (
        "function_call_output",
        call.call_id,
        '{"sky": "sunny"}',
    )
    assert "response.created" not in d.tags(out)  # the client asks for the follow-up
    d.send(ev.ResponseCreate())
    vlm: SubmitVlm = d.last(SubmitVlm)
    assert vlm.prompt.transcript == '[get_weather returned] {"sky": "sunny"}'
    assert ("assistant", 'get_weather({"city": "Paris"})') in vlm.prompt.history
    d.reply("It is sunny in Paris.")
    d.speak()
    assert d.events("response.done")[-1].response.output[0].type == "message"


def test_b39_an_output_for_an_unknown_call_id_is_a_typed_error_that_changes_nothing() -> None:
    d = with_tools()
    called(d)
    error = d.refuse(answer("call_nope"))
    assert (error.code, error.param) == (ErrorCode.FUNCTION_CALL_NOT_FOUND, "item.call_id")


def test_b39_a_second_output_for_one_call_is_a_typed_error() -> None:
    d = with_tools()
    call = called(d)
    d.send(answer(call.call_id or ""))
    error = d.refuse(answer(call.call_id or "", output="again"))
    assert error.code is ErrorCode.FUNCTION_CALL_ALREADY_ANSWERED


def test_b39_an_output_for_a_call_cut_or_still_streaming_is_a_typed_error() -> None:
    d = with_tools()
    vlm = ask(d)
    stream_call(d, vlm, ARGUMENTS[:1])
    call_id = d.events("conversation.item.added")[-1].item.call_id
    assert d.refuse(answer(call_id)).code is ErrorCode.FUNCTION_CALL_INCOMPLETE
    d.send(ev.ResponseCancel())
    assert d.refuse(answer(call_id)).code is ErrorCode.FUNCTION_CALL_INCOMPLETE


def test_b39_a_deleted_call_answers_nothing() -> None:
    d = with_tools()
    call = called(d)
    d.send(ev.ConversationItemDelete(item_id=call.id or ""))
    assert d.refuse(answer(call.call_id or "")).code is ErrorCode.FUNCTION_CALL_NOT_FOUND


def test_b39_a_call_the_client_brings_as_history_can_be_answered_once() -> None:
    d = with_tools()
    out = d.send(
        ev.ConversationItemCreate(
            item=ev.ConversationItem(
                type="function_call", call_id="call_mine", name="get_weather", arguments="{}"
            )
        )
    )
    assert d.tags(out) == ["conversation.item.added", "conversation.item.done"]
    error = d.refuse(
        ev.ConversationItemCreate(
            item=ev.ConversationItem(type="function_call", call_id="call_mine", name="get_weather")
        )
    )
    assert (error.code, error.param) == (ErrorCode.BAD_EVENT, "item.call_id")
    d.send(answer("call_mine"))
    assert d.refuse(answer("call_mine")).code is ErrorCode.FUNCTION_CALL_ALREADY_ANSWERED


def test_b39_malformed_function_items_are_refused_with_their_path() -> None:
    d = with_tools()
    call = called(d)
    cases = [
        (ev.ConversationItem(type="function_call_output", output="x"), "item.call_id"),
        (ev.ConversationItem(type="function_call_output", call_id=call.call_id), "item.output"),
        (
            ev.ConversationItem(
                type="function_call_output", call_id=call.call_id, output="x" * (1 << 20)
            ),
            "item.output",
        ),
        (ev.ConversationItem(type="function_call", call_id="c2", name="no spaces"), "item.name"),
        (
            ev.ConversationItem(
                type="function_call_output",
                call_id=call.call_id,
                output="x",
                content=[ev.ContentPart(type="input_text", text="y")],
            ),
            "item.content",
        ),
    ]
    for item, param in cases:
        error = d.refuse(ev.ConversationItemCreate(item=item))
        assert (error.code, error.param) == (ErrorCode.BAD_EVENT, param)
    d.send(answer(call.call_id or ""))  # the call is still answerable: nothing changed


def test_b38_a_call_item_cannot_be_truncated_even_when_its_response_spoke() -> None:
    d = with_tools()
    vlm = ask(d)
    d.result(VlmDelta(vlm.request_id, "Let me look that up."))
    stream_call(d, vlm)
    d.result(VlmDecisionResult(vlm.request_id, "speak", "Let me look that up."))
    d.speak()
    call = d.events("response.done")[-1].response.output[0]
    error = d.refuse(ev.ConversationItemTruncate(item_id=call.id or "", audio_end_ms=0))
    assert (error.code, error.param) == (ErrorCode.INVALID_TRUNCATE, "audio_end_ms")


def test_b38_a_connection_dropped_during_the_arguments_replays_the_whole_call() -> None:
    """A resumable session (B27) whose connection drops during a call's arguments: the
    call goes on while detached, and the resumed connection gets every event after the
    last one it saw, the rest of the arguments, the call's done and the response's done,
    once each; the call is then answered."""
    from itertools import count

    from core.resume import Resumption
    from core.session import SessionProtocol
    from spec.session_config import validate_session

    tokens = count(1)
    resume = Resumption(
        "sess_1", new_token=lambda: f"tok_{next(tokens)}", max_bytes=1 << 20, max_age_ms=60_000
    )
    d = Driver(config={"tools": [WEATHER]})
    d.p = SessionProtocol(
        session_id="sess_1", config=validate_session({"tools": [WEATHER]}), resume=resume
    )
    d.log = []  # the resumable session's events only
    d.take()
    vlm = ask(d)
    stream_call(d, vlm, ARGUMENTS[:1])
    seen = max(o.server_event_seq or 0 for o in d.log if isinstance(o, ev.ServerEvent))
    resume.detach()  # the connection dropped; the call goes on
    stream_call(d, vlm, ARGUMENTS[1:])
    d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    resume.reattach(resume.attachment.token)
    replay = resume.resumed(seen, d.now, lambda: "event_resumed")
    replayed = [o for o in replay[1:] if isinstance(o, ev.ServerEvent)]
    deltas = [o.delta for o in replayed if isinstance(o, ev.ResponseFunctionCallArgumentsDelta)]
    assert deltas == list(ARGUMENTS[1:])  # only what the client missed, nothing twice
    assert [o.server_event_seq for o in replayed] == list(range(seen + 1, seen + 1 + len(replayed)))
    [args_done] = [o for o in replayed if isinstance(o, ev.ResponseFunctionCallArgumentsDone)]
    assert args_done.arguments == "".join(ARGUMENTS)
    assert any(isinstance(o, ev.ResponseDone) for o in replayed)
    d.send(answer(args_done.call_id))  # answered over the new connection


# --- B38: a call the session's tool_choice asks for ------------------------------------


def tts(out: list[Any]) -> list[SubmitTts]:
    return [o for o in out if isinstance(o, SubmitTts)]


def test_b38_under_required_a_turn_without_a_call_fails_unspoken_with_a_typed_error() -> None:
    d = with_tools("required")
    vlm = ask(d)
    since = len(d.log)
    out = d.result(VlmDelta(vlm.request_id, "It is sunny in Paris. Anything else?"))
    assert tts(out) == []  # held: only the decision says whether a call comes
    out = d.result(VlmDecisionResult(vlm.request_id, "speak", "It is sunny in Paris."))
    assert d.tags(out) == ["error", "response.done", "rate_limits.updated", "ResponseEnded"]
    [error] = d.events("error", out)
    assert (error.error.type, error.error.code) == ("server_error", "tool_choice_unmet")
    [done] = d.events("response.done", out)
    assert done.response.status == "failed"
    details = done.response.status_details
    assert (details.type, details.reason) == ("failed", "tool_choice_unmet")
    assert details.error["code"] == "tool_choice_unmet"
    assert done.response.output == []
    assert tts(d.log[since:]) == []
    # the session goes on: the next turn is asked
    assert ask(d, "and in Rome?").request_id != vlm.request_id


def test_b38_under_required_a_listen_decision_fails_too() -> None:
    d = with_tools("required")
    vlm = ask(d)
    out = d.result(VlmDecisionResult(vlm.request_id, "listen", ""))
    assert d.events("response.listen", out) == []
    assert d.events("response.done", out)[0].response.status == "failed"


def test_b38_under_required_the_reply_waits_for_the_decision_then_speaks_with_the_call() -> None:
    d = with_tools("required")
    vlm = ask(d)
    d.result(VlmDelta(vlm.request_id, "Let me look. One moment."))
    stream_call(d, vlm)
    assert d.effects(SubmitTts) == []
    d.result(VlmDecisionResult(vlm.request_id, "speak", "Let me look. One moment."))
    assert [t.text for t in d.effects(SubmitTts)] == ["Let me look. One moment."]
    d.speak()
    [done] = d.events("response.done")
    assert done.response.status == "completed"
    assert [i.type for i in done.response.output] == ["function_call", "message"]


def test_b38_a_named_tool_choice_fails_a_turn_that_calls_only_another_function() -> None:
    other = {**WEATHER, "name": "get_time"}
    choice = {"type": "function", "name": "get_time"}
    d = Driver(config={"tools": [WEATHER, other], "tool_choice": choice})
    vlm = ask(d)
    d.result(VlmCallDelta(vlm.request_id, 0, "get_weather", "{}"))  # dropped: not offered
    out = d.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    assert d.events("error", out)[0].error.code == "tool_choice_unmet"
    assert d.events("response.done", out)[0].response.status == "failed"
    d2 = Driver(config={"tools": [WEATHER, other], "tool_choice": choice})
    vlm = ask(d2)
    d2.result(VlmCallDelta(vlm.request_id, 0, "get_time", "{}"))
    out = d2.result(VlmDecisionResult(vlm.request_id, "speak", ""))
    assert d2.events("error", out) == []
    assert d2.events("response.done", out)[0].response.status == "completed"


def test_b38_required_without_a_declared_tool_asks_for_no_call() -> None:
    d = Driver(config={"tool_choice": "required"})
    vlm = ask(d)
    assert tts(d.result(VlmDelta(vlm.request_id, "It is sunny. "))) != []
    d.result(VlmDecisionResult(vlm.request_id, "speak", "It is sunny."))
    d.speak()
    assert d.events("response.done")[0].response.status == "completed"
