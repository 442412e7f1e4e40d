"""The table record types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import enum

__all__ = ["T", "Table"]


@dataclass(frozen=True, slots=True)
class T:
    """One transition row. `dest=None` is an internal transition (state unchanged).

    `behaviours` names the behaviour ids (`"B11"`) the row serves; `spec/behaviours.py`
    lists the same rows under those ids, and a test keeps the two in agreement.
    """

    trigger: str
    source: tuple[enum.Enum, ...]
    dest: enum.Enum | None
    guard: str | None = None
    effect: str | None = None
    behaviours: tuple[str, ...] = ()

    def __init__(
        self,
        trigger: str,
        source: enum.Enum | tuple[enum.Enum, ...],
        dest: enum.Enum | None,
        guard: str | None = None,
        effect: str | None = None,
        *,
        behaviours: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "trigger", trigger)
        object.__setattr__(self, "source", source if isinstance(source, tuple) else (source,))
        object.__setattr__(self, "dest", dest)
        object.__setattr__(self, "guard", guard)
        object.__setattr__(self, "effect", effect)
        object.__setattr__(self, "behaviours", behaviours)


@dataclass(frozen=True, slots=True)
class Table:
    """A machine kind: what it models, its states, rows and invariants.

    `groups` names sets of states that code outside the machine tests membership of
    (`live`: the button is down); they are exported with the table (web/spec/*.json), so
    the Python and the browser client read the same sets instead of re-listing them.
    """

    name: str
    doc: str
    states: type[enum.Enum]
    initial: enum.Enum
    terminal: frozenset[enum.Enum]
    transitions: tuple[T, ...]
    invariants: dict[str, str] = field(default_factory=dict)
    groups: dict[str, frozenset[enum.Enum]] = field(default_factory=dict)

    def triggers(self) -> list[str]:
        """Every trigger name, in first-use order."""
        return list(dict.fromkeys(t.trigger for t in self.transitions))

    def allowed(self, state: enum.Enum, trigger: str) -> bool:
        return any(t.trigger == trigger and state in t.source for t in self.transitions)
