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
below half of it, so it does not flap at the edge.

Lag and VAD wait show overload only once it is there: a burst of connections (a hundred a
second) is all admitted in the second before the lag builds up, and the load overshoots
(seen: 574 sessions admitted where about 450 fit, heartbeat p99 1.3 s). So the gate also
predicts: from the share of the last period the event-loop thread spent on the CPU and the
sessions that shared it, it knows what one session costs, and it refuses a session when the
load measured plus the sessions admitted since (not yet measured) would pass
`loop_busy_limit`. Capacity is thus measured on the machine itself, per process, and
follows what the sessions really do (listening, speaking, idle)."""

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


#: below this many sessions the per-session cost is not estimated: the loop's own fixed
#: work (the VAD tick, the watcher) would be charged to too few sessions
MIN_COSTED_SESSIONS = 8


class OverloadGate:
    """Overload from measurements the runtime feeds in (sans-IO: no clock of its own).

    `observe(loop_lag_ms, vad_wait_ms, loop_busy=, sessions=)` takes one measurement
    period; a lag or VAD signal counts as over its limit when it exceeds it in `periods`
    consecutive observations (one late wake-up from a garbage collection does not shed
    anyone). `admitted()` is called for every session admitted; `refusal()` answers a
    new connection."""

    __slots__ = (
        "_busy",
        "_cost",
        "_over",
        "_unmeasured",
        "closed",
        "loop_busy_limit",
        "loop_lag_limit_ms",
        "periods",
        "reason",
        "vad_limit_ms",
    )

    def __init__(
        self,
        *,
        loop_lag_limit_ms: float,
        vad_limit_ms: float,
        loop_busy_limit: float = 0.0,
        periods: int = 4,
    ) -> None:
        self.loop_lag_limit_ms = loop_lag_limit_ms
        self.vad_limit_ms = vad_limit_ms
        self.loop_busy_limit = loop_busy_limit
        self.periods = periods
        self._over = 0
        self.closed = False
        self.reason = ""
        self._busy = 0.0  # the loop thread's CPU share in the last period
        self._cost: float | None = None  # of one session, in loop CPU share
        #: sessions admitted in this period and the one before: the last measurement
        #: shows their cost in part or not at all
        self._unmeasured = [0, 0]

    def observe(
        self,
        loop_lag_ms: float,
        vad_wait_ms: float,
        *,
        loop_busy: float | None = None,
        sessions: int = 0,
    ) -> None:
        """One measurement period: how late the loop woke, the longest VAD wait, and
        (optional) the share of the period the event-loop thread ran on the CPU with
        `sessions` open."""
        if self.loop_lag_limit_ms <= 0:  # shedding switched off
            return
        if loop_busy is not None:
            self._busy = loop_busy
            if sessions >= MIN_COSTED_SESSIONS:
                cost = loop_busy / sessions
                # smoothed: one period's CPU share is noisy (a garbage collection, a burst
                # of handshakes); the higher estimate wins at once (shed early, not late)
                self._cost = (
                    cost
                    if self._cost is None or cost > self._cost
                    else (0.75 * self._cost + 0.25 * cost)
                )
            self._unmeasured = [0, self._unmeasured[0]]
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

    def admitted(self) -> None:
        """A session was admitted: its cost counts as predicted until it is measured."""
        self._unmeasured[0] += 1

    def predicted_busy(self) -> float:
        """The loop's CPU share measured last, plus the cost of the sessions admitted
        since (0 cost before any estimate)."""
        return self._busy + (self._cost or 0.0) * sum(self._unmeasured)

    def refusal(self) -> RemoteProtocolError | None:
        if self.closed:
            return RemoteProtocolError(
                f"the server is overloaded ({self.reason}); retry later",
                code=ErrorCode.RESOURCE_EXHAUSTED,
            )
        if self.loop_lag_limit_ms <= 0 or self.loop_busy_limit <= 0 or self._cost is None:
            return None
        predicted = self.predicted_busy() + self._cost  # with the one asking
        if predicted <= self.loop_busy_limit:
            return None
        return RemoteProtocolError(
            f"the server is at its measured capacity (event loop {self._busy:.0%} busy, "
            f"{sum(self._unmeasured)} sessions admitted since, {self._cost * 1000:.2f} ms "
            f"of loop CPU per second per session; limit {self.loop_busy_limit:.0%}); "
            "retry later",
            code=ErrorCode.RESOURCE_EXHAUSTED,
        )
