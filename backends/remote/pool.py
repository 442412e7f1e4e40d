"""The replicas of one stage: least-outstanding balancing, ejection, re-admission.

`ReplicaPool` is plain state with no I/O, so its rules can be checked exhaustively
(tests/backends/test_remote_units.py runs hypothesis over up/down sequences):

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
- Session affinity (an option; the VLM stage turns it on): `acquire(session=...)`
  prefers the replica that served the session's previous request, while it is in
  rotation, not excluded, and has at most `affinity_slack` requests outstanding more than
  the least-loaded candidate; otherwise the usual pick, which becomes the session's
  replica. Each turn's prompt extends the previous one, and vLLM's prefix cache holds it
  only on the replica that computed it. At most `affinity_sessions` sessions are
  remembered (least recently used forgotten first).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backends.base import BackendUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = ["AFFINITY_SESSIONS", "Replica", "ReplicaPool"]

log = logging.getLogger("joyduplex.backends.remote")

#: sessions whose last replica an affine pool remembers
AFFINITY_SESSIONS = 4096


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

    def __init__(
        self,
        stage: str,
        urls: Collection[str],
        *,
        affinity_slack: int | None = None,
        affinity_sessions: int = AFFINITY_SESSIONS,
    ) -> None:
        """`affinity_slack=None`: no session affinity (every pick by load alone)."""
        if not urls:
            raise ValueError(f"{stage}: a pool needs at least one replica")
        if affinity_slack is not None and affinity_slack < 0:
            raise ValueError(f"{stage}: affinity_slack must be at least 0")
        if affinity_sessions < 1:
            raise ValueError(f"{stage}: affinity_sessions must be at least 1")
        self.stage = stage
        self.replicas = [Replica(i, url) for i, url in enumerate(urls)]
        self.affinity_slack = affinity_slack
        self.affinity_sessions = affinity_sessions
        self._cursor = 0
        self._listeners: list[Callable[[bool, str], None]] = []
        self._sessions: OrderedDict[str, Replica] = OrderedDict()  # session -> last replica

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

    def session_replica(self, session: str) -> Replica | None:
        """The replica that served `session`'s last request, if it is remembered."""
        return self._sessions.get(session)

    def acquire(self, exclude: Collection[Replica] = (), session: str | None = None) -> Replica:
        """The least-loaded replica in rotation (not in `exclude`), its count raised; with
        affinity on, `session`'s previous replica while it is within the slack.

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
        chosen = self._affine(session, candidates, least)
        if chosen is None:
            # round-robin among the least loaded, starting after the last one picked
            chosen = min(
                (r for r in candidates if r.outstanding == least),
                key=lambda r: (r.index - self._cursor) % n,
            )
        if self.affinity_slack is not None and session is not None:
            self._remember(session, chosen)
        self._cursor = (chosen.index + 1) % n
        chosen.outstanding += 1
        chosen.served += 1
        return chosen

    def _affine(self, session: str | None, candidates: list[Replica], least: int) -> Replica | None:
        """`session`'s previous replica, if it is a candidate within the slack."""
        if self.affinity_slack is None or session is None:
            return None
        previous = self._sessions.get(session)
        if previous is None or previous not in candidates:
            return None  # never seen, forgotten, ejected or already failed this request
        return previous if previous.outstanding <= least + self.affinity_slack else None

    def _remember(self, session: str, replica: Replica) -> None:
        self._sessions[session] = replica
        self._sessions.move_to_end(session)
        while len(self._sessions) > self.affinity_sessions:
            self._sessions.popitem(last=False)  # the least recently used session

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
