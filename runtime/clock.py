"""A monotonic millisecond clock, injectable for tests."""

from __future__ import annotations

import anyio

__all__ = ["Clock", "MonotonicClock"]


class Clock:
    """Milliseconds since the clock started."""

    def now_ms(self) -> int:
        raise NotImplementedError


class MonotonicClock(Clock):
    __slots__ = ("_origin",)

    def __init__(self) -> None:
        self._origin = anyio.current_time()

    def now_ms(self) -> int:
        return int((anyio.current_time() - self._origin) * 1000)
