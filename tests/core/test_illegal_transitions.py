"""Every (state, trigger) pair that is not a row of its table raises InvalidTransition
and leaves the model's state and the outbox exactly as they were (rule 7)."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from core.errors import InvalidTransition
from core.outbox import Outbox
from core.statemachines._rulebook import build, fire
from core.statemachines.attachment import Attachment
from core.statemachines.commit import Commit
from core.statemachines.function_call import FunctionCall
from core.statemachines.input_buffer import InputBuffer
from core.statemachines.item import Item
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from core.statemachines.playback import Playback
from core.statemachines.response import Response
from core.statemachines.speculation import ReplyTerms, Speculation
from core.statemachines.turn_detector import TurnDetector
from spec import events as ev
from spec.effects import PromptInput
from spec.tables import TABLES, Table


def _item(out: Outbox) -> Item:
    return Item(
        out,
        "item_1",
        version=1,
        role="assistant",
        content=[ev.ContentPart(type="output_audio", transcript="hi")],
    )


FACTORIES: dict[str, Callable[[Outbox], Any]] = {
    "item": _item,
    "input_buffer": InputBuffer,
    "commit": lambda out: Commit(
        out, _item(out), pcm16=b"", frames=[], has_speech=False, reserved=0
    ),
    "turn_detector": TurnDetector,
    "response": lambda out: Response(
        out,
        "resp_1",
        item_id="item_2",
        segments=[],
        playback=Playback(out, response_id="resp_1", item_id="item_2"),
        modalities=("audio",),
    ),
    "playback": lambda out: Playback(out, response_id="resp_1", item_id="item_2"),
    "attachment": lambda out: Attachment("sess_1", "token_1"),
    "output_audio_buffer": OutputAudioBuffer,
    "function_call": lambda out: FunctionCall(
        out,
        Item(
            out,
            "item_3",
            version=1,
            role="assistant",
            content=[],
            type="function_call",
            call_id="call_1",
            name="f",
            arguments="",
        ),
        response_id="resp_1",
        output_index=0,
    ),
    "speculation": lambda out: Speculation(
        out,
        "spec_1",
        item_id="item_1",
        prompt=PromptInput(system="s", history=(), transcript="hi", frames=()),
        terms=ReplyTerms(audio=True, sample_rate_hz=24_000, voice=None, max_tokens=None),
    ),
}

KWARGS: dict[str, dict[str, Any]] = {
    "transcribe": {"transcript": "x", "content_index": 0},
    "fail_transcription": {
        "content_index": 0,
        "error": ev.ErrorDetail(type="t", code="c", message="m"),
    },
    "truncate": {"audio_end_ms": 0, "transcript": ""},
    "start": {"item_id": "item_1", "audio_start_ms": 0},
    "stop": {"item_id": "item_1", "audio_end_ms": 0},
    "speak": {"item": None, "part_type": "output_audio"},
    "complete": {"status": "completed"},
    "cancel": {"status": "cancelled"},
    "fail": {"status": "failed"},
    "ack": {"played_ms": 0.0},
    "stream": {"delta": "{}"},
}


def _illegal_pairs() -> list[tuple[Table, Any, str]]:
    return [
        (table, state, trigger)
        for table in TABLES
        for state in table.states
        for trigger in table.triggers()
        if not table.allowed(state, trigger)
    ]


@pytest.mark.parametrize(
    ("table", "state", "trigger"),
    _illegal_pairs(),
    ids=lambda v: getattr(v, "name", v) if not isinstance(v, str) else v,
)
def test_illegal_trigger_raises_and_changes_nothing(table: Table, state: Any, trigger: str) -> None:
    out = Outbox()
    model = FACTORIES[table.name](out)
    model.state = state
    snapshot = {}
    for name in model.__slots__:
        if name != "outbox":
            value = getattr(model, name)
            mutable = isinstance(value, list | dict | set | deque)
            snapshot[name] = copy.copy(value) if mutable else value
    with pytest.raises(InvalidTransition) as info:
        fire(build(table), model, trigger, **KWARGS.get(trigger, {}))
    assert info.value.trigger == trigger
    assert model.state is state
    assert out.items == []
    assert {k: getattr(model, k) for k in snapshot} == snapshot


def test_illegal_pairs_exist_for_every_table() -> None:
    assert {t.name for t, _, _ in _illegal_pairs()} == {t.name for t in TABLES}


def test_unknown_trigger_is_an_invalid_transition() -> None:
    out = Outbox()
    with pytest.raises(InvalidTransition, match="no-such"):
        fire(build(TABLES[0]), _item(out), "no-such")


def test_failed_guard_names_the_guard_and_changes_nothing() -> None:
    out = Outbox()
    item = Item(out, "item_1", version=1, role="user", content=[])
    item.complete()
    out.drain()
    with pytest.raises(InvalidTransition) as info:
        item.truncate(audio_end_ms=0, transcript="")
    assert info.value.guard == "is_assistant_audio"
    assert out.items == []


def test_reentrant_fire_is_refused() -> None:
    rules = build(TABLES[0])
    rules._firing = True
    with pytest.raises(RuntimeError, match="re-entrant"):
        fire(rules, _item(Outbox()), "complete")


def _fires_an_illegal_trigger(*_: Any) -> None:
    out = Outbox()
    item = Item(out, "item_1", version=1, role="user", content=[])
    item.complete()
    item.complete()  # a completed item cannot complete again


def test_an_illegal_transition_inside_a_client_event_is_a_typed_refusal_of_that_event() -> None:
    """Rule 7 at the session's edge: should a client event reach a transition its table
    does not allow, the client gets a typed refusal (`InvalidState`, `bad_event`) naming
    its event, and the session goes on; inside a stage result it is ours, a
    `LocalProtocolError`."""
    from core.errors import InvalidState
    from core.session import SessionProtocol
    from spec.errors import ErrorCode, LocalProtocolError
    from spec.stage_results import VadScores

    session = SessionProtocol(session_id="s1", now_ms=0)
    session.next_outputs()
    session._handlers[ev.InputAudioBufferClear] = _fires_an_illegal_trigger
    with pytest.raises(InvalidState) as info:
        session.receive(ev.InputAudioBufferClear(event_id="evt_7"), 10)
    assert (info.value.code, info.value.event_id) == (ErrorCode.BAD_EVENT, "evt_7")
    assert "cannot `complete` item" in info.value.message
    assert session.next_outputs() == []
    session.receive(ev.InputAudioBufferAppend(audio=bytes(640)), 20)  # it goes on
    assert not session.closed

    session._results[VadScores] = _fires_an_illegal_trigger
    with pytest.raises(LocalProtocolError, match="cannot `complete` item"):
        session.backend_event(VadScores((0.1,)), 30)
