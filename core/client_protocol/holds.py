"""`ClientHolds`: the client's turns, one `Hold` per push-to-talk hold or server-VAD
commit, and the commits still waiting for the server's answer (B15, B20, B23).

Owned here: the holds in order (finished ones trimmed to `FINISHED_HOLD_MEMORY`), the
pending commits keyed by their client event id, and when each VAD turn's speech stopped
(the start of the latency the client reports). `ClientProtocol` routes host inputs and
server events here; the holds' own transitions are the `client_hold` table's.

Invariants kept: at most one hold is live (pressed, muted or recording); an answer to a
commit (acknowledgement, `no_response` or `error`) finishes exactly the hold whose event
id it carries; `response.created` binds only acknowledged holds, and only the response a
hold answers settles or interrupts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines.client_hold import Hold
from spec.tables.client_constants import FENCE_MEMORY, FINISHED_HOLD_MEMORY
from spec.tables.client_hold import (
    AWAITING_REPLY_STATES,
    CLIENT_HOLD,
    LIVE_HOLD_STATES,
    UPLOADING_HOLD_STATES,
    HoldState,
)

if TYPE_CHECKING:
    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ClientHolds", "trim_oldest"]


def trim_oldest(table: dict[str, float]) -> None:
    """Forget the oldest entries of an insertion-ordered table beyond `FENCE_MEMORY`."""
    while len(table) > FENCE_MEMORY:
        del table[next(iter(table))]


class ClientHolds:
    """The holds of one call. Each method that starts the watchdog's wait anew (a new
    commit is owed an answer) returns True."""

    def __init__(self, outbox: ClientOutbox) -> None:
        self._out = outbox
        self.holds: list[Hold] = []
        self.pending_commits: dict[str, Hold] = {}
        self._counter = 0
        self._speech_stopped_at: dict[str, float] = {}

    def _open(self) -> Hold:
        self._counter += 1
        hold = Hold(self._out, f"hold_{self._counter}")
        self.holds.append(hold)
        return hold

    # --- the person's turn -------------------------------------------------------------

    def live(self) -> Hold | None:
        """The hold being made now (pressed, muted or recording), if any."""
        for hold in self.holds:
            if hold.state in LIVE_HOLD_STATES:
                return hold
        return None

    def uploading(self) -> bool:
        """Whether the live hold sends microphone audio (push-to-talk mode)."""
        hold = self.live()
        return hold is not None and hold.state in UPLOADING_HOLD_STATES

    def press(self, *, muted: bool) -> None:
        if self.live() is None:
            self._open().fire("press", muted=muted)

    def release(self, now_ms: float) -> bool:
        """End the live hold; a hold that uploaded audio now awaits its commit's answer."""
        hold = self.live()
        if hold is None:
            return False
        hold.ended_ms = now_ms
        hold.fire("release")
        if hold.state is HoldState.SUBMITTED and hold.commit_event_id is not None:
            self.pending_commits[hold.commit_event_id] = hold
            return True
        return False

    def mute(self, muted: bool) -> None:
        hold = self.live()
        if hold is not None:
            hold.fire("mute" if muted else "unmute")

    def upload(self, samples: int) -> None:
        """The live hold's microphone chunk went out (audio flows only during a hold)."""
        hold = self.live()
        assert hold is not None
        if hold.state is HoldState.PRESSED:
            hold.fire("upload")
        hold.uploaded_samples += samples

    def cut(self) -> bool:
        """The link dropped: the live hold ends without a commit (its audio reached the
        server only in part). True if it had uploaded audio, which the server still holds
        in its input buffer."""
        hold = self.live()
        if hold is None:
            return False
        uploaded = hold.state is HoldState.RECORDING
        hold.fire("cut")
        return uploaded

    # --- the server's answers ----------------------------------------------------------

    def speech_stopped(self, item_id: str, now_ms: float) -> None:
        self._speech_stopped_at[item_id] = now_ms
        trim_oldest(self._speech_stopped_at)

    def committed(
        self, client_event_id: str | None, item_id: str | None, *, no_response: bool, now_ms: float
    ) -> bool:
        """`input_audio_buffer.committed`: finish the hold it names, or open one for a
        commit the server's VAD made."""
        if client_event_id is not None:
            hold = self.pending_commits.pop(client_event_id, None)
            if hold is not None:
                hold.item_id = item_id
                hold.fire("committed_no_response" if no_response else "committed")
            return False
        if no_response:
            return False
        hold = self._open()
        hold.item_id = item_id
        hold.ended_ms = (
            self._speech_stopped_at.pop(item_id, now_ms) if item_id is not None else now_ms
        )
        hold.fire("server_commit")
        return True

    def rejected(self, event_id: str | None, code: str, message: str) -> bool:
        """An `error` naming a pending commit finishes that hold; False if it names none."""
        hold = self.pending_commits.pop(event_id, None) if event_id is not None else None
        if hold is None:
            return False
        hold.fire("rejected", code=code, message=message)
        return True

    def answer(self, response_id: str) -> float | None:
        """`response.created` binds every acknowledged hold; the earliest end among them
        (where the reply's latency starts), if any has one."""
        ends: list[float] = []
        for hold in self.holds:
            if hold.state is HoldState.ACKNOWLEDGED:
                hold.response_id = response_id
                hold.fire("answer")
                if hold.ended_ms is not None:
                    ends.append(hold.ended_ms)
        return min(ends) if ends else None

    def settle(self, response_id: str) -> None:
        for hold in self.holds:
            if hold.state is HoldState.ANSWERING and hold.response_id == response_id:
                hold.fire("settle")

    def interrupt(self, response_id: str | None) -> None:
        """Settle the holds `response_id` (None: any response) answers."""
        for hold in self.holds:
            if hold.state is HoldState.ANSWERING and response_id in (None, hold.response_id):
                hold.fire("interrupt")

    def awaiting_reply(self) -> bool:
        return any(hold.state in AWAITING_REPLY_STATES for hold in self.holds)

    def prune(self) -> None:
        finished = [h for h in self.holds if h.state in CLIENT_HOLD.terminal]
        for hold in finished[: max(0, len(finished) - FINISHED_HOLD_MEMORY)]:
            self.holds.remove(hold)
