"""Session admission: at most `max_sessions` sessions at once (B25), answered with
`resource_exhausted` (and close 1013 by the transport) when full. Sans-IO: the runtime
calls `admit` on connect and `release` on every terminal path."""

from __future__ import annotations

from spec.errors import ErrorCode, RemoteProtocolError

__all__ = ["SessionSlots"]


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
