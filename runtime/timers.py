"""`Timers`: one deadline heap and one task for every session of a process.

A session's deadlines (idle timeout, playback drain) move on almost every client event,
and a task per session that re-arms a cancel scope on each of them cost more than the
events themselves once hundreds of sessions listen. Here a session schedules a deadline
only when it is earlier than the one it already holds; the entry that fires early (the
idle deadline moved later meanwhile) is answered by the owner re-reading its protocol and
scheduling again. Stale entries (an owner that rescheduled earlier, or ended) are skipped
when they come up, so the heap holds at most a few entries per session.

Times are the event loop's clock (`anyio.current_time()`, seconds), so sessions whose
protocol clocks have different origins share one heap.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import TYPE_CHECKING, Protocol

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

    from runtime.clock import Clock

__all__ = ["SessionDeadline", "TimerHandle", "TimerOwner", "Timers"]

log = logging.getLogger("joyduplex.runtime")


class TimerOwner(Protocol):
    def timer_fired(self, at: float) -> None:
        """The deadline scheduled for `at` is due (it may be stale: check)."""
        ...


class TimerHandle:
    """One scheduled deadline; `cancel()` drops the owner, so a stale entry left in the
    heap until its time never keeps an ended session alive."""

    __slots__ = ("owner",)

    def __init__(self, owner: TimerOwner) -> None:
        self.owner: TimerOwner | None = owner

    def cancel(self) -> None:
        self.owner = None


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._wake = anyio.Event()
        self.running = False
        self.fired = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, owner: TimerOwner, at: float) -> TimerHandle:
        """Call `owner.timer_fired(at)` once the loop clock reaches `at`, unless the
        returned handle is cancelled first."""
        earliest = self._heap[0][0] if self._heap else None
        handle = TimerHandle(owner)
        heapq.heappush(self._heap, (at, next(self._seq), handle))
        if earliest is None or at < earliest:
            self._wake.set()
        return handle

    async def run(self) -> None:
        """Until cancelled: fire each deadline when it is due."""
        self.running = True
        try:
            while True:
                if not self._heap:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    continue
                at, _, handle = self._heap[0]
                delay = at - anyio.current_time()
                if delay > 0:
                    with anyio.move_on_after(delay):
                        await self._wake.wait()
                    if self._wake.is_set():
                        self._wake = anyio.Event()
                    continue
                heapq.heappop(self._heap)
                owner = handle.owner
                if owner is None:
                    continue  # cancelled
                self.fired += 1
                try:
                    owner.timer_fired(at)
                except Exception:  # one session's bug must not stop every session's timers
                    log.exception("a session's timer failed")
        finally:
            self.running = False


class SessionDeadline:
    """One session's next protocol deadline (session clock, ms) on the process's
    `Timers` (loop clock, s): scheduled only when it is earlier than the one held, so the
    common case, an append that moves the idle deadline later, costs no clock read; the
    held one fires, and the owner re-reads its protocol."""

    __slots__ = ("_at", "_clock", "_deadline", "_handle", "_loop_time")

    def __init__(self, loop_time: Callable[[], float], clock: Clock) -> None:
        self._loop_time = loop_time
        self._clock = clock
        self._at: float | None = None  # loop time of the deadline scheduled
        self._deadline: int | None = None  # the same deadline on the session clock
        self._handle: TimerHandle | None = None

    def schedule(self, owner: TimerOwner, timers: Timers, deadline: int | None) -> None:
        if deadline is None:
            return
        held = self._deadline
        if held is not None and deadline >= held:
            # the session clock runs on the loop's clock, so the held timer comes first
            return
        at = self._loop_time() + max(0, deadline - self._clock.now_ms()) / 1000
        if self._at is None or at < self._at:
            if self._handle is not None:
                self._handle.cancel()
            self._at, self._deadline = at, deadline
            self._handle = timers.schedule(owner, at)

    def due(self, at: float) -> bool:
        """Whether `at` is the deadline held (not one rescheduled earlier since); it is
        then no longer held."""
        if at != self._at:
            return False
        self._at = self._deadline = None
        return True

    def cancel(self) -> None:
        """The session ended: the heap must not keep it alive."""
        if self._handle is not None:
            self._handle.cancel()
