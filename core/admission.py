"""Session admission: at most `max_sessions` sessions at once (B25), answered with
`resource_exhausted` (and close 1013 by the transport) when full. Sans-IO: the runtime
calls `admit` on connect and `release` on every terminal path.

A server of several worker processes splits the limit: each worker admits at most
`worker_share(max_sessions, workers)` sessions, the ceiling of an even share (the kernel
spreads connections between the workers, so a worker that is full refuses even when
another still has room).

`OverloadGate` sheds load at admission instead of sharing it: while the process is
measurably overloaded (its event loop wakes late, or audio waits too long for its VAD
verdict), new sessions are refused with `resource_exhausted` (close 1013) and the admitted
ones keep their latency. Hysteresis: the gate closes above the limit and opens again only
below half of it, so it does not flap at the edge."""

from __future__ import annotations

from spec.errors import ErrorCode, RemoteProtocolError

__all__ = ["OverloadGate", "SessionSlots", "worker_share"]


class SessionSlots:
    __slots__ = ("_held", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._held: set[str] = set()

    @property
    def in_use(self) -> int:
        return len(self._held)

    def admit(self, session_id: str) -> None:
        """Take a slot.

        Raises:
            RemoteProtocolError: `resource_exhausted` when every slot is taken.
        """
        if session_id in self._held:
            return
        if len(self._held) >= self.capacity:
            raise RemoteProtocolError(
                f"the server is at its limit of {self.capacity} sessions; retry later",
                code=ErrorCode.RESOURCE_EXHAUSTED,
            )
        self._held.add(session_id)

    def release(self, session_id: str) -> None:
        """Give a slot back; releasing twice is harmless."""
        self._held.discard(session_id)


def worker_share(max_sessions: int, workers: int) -> int:
    """Sessions one of `workers` worker processes admits: ceil(max_sessions / workers)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    return -(-max_sessions // workers)


class OverloadGate:
    """Overload from measurements the runtime feeds in (sans-IO: no clock of its own).

    `observe(loop_lag_ms, vad_wait_ms)` takes one measurement period; a signal counts as
    over its limit when it exceeds it in `periods` consecutive observations (one late
    wake-up from a garbage collection does not shed anyone)."""

    __slots__ = ("_over", "closed", "loop_lag_limit_ms", "periods", "reason", "vad_limit_ms")

    def __init__(self, *, loop_lag_limit_ms: float, vad_limit_ms: float, periods: int = 4) -> None:
        self.loop_lag_limit_ms = loop_lag_limit_ms
        self.vad_limit_ms = vad_limit_ms
        self.periods = periods
        self._over = 0
        self.closed = False
        self.reason = ""

    def observe(self, loop_lag_ms: float, vad_wait_ms: float) -> None:
        if self.loop_lag_limit_ms <= 0:  # shedding switched off
            return
        over = loop_lag_ms > self.loop_lag_limit_ms or vad_wait_ms > self.vad_limit_ms
        under = loop_lag_ms <= self.loop_lag_limit_ms / 2 and vad_wait_ms <= self.vad_limit_ms / 2
        self._over = self._over + 1 if over else 0
        if self._over >= self.periods and not self.closed:
            self.closed = True
            self.reason = (
                f"event loop {loop_lag_ms:.0f} ms late (limit {self.loop_lag_limit_ms:g} ms), "
                f"VAD verdicts {vad_wait_ms:.0f} ms late (limit {self.vad_limit_ms:g} ms)"
            )
        elif self.closed and under:
            self.closed = False
            self.reason = ""

    def refusal(self) -> RemoteProtocolError | None:
        if not self.closed:
            return None
        return RemoteProtocolError(
            f"the server is overloaded ({self.reason}); retry later",
            code=ErrorCode.RESOURCE_EXHAUSTED,
        )
