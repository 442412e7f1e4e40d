"""The replicas of one stage: least-outstanding balancing, ejection, re-admission.

`ReplicaPool` is plain state with no I/O, so its rules can be checked exhaustively
(tests/backends/test_remote_pool.py runs hypothesis over up/down sequences):

- `acquire()` picks, among the replicas in rotation and not excluded, one with the
  fewest requests outstanding (ties go round-robin), and counts the request on it; with
  none left it raises `BackendUnavailable`. An ejected replica is never picked.
- `eject(replica)` takes a replica out of rotation (a refused connection, a 5xx, a
  connection lost mid-response); only `readmit()` brings it back, after its health
  endpoint answered 200 (the prober in `client.py`).
- When the last replica in rotation is ejected the stage is out of service: the
  listeners hear `(False, reason)` once; when one is readmitted they hear `(True, "")`.
  The backend turns that into `Backend.evict()` / `Backend.restore()`, so `/readyz`
  and admission behave exactly as for an in-process engine that died, and recover.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backends.base import BackendUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = ["Replica", "ReplicaPool"]

log = logging.getLogger("joyduplex.backends.remote")


@dataclass(eq=False, slots=True)
class Replica:
    """One server of a stage."""

    index: int
    url: str
    outstanding: int = 0
    healthy: bool = True
    reason: str = ""  # why it was ejected
    served: int = 0  # requests started on it

    def __repr__(self) -> str:
        state = "up" if self.healthy else f"ejected ({self.reason})"
        return f"Replica({self.url}, {state}, outstanding={self.outstanding})"


class ReplicaPool:
    """Balancing and health state of one stage's replicas (no I/O)."""

    def __init__(self, stage: str, urls: Collection[str]) -> None:
        if not urls:
            raise ValueError(f"{stage}: a pool needs at least one replica")
        self.stage = stage
        self.replicas = [Replica(i, url) for i, url in enumerate(urls)]
        self._cursor = 0
        self._listeners: list[Callable[[bool, str], None]] = []

    def on_change(self, listener: Callable[[bool, str], None]) -> None:
        """`listener(in_service, reason)` on every flip of the stage's service state."""
        self._listeners.append(listener)

    @property
    def in_service(self) -> bool:
        return any(r.healthy for r in self.replicas)

    @property
    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    @property
    def ejected(self) -> list[Replica]:
        return [r for r in self.replicas if not r.healthy]

    def reason(self) -> str:
        """Why the stage is out of service (every replica's last failure)."""
        return "no healthy replica: " + "; ".join(
            f"{r.url}: {r.reason or 'down'}" for r in self.replicas
        )

    def acquire(self, exclude: Collection[Replica] = ()) -> Replica:
        """The least-loaded replica in rotation (not in `exclude`), its count raised.

        Raises:
            BackendUnavailable: no replica in rotation outside `exclude`.
        """
        candidates = [r for r in self.replicas if r.healthy and r not in exclude]
        if not candidates:
            if not self.in_service:
                raise BackendUnavailable(f"{self.stage}: {self.reason()}", stage=self.stage)
            raise BackendUnavailable(
                f"{self.stage}: every healthy replica already failed this request",
                stage=self.stage,
            )
        n = len(self.replicas)
        least = min(r.outstanding for r in candidates)
        # round-robin among the least loaded, starting after the last one picked
        chosen = min(
            (r for r in candidates if r.outstanding == least),
            key=lambda r: (r.index - self._cursor) % n,
        )
        self._cursor = (chosen.index + 1) % n
        chosen.outstanding += 1
        chosen.served += 1
        return chosen

    def release(self, replica: Replica) -> None:
        """The request counted by `acquire()` on `replica` ended (however it ended)."""
        if replica.outstanding <= 0:  # pragma: no cover - guarded by construction
            raise AssertionError(f"{replica!r} released more often than acquired")
        replica.outstanding -= 1

    def eject(self, replica: Replica, reason: str) -> None:
        """Take `replica` out of rotation until `readmit()` (idempotent)."""
        if not replica.healthy:
            return
        replica.healthy = False
        replica.reason = reason
        log.warning("%s replica %s ejected: %s", self.stage, replica.url, reason)
        if not self.in_service:
            why = self.reason()
            log.error("%s: out of service, %s", self.stage, why)
            for listener in self._listeners:
                listener(False, why)

    def readmit(self, replica: Replica) -> None:
        """Its health endpoint answered: back in rotation (idempotent)."""
        if replica.healthy:
            return
        was_in_service = self.in_service
        replica.healthy = True
        replica.reason = ""
        log.info("%s replica %s is healthy again", self.stage, replica.url)
        if not was_in_service:
            for listener in self._listeners:
                listener(True, "")
