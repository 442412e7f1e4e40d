"""The offered load over time: when each session connects, which sessions are probes and
when they first speak, when heartbeats go, and the clock all of them read.

Sends are scheduled at absolute times (`start + k * step`), never after a sleep of their
own, so a session that falls behind catches up instead of drifting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clients.loadgen.options import BenchOptions

__all__ = ["HEARTBEAT_INTERVAL_S", "PROBE_FIRST_S", "Schedule", "now"]

HEARTBEAT_INTERVAL_S = 1.0
PROBE_FIRST_S = 1.0  # the first utterance, after the window opens (probes spread over 1 s)
#: heartbeat phases: sessions spread their heartbeats over the interval, not all at once
_HEARTBEAT_PHASES = 97


def now() -> float:
    """The clock of every schedule and measurement: `time.monotonic()` (uvloop's
    `loop.time()` only has millisecond resolution)."""
    return time.monotonic()


@dataclass(frozen=True, slots=True)
class Schedule:
    """When things happen in a run of `options` that started at `t0` (on `now()`)."""

    options: BenchOptions
    t0: float

    def connect_at(self, index: int) -> float:
        """When session `index` connects: the connects are spread evenly over `--ramp`."""
        return self.t0 + self.options.ramp_s * index / self.options.sessions

    def probe_sessions(self) -> set[int]:
        """The indices of the sessions that speak, spread evenly over all of them."""
        options = self.options
        count = options.probe_count
        return {round(i * options.sessions / count) for i in range(count)}

    def first_utterance_at(self, window_start: float, n: int) -> float:
        """When the `n`-th ready probe first speaks: the probes spread over one second,
        `PROBE_FIRST_S` after the window opened."""
        return window_start + PROBE_FIRST_S * (1 + n / max(1, self.options.probe_count))

    @staticmethod
    def first_heartbeat_at(index: int, start: float) -> float:
        """The first heartbeat of session `index`, which started streaming at `start`."""
        return start + HEARTBEAT_INTERVAL_S * (index % _HEARTBEAT_PHASES) / _HEARTBEAT_PHASES
