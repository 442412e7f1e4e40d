"""Builds one shared `transitions.Machine` per table and drives it through `fire()`.

House rules (docs/architecture.md section 4, rules 3 and 4): one module-level rulebook per
machine kind, `model=None, auto_transitions=False, send_event=True, queued=False`; models are
small `__slots__` objects that are never `add_model`-ed; callbacks only append to an outbox
and never trigger; `fire()` is the only caller of transitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from transitions import Machine, MachineError

from core.errors import InvalidTransition

if TYPE_CHECKING:
    import enum

    from spec.tables import Table

__all__ = ["Rulebook", "StatefulModel", "build", "fire"]


class StatefulModel(Protocol):
    state: Any


class Rulebook:
    """A table and the machine built from it."""

    __slots__ = ("_firing", "machine", "table")

    def __init__(self, table: Table) -> None:
        self.table = table
        self.machine = Machine(
            model=None,
            states=table.states,
            initial=None,
            transitions=[
                {
                    "trigger": t.trigger,
                    "source": list(t.source),
                    "dest": t.dest,
                    **({"conditions": t.guard} if t.guard else {}),
                    **({"after": t.effect} if t.effect else {}),
                }
                for t in table.transitions
            ],
            auto_transitions=False,
            send_event=True,
            queued=False,
            ignore_invalid_triggers=False,
        )
        self._firing = False


def build(table: Table) -> Rulebook:
    return Rulebook(table)


def fire(rules: Rulebook, model: StatefulModel, trigger: str, **kwargs: Any) -> None:
    """Fire `trigger` on `model`.

    Raises:
        InvalidTransition: the table has no row for (state, trigger), or its guard failed.
            The model's state and outbox are unchanged (guards run before any effect).
    """
    if rules._firing:
        raise RuntimeError(f"re-entrant trigger `{trigger}` on {rules.table.name}")
    state: enum.Enum = model.state
    event = rules.machine.events.get(trigger)
    if event is None:
        raise InvalidTransition(rules.table.name, trigger, state.value)
    rules._firing = True
    try:
        ok = event.trigger(model, **kwargs)
    except MachineError:
        raise InvalidTransition(rules.table.name, trigger, state.value) from None
    finally:
        rules._firing = False
    if not ok:
        guards = [t.guard for t in rules.table.transitions if t.trigger == trigger and t.guard]
        raise InvalidTransition(rules.table.name, trigger, state.value, guard=guards[0])
