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
predicts, for the two resources a listening session uses: the event-loop thread's CPU share
and the VAD's share of wall time spent scoring. From each one's measured share in the last
period and the sessions that shared it, it knows what one session costs, and it refuses a
session when the share measured plus the sessions admitted since (not yet measured) would
pass that resource's limit. Capacity is thus measured on the machine itself, per process, and
follows what the sessions really do (listening, speaking, idle)."""

from __future__ import annotations

from collections import deque

from spec.errors import ErrorCode, RemoteProtocolError

__all__ = ["MeasuredShare", "OverloadGate", "SessionSlots", "worker_share"]


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


#: below this many sessions the per-session cost is not estimated: the fixed work of a
#: process (the VAD tick, the watcher) would be charged to too few sessions
MIN_COSTED_SESSIONS = 8


class MeasuredShare:
    """How busy one resource of the process is (a share of wall time, 0..1 and more), what
    one session costs of it, and what the sessions admitted since its last measurement
    will add: the capacity prediction for that resource."""

    __slots__ = ("_recent", "cost", "limit", "name", "unmeasured")

    def __init__(self, name: str, limit: float, *, window: int = 4) -> None:
        self.name = name
        self.limit = limit  # 0: not predicted
        #: the shares of the last `window` periods: one quarter-second share is noisy (a
        #: batch that ended just after the period), and a burst must not slip through the
        #: one low sample; `busy` is the highest of them
        self._recent: deque[float] = deque(maxlen=window)
        self.cost: float | None = None  # of one session
        #: sessions admitted in this period and the one before: the last measurement
        #: shows their cost in part or not at all
        self.unmeasured = [0, 0]

    @property
    def busy(self) -> float:
        """The highest share measured in the recent periods (0 before any)."""
        return max(self._recent, default=0.0)

    def measure(self, busy: float, sessions: int) -> None:
        self._recent.append(busy)
        if sessions >= MIN_COSTED_SESSIONS:
            cost = busy / sessions
            # smoothed: one period's share is noisy (a garbage collection, a burst of
            # handshakes); `busy` is already the cautious figure
            self.cost = cost if self.cost is None else 0.5 * self.cost + 0.5 * cost
        self.unmeasured = [0, self.unmeasured[0]]

    def predicted(self, extra: int = 0) -> float:
        """The share measured last plus the cost of the sessions admitted since and of
        `extra` more (no cost before an estimate)."""
        return self.busy + (self.cost or 0.0) * (sum(self.unmeasured) + extra)

    def full(self) -> bool:
        """One more session would pass the limit."""
        return self.limit > 0 and self.cost is not None and self.predicted(1) > self.limit

    def describe(self) -> str:
        cost = self.cost or 0.0
        return (
            f"{self.name} {self.busy:.0%} busy, {sum(self.unmeasured)} sessions admitted "
            f"since, {cost:.2%} per session; limit {self.limit:.0%}"
        )


class OverloadGate:
    """Overload from measurements the runtime feeds in (sans-IO: no clock of its own).

    `observe(loop_lag_ms, vad_wait_ms, loop_busy=, vad_busy=, sessions=)` takes one
    measurement period; a lag or VAD signal counts as over its limit when it exceeds it
    in `periods` consecutive observations (one late wake-up from a garbage collection
    does not shed anyone). `admitted()` is called for every session admitted;
    `refusal()` answers a new connection."""

    __slots__ = (
        "_over",
        "closed",
        "loop",
        "loop_lag_limit_ms",
        "periods",
        "reason",
        "vad",
        "vad_limit_ms",
    )

    def __init__(
        self,
        *,
        loop_lag_limit_ms: float,
        vad_limit_ms: float,
        loop_busy_limit: float = 0.0,
        vad_busy_limit: float = 0.0,
        periods: int = 4,
    ) -> None:
        self.loop_lag_limit_ms = loop_lag_limit_ms
        self.vad_limit_ms = vad_limit_ms
        self.periods = periods
        self._over = 0
        self.closed = False
        self.reason = ""
        #: the event-loop thread's CPU share, and the VAD's share of wall time scoring
        self.loop = MeasuredShare("event loop", loop_busy_limit)
        self.vad = MeasuredShare("VAD", vad_busy_limit)

    def observe(
        self,
        loop_lag_ms: float,
        vad_wait_ms: float,
        *,
        loop_busy: float | None = None,
        vad_busy: float | None = None,
        sessions: int = 0,
    ) -> None:
        """One measurement period: how late the loop woke, the longest VAD wait, and
        (optional) the share of the period the event-loop thread ran on the CPU and the
        VAD spent scoring, with `sessions` open."""
        if self.loop_lag_limit_ms <= 0:  # shedding switched off
            return
        if loop_busy is not None:
            self.loop.measure(loop_busy, sessions)
        if vad_busy is not None:
            self.vad.measure(vad_busy, sessions)
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
        self.loop.unmeasured[0] += 1
        self.vad.unmeasured[0] += 1

    def refusal(self) -> RemoteProtocolError | None:
        if self.closed:
            return RemoteProtocolError(
                f"the server is overloaded ({self.reason}); retry later",
                code=ErrorCode.RESOURCE_EXHAUSTED,
            )
        if self.loop_lag_limit_ms <= 0:
            return None
        full = [share for share in (self.loop, self.vad) if share.full()]
        if not full:
            return None
        return RemoteProtocolError(
            "the server is at its measured capacity ("
            + "; ".join(share.describe() for share in full)
            + "); retry later",
            code=ErrorCode.RESOURCE_EXHAUSTED,
        )
