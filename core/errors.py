"""Core's exceptions.

InvalidTransition      neutral, core-private: a trigger not allowed in a state (or a
                       failed guard). Never leaves SessionProtocol: `receive` re-labels
                       it `InvalidState` (the client's fault), `backend_event` re-labels
                       it `LocalProtocolError` (ours: the runtime fed an impossible result).
InvalidState           RemoteProtocolError: a legal event at the wrong time.
"""

from __future__ import annotations

from spec.errors import ErrorCode, RemoteProtocolError

__all__ = ["InvalidState", "InvalidTransition"]


class InvalidTransition(Exception):
    """A trigger that the machine's table does not allow in its current state."""

    def __init__(self, machine: str, trigger: str, state: str, guard: str | None = None) -> None:
        why = f" (guard `{guard}` failed)" if guard else ""
        super().__init__(f"cannot `{trigger}` {machine} in state `{state}`{why}")
        self.machine = machine
        self.trigger = trigger
        self.state = state
        self.guard = guard


class InvalidState(RemoteProtocolError):
    """A client event that is legal in general but not in the session's current state."""

    code = ErrorCode.BAD_EVENT
