"""Session admission: at most `max_sessions` sessions at once (B25), answered with
`resource_exhausted` (and close 1013 by the transport) when full. Sans-IO: the runtime
calls `admit` on connect and `release` on every terminal path.

A server of several worker processes splits the limit: each worker admits at most
`worker_share(max_sessions, workers)` sessions, the ceiling of an even share (the kernel
spreads connections between the workers, so a worker that is full refuses even when
another still has room)."""

from __future__ import annotations

from spec.errors import ErrorCode, RemoteProtocolError

__all__ = ["SessionSlots", "worker_share"]


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
