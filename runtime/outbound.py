"""The bounded outbound queue of one session.

A slow client must not grow server memory. When `max_events` are queued, a new audio
delta evicts the oldest queued audio delta (dropping audio is correct, delaying it is not)
and a counter says so; control events are never dropped. Control events beyond
`4 * max_events`, or a queue that stays full longer than `slow_after_s`, mean the client
stopped reading: `OutboundOverflow`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

from spec.events import ResponseOutputAudioDelta, ResponseOutputAudioTranscriptDelta

if TYPE_CHECKING:
    from spec.effects import CloseSession
    from spec.events import ServerEvent

__all__ = ["OutboundOverflow", "OutboundQueue"]

_DROPPABLE = (ResponseOutputAudioDelta, ResponseOutputAudioTranscriptDelta)


class OutboundOverflow(Exception):
    """The client stopped reading: too many control events are waiting."""


class OutboundQueue:
    def __init__(self, max_events: int, *, slow_after_s: float = 0.0) -> None:
        self.max_events = max_events
        self.slow_after_s = slow_after_s  # 0: a full queue alone never overflows
        self._items: deque[ServerEvent | CloseSession] = deque()
        self._ready = anyio.Event()
        self._full_since: float | None = None  # loop time the queue last became full
        self.dropped_audio_deltas = 0
        self.high_water = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: ServerEvent | CloseSession, now: Callable[[], float]) -> None:
        """Queue one item; `now`: the loop clock, read only while the queue is full.

        Raises:
            OutboundOverflow: the client stopped reading (the item is queued or dropped).
        """
        self._put(item)
        if len(self._items) < self.max_events:
            self._full_since = None
        elif self._full_since is None:
            self._full_since = now()
        elif self.slow_after_s and now() - self._full_since > self.slow_after_s:
            raise OutboundOverflow(f"its outbound queue stayed full {self.slow_after_s:g} s")

    def _put(self, item: ServerEvent | CloseSession) -> None:
        items = self._items
        if len(items) >= self.max_events:
            if isinstance(item, _DROPPABLE):
                victim = next((i for i in items if isinstance(i, type(item))), None)
                if victim is None:
                    self.dropped_audio_deltas += isinstance(item, ResponseOutputAudioDelta)
                    return
                items.remove(victim)
                self.dropped_audio_deltas += isinstance(victim, ResponseOutputAudioDelta)
            elif len(items) >= 4 * self.max_events:
                raise OutboundOverflow("too many control events are waiting")
        items.append(item)
        self.high_water = max(self.high_water, len(items))
        self._ready.set()

    def clear(self) -> None:
        """Forget every queued event (a resumable session that lost its connection: they
        wait in its resume journal instead)."""
        self._items.clear()
        self._full_since = None

    async def get(self) -> ServerEvent | CloseSession:
        while not self._items:
            self._ready = anyio.Event()
            await self._ready.wait()
        return self._items.popleft()
