"""Spec tables, the server's and the client's, are well formed: reachable states,
terminal states without exits, rows that are not ambiguous, and guard/effect names that
exist on the machine models."""

from __future__ import annotations

import pytest

from core.statemachines.attachment import Attachment
from core.statemachines.client_camera import Camera
from core.statemachines.client_connection import Connection
from core.statemachines.client_hold import Hold
from core.statemachines.client_playback import ClientPlayback
from core.statemachines.client_reply_gate import ReplyGate
from core.statemachines.client_resume import ResumeLink
from core.statemachines.client_watchdog import Watchdog
from core.statemachines.commit import Commit
from core.statemachines.function_call import FunctionCall
from core.statemachines.input_buffer import InputBuffer
from core.statemachines.item import Item
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from core.statemachines.playback import Playback
from core.statemachines.response import Response
from core.statemachines.speculation import Speculation
from core.statemachines.turn_detector import TurnDetector
from spec.tables import TABLES, Table
from spec.tables.client_constants import CLIENT_TABLES

MODELS = {
    "item": Item,
    "input_buffer": InputBuffer,
    "commit": Commit,
    "turn_detector": TurnDetector,
    "response": Response,
    "playback": Playback,
    "attachment": Attachment,
    "speculation": Speculation,
    "function_call": FunctionCall,
    "output_audio_buffer": OutputAudioBuffer,
    "client_connection": Connection,
    "client_hold": Hold,
    "client_playback": ClientPlayback,
    "client_reply_gate": ReplyGate,
    "client_watchdog": Watchdog,
    "client_camera": Camera,
    "client_resume": ResumeLink,
}
ALL_TABLES = (*TABLES, *CLIENT_TABLES)


def _ids(table: Table) -> str:
    return table.name


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_every_state_is_reachable_from_the_initial_state(table: Table) -> None:
    seen = {table.initial}
    frontier = [table.initial]
    while frontier:
        state = frontier.pop()
        for row in table.transitions:
            if state in row.source and row.dest is not None and row.dest not in seen:
                seen.add(row.dest)
                frontier.append(row.dest)
    assert seen == set(table.states)


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_terminal_states_have_no_outgoing_transitions_except_internal_ones(table: Table) -> None:
    for row in table.transitions:
        for source in row.source:
            if source in table.terminal:
                assert row.dest is None, f"{row.trigger} leaves terminal {source}"


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_rows_are_not_ambiguous(table: Table) -> None:
    pairs = [(s, row.trigger) for row in table.transitions for s in row.source if not row.guard]
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_guard_and_effect_names_exist_on_the_model(table: Table) -> None:
    model = MODELS[table.name]
    for row in table.transitions:
        for name in (row.guard, row.effect):
            if name is not None:
                assert callable(getattr(model, name, None)), f"{model.__name__}.{name}"


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_invariants_have_ids_and_text(table: Table) -> None:
    for key, text in table.invariants.items():
        assert key and text


@pytest.mark.parametrize("table", ALL_TABLES, ids=_ids)
def test_state_groups_are_named_nonempty_sets_of_the_tables_own_states(table: Table) -> None:
    for name, members in table.groups.items():
        assert name and members
        assert members <= set(table.states), f"{table.name}.{name}"


def test_every_table_has_a_model() -> None:
    assert {t.name for t in ALL_TABLES} == set(MODELS)


def test_table_helpers() -> None:
    table = TABLES[0]
    assert table.triggers()[0] == table.transitions[0].trigger
    assert table.allowed(table.initial, table.transitions[0].trigger)
    assert not table.allowed(table.initial, "no-such-trigger")
