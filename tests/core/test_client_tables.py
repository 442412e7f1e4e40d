"""Every (state, trigger) pair of a client table that is not a row raises
InvalidTransition and leaves the model and the outbox unchanged. (The client tables'
well-formedness is checked with the server's, in tests/spec/test_tables.py.)"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from core.errors import InvalidTransition
from core.statemachines.client_camera import Camera
from core.statemachines.client_connection import Connection
from core.statemachines.client_hold import Hold
from core.statemachines.client_outbox import ClientOutbox
from core.statemachines.client_playback import ClientPlayback
from core.statemachines.client_reply_gate import ReplyGate
from core.statemachines.client_resume import ResumeLink
from core.statemachines.client_watchdog import Watchdog
from spec.tables.base import Table
from spec.tables.client_constants import CLIENT_TABLES, session_payload

FACTORIES: dict[str, Callable[[ClientOutbox], Any]] = {
    "client_connection": lambda out: Connection(out, session_payload("ptt")),
    "client_hold": lambda out: Hold(out, "hold_1"),
    "client_playback": lambda out: ClientPlayback(out, "resp_1", "item_1"),
    "client_reply_gate": ReplyGate,
    "client_watchdog": lambda out: Watchdog(out, 120_000),
    "client_camera": Camera,
    "client_resume": ResumeLink,
}
KWARGS: dict[str, Any] = {
    "muted": False,
    "audio_flowing": False,
    "reason": "x",
    "code": "c",
    "message": "m",
    "now_ms": 0,
    "audio": "",
    "audio_ms": 0.0,
    "played_ms": 0.0,
    "jpeg": "j",
    "jitter": 0.5,
    "why": "out_of_time",
    "response_id": "resp_1",
}


def _cases() -> list[tuple[Table, Any, str]]:
    return [
        (t, s, trig)
        for t in CLIENT_TABLES
        for s in t.states
        for trig in t.triggers()
        if not t.allowed(s, trig)
    ]


@pytest.mark.parametrize(
    ("table", "state", "trigger"), _cases(), ids=lambda v: getattr(v, "name", str(v))
)
def test_illegal_trigger_raises_and_changes_nothing(table: Table, state: Any, trigger: str) -> None:
    out = ClientOutbox()
    model = FACTORIES[table.name](out)
    model.state = state
    before = {k: copy.copy(getattr(model, k)) for k in type(model).__slots__ if k != "outbox"}
    with pytest.raises(InvalidTransition):
        model.fire(trigger, **KWARGS)
    assert {k: getattr(model, k) for k in before} == before
    assert out.items == []
