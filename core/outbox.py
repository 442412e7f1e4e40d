"""The session outbox: server events and effects in emission order, plus id allocation.

Every machine model holds the session's one `Outbox`; effect callbacks only `emit` into
it. The outbox stamps each server event with the next event id and, for duplex events,
the current epoch, so a fenced (older-epoch) event can never be minted late.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spec.effects import Effect
    from spec.events import ServerEvent

__all__ = ["Outbox"]


class Outbox:
    __slots__ = ("_counters", "_event_prefix", "closed", "epoch", "items")

    def __init__(self, event_prefix: str = "event") -> None:
        """`event_prefix`: of the event ids it stamps (a call's own events use another,
        so its ids never collide with its session's on the same channel)."""
        self._event_prefix = event_prefix
        self.items: list[ServerEvent | Effect] = []
        self.epoch = 0
        self.closed = False
        self._counters: dict[str, int] = {}

    def next_id(self, prefix: str) -> str:
        """`event_1`, `item_1`, `resp_1`, ...: one counter per prefix."""
        n = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = n
        return f"{prefix}_{n}"

    def emit(self, event: ServerEvent) -> None:
        if self.closed:
            return  # I9: nothing after session.closed
        event.event_id = self.next_id(self._event_prefix)
        if hasattr(event, "epoch"):
            event.epoch = self.epoch
        self.items.append(event)

    def effect(self, effect: Effect) -> None:
        if not self.closed:
            self.items.append(effect)

    def drain(self) -> list[ServerEvent | Effect]:
        out, self.items = self.items, []
        return out
