"""Client turn watchdog: armed only while a turn awaits a reply (B23).

Spec: `spec.tables.client_watchdog.CLIENT_WATCHDOG`.

House rules: every legal transition is a row of the spec table; time is an argument
(`now_ms`); callbacks only append to the client outbox.

Theory of operation: `ClientProtocol` arms the watchdog whenever some hold is submitted,
acknowledged or answering and disarms it as soon as none is, after every input: so every
terminal path of the last awaiting hold (response.done in any status, `no_response`,
rejection, interrupt) disarms it, and a muted or empty hold never arms it. Each new
submission restarts the timer (`arm` while armed). When the deadline passes while armed it
`expire`s: a notice, and the protocol ends the call.

Invariants: W1 (armed iff a hold awaits a reply), W2 (every terminal path disarms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.tables.client_watchdog import CLIENT_WATCHDOG, WatchdogState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["Watchdog"]

_RULES = build(CLIENT_WATCHDOG)


class Watchdog:
    __slots__ = ("deadline_ms", "outbox", "state", "timeout_ms")

    def __init__(self, outbox: ClientOutbox, timeout_ms: int) -> None:
        self.outbox = outbox
        self.timeout_ms = timeout_ms
        self.state = WatchdogState.DISARMED
        self.deadline_ms: float | None = None

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    # --- effects --------------------------------------------------------------------

    def start_timer(self, event: EventData) -> None:
        self.deadline_ms = float(event.kwargs["now_ms"]) + self.timeout_ms
        self.outbox.emit({"kind": "watchdog", "armed": True, "deadline_ms": self.deadline_ms})

    def stop_timer(self, event: EventData) -> None:
        self.deadline_ms = None
        self.outbox.emit({"kind": "watchdog", "armed": False, "deadline_ms": None})

    def report_expiry(self, event: EventData) -> None:
        self.deadline_ms = None
        self.outbox.emit(
            {
                "kind": "notice",
                "level": "error",
                "code": "turn_watchdog",
                "message": f"no reply within {self.timeout_ms // 1000} s; the call was ended",
            }
        )
