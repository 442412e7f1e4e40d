"""`PendingInput`: the ledger of client input bytes a session holds (B12, B13).

Pending input is what the input buffer holds plus what each accepted commit (or queued
user item) reserves until its stage request takes it: the PCM when its ASR request is
submitted, the frames when its VLM request is. One counter, changed only through these
methods, so a reservation is released exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.errors import ErrorCode, RemoteProtocolError

if TYPE_CHECKING:
    from core.statemachines.commit import Commit

__all__ = ["PendingInput"]


class PendingInput:
    __slots__ = ("bytes", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0

    def ensure_room(self, total_after: int, hint: str, event_id: str | None) -> None:
        """Refuse (`input_backpressure`, nothing changed) unless `total_after` fits; the
        message is built only for a refusal (this runs on every append)."""
        if total_after > self.limit:
            raise RemoteProtocolError(
                f"pending input would exceed {self.limit} bytes; {hint}",
                code=ErrorCode.INPUT_BACKPRESSURE,
                event_id=event_id,
            )

    def add(self, n: int) -> None:
        self.bytes += n

    def free(self, n: int) -> None:
        self.bytes -= n

    def release(self, commit: Commit) -> None:
        """Everything `commit` reserved (its request was submitted, or it ended)."""
        self.bytes -= commit.release()

    def take_audio(self, commit: Commit) -> bytes:
        """`commit`'s PCM for its ASR request; its frames stay reserved."""
        pcm16, freed = commit.take_audio()
        self.bytes -= freed
        return pcm16
