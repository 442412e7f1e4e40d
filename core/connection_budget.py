"""One connection's budget of client frames: events per second and bytes per second, as
token buckets, and the close of a connection that keeps sending over them (B25, D38).
Sans-IO: the transport calls `refusal(frame_bytes, now_s)` for every frame as it arrives,
before decoding it, with the time from its own clock.

A bucket holds up to `burst` tokens and refills at `rate` a second; a frame costs one
event token and one byte token per byte (a text frame's characters, as `max_event_bytes`
counts them). A frame is admitted when both buckets hold its cost, or are full (a frame
larger than a burst is admitted only from a full bucket, which it then leaves in debt,
paid back at the rate); its cost is taken from both. A frame that is not admitted takes
nothing: it is refused with `rate_limit_exceeded` and not decoded, and counted; once
`max_refusals` refusals fall within `refusal_window_s`, `abusive` is set and the transport
closes the connection (1008 "rate limit").

Invariants: a bucket never holds more than its burst; a rate of 0 disables its bucket
(every frame passes it) and `max_refusals` 0 disables the close; the refusal times kept
are at most `max_refusals`, so the state of a connection is bounded whatever it sends.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from spec.errors import ErrorCode, RemoteProtocolError

if TYPE_CHECKING:
    from spec.limits import Limits

__all__ = ["ConnectionBudget", "TokenBucket"]


class TokenBucket:
    """`rate` tokens a second, at most `burst` held; full at the start. Rate 0: unlimited."""

    __slots__ = ("_at_s", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now_s: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self._at_s = now_s

    def holds(self, cost: float, now_s: float) -> bool:
        """Refill up to `now_s`; whether a frame of `cost` may pass (see the module
        docstring: it is held, or the bucket is full)."""
        if self.rate <= 0:
            return True
        if now_s > self._at_s:  # a clock that stepped back refills nothing
            self.tokens = min(self.burst, self.tokens + (now_s - self._at_s) * self.rate)
            self._at_s = now_s
        return self.tokens >= min(cost, self.burst)

    def take(self, cost: float) -> None:
        if self.rate > 0:
            self.tokens -= cost


class ConnectionBudget:
    """The events and bytes one connection may send; see the module docstring."""

    __slots__ = ("_refusals", "abusive", "bytes", "events", "max_refusals", "refusal_window_s")

    def __init__(
        self,
        *,
        now_s: float,
        max_events_per_s: float,
        event_burst: int,
        max_bytes_per_s: float,
        byte_burst: int,
        max_refusals: int,
        refusal_window_s: float,
    ) -> None:
        self.events = TokenBucket(max_events_per_s, event_burst, now_s)
        self.bytes = TokenBucket(max_bytes_per_s, byte_burst, now_s)
        self.max_refusals = max_refusals
        self.refusal_window_s = refusal_window_s
        self._refusals: deque[float] = deque(maxlen=max(max_refusals, 1))
        #: refused `max_refusals` times within the window: the connection is to be closed
        self.abusive = False

    @classmethod
    def from_limits(cls, limits: Limits, now_s: float) -> ConnectionBudget:
        return cls(
            now_s=now_s,
            max_events_per_s=limits.max_events_per_s,
            event_burst=limits.event_burst,
            max_bytes_per_s=limits.max_bytes_per_s,
            byte_burst=limits.byte_burst,
            max_refusals=limits.max_rate_refusals,
            refusal_window_s=limits.rate_refusal_window_s,
        )

    @property
    def enabled(self) -> bool:
        """Whether any bucket limits anything (a disabled budget need not be consulted)."""
        return self.events.rate > 0 or self.bytes.rate > 0

    def refusal(self, frame_bytes: int, now_s: float) -> RemoteProtocolError | None:
        """Charge one frame of `frame_bytes` arriving at `now_s`: None when it may be
        decoded, else the `rate_limit_exceeded` refusal (nothing charged)."""
        events_ok = self.events.holds(1, now_s)
        bytes_ok = self.bytes.holds(frame_bytes, now_s)
        if events_ok and bytes_ok:
            self.events.take(1)
            self.bytes.take(frame_bytes)
            return None
        self._refused(now_s)
        if not events_ok:
            what = f"more than {self.events.rate:g} events a second (burst {self.events.burst:g})"
        else:
            what = (
                f"more than {self.bytes.rate:g} bytes a second (burst {self.bytes.burst:g}; "
                f"this frame: {frame_bytes} bytes)"
            )
        return RemoteProtocolError(
            f"this connection sent {what}; the event was not processed, send less",
            code=ErrorCode.RATE_LIMIT_EXCEEDED,
        )

    def _refused(self, now_s: float) -> None:
        if self.max_refusals <= 0:
            return
        times = self._refusals
        times.append(now_s)
        if len(times) == self.max_refusals and now_s - times[0] <= self.refusal_window_s:
            self.abusive = True
