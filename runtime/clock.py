"""A monotonic millisecond clock, injectable for tests, and the event loop's clock bound
once for the hot path."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Clock", "MonotonicClock", "loop_clock"]


def loop_clock() -> Callable[[], float]:
    """The running event loop's clock (what `anyio.current_time()` reads), bound once.

    Why: `anyio.current_time()` looks up the async backend on every call, and asyncio's
    running-loop lookup makes a getpid system call; a listening session reads the clock
    several times per append (measured: about 2% of a loaded server's CPU)."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # another async backend: anyio knows its clock
        return anyio.current_time


class Clock:
    """Milliseconds since the clock started."""

    def now_ms(self) -> int:
        raise NotImplementedError


class MonotonicClock(Clock):
    __slots__ = ("_origin", "_time")

    def __init__(self) -> None:
        self._time = loop_clock()
        self._origin = self._time()

    def now_ms(self) -> int:
        return int((self._time() - self._origin) * 1000)
