"""Client turn watchdog: armed only while a turn awaits a reply (B23)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_WATCHDOG", "WatchdogState"]


class WatchdogState(enum.Enum):
    DISARMED = "disarmed"
    ARMED = "armed"
    EXPIRED = "expired"  # no reply within the watchdog time: the call is ended


W = WatchdogState

CLIENT_WATCHDOG = Table(
    name="client_watchdog",
    doc=(
        "The client's turn watchdog (B23). It is armed while at least one hold is submitted, "
        "acknowledged or answering, restarted by each new submission, and disarmed when the "
        "last of them ends by any terminal path: response.done, no_response, rejection or "
        "interrupt. Expiry ends the call with a notice."
    ),
    states=WatchdogState,
    initial=W.DISARMED,
    terminal=frozenset({W.EXPIRED}),
    transitions=(
        T("arm", W.DISARMED, W.ARMED, effect="start_timer", behaviours=("B23",)),
        T("arm", W.ARMED, None, effect="start_timer", behaviours=("B23",)),
        T("disarm", W.ARMED, W.DISARMED, effect="stop_timer", behaviours=("B23",)),
        T("expire", W.ARMED, W.EXPIRED, effect="report_expiry", behaviours=("B23",)),
    ),
    invariants={
        "W1": "armed if and only if some hold awaits a reply",
        "W2": "every terminal path of the last awaiting hold disarms it",
    },
)
