"""The resume journal of one session: its numbered server events, kept for replay.

Sans-IO and generic over what it keeps: the caller numbers nothing itself, it hands each
event with its size (the runtime measures the encoded wire bytes) and the time `now_ms`.
`append` numbers events 1, 2, ... (`server_event_seq`); `ack(seq)` drops everything up to
`seq` (`session.event_ack`: the client has it); the journal stays within `max_bytes` of
events and drops what is older than `max_age_ms`, oldest first, acknowledged or not.
`replay_after(k)` answers a resume whose client last received event `k`: exactly the kept
events above `k`, in order, or why that is impossible:

- `journal_overflow`: events above `k` were dropped by the byte or age bound before the
  client acknowledged them;
- `journal_gap`: `k` is ahead of the last event, or behind what the client itself
  acknowledged (it claims to lack events it confirmed).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["JournalEntry", "ReplayImpossible", "ResumeJournal"]

P = TypeVar("P")

ResyncReason = Literal["journal_gap", "journal_overflow"]


@dataclass(frozen=True, slots=True)
class JournalEntry(Generic[P]):
    seq: int
    at_ms: int
    size: int
    payload: P


class ReplayImpossible(Exception):
    """A resume cursor the journal cannot serve; `reason` is the wire reason."""

    def __init__(self, reason: ResyncReason, message: str) -> None:
        super().__init__(message)
        self.reason: ResyncReason = reason


class ResumeJournal(Generic[P]):
    """Bounded by `max_bytes` (sum of entry sizes) and `max_age_ms` (per entry)."""

    __slots__ = ("_entries", "acked", "bytes", "dropped", "last_seq", "max_age_ms", "max_bytes")

    def __init__(self, *, max_bytes: int, max_age_ms: int) -> None:
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self._entries: deque[JournalEntry[P]] = deque()
        self.bytes = 0
        self.last_seq = 0  # the seq of the newest event ever appended
        self.acked = 0  # the client has every event up to this seq
        self.dropped = 0  # events up to this seq left by the bounds, unacknowledged

    def __len__(self) -> int:
        return len(self._entries)

    def kept(self) -> list[P]:
        """The kept events, oldest first."""
        return [e.payload for e in self._entries]

    @property
    def first_seq(self) -> int:
        """The seq of the oldest kept event (last_seq + 1 when none is kept)."""
        return self._entries[0].seq if self._entries else self.last_seq + 1

    def append(self, payload: P, size: int, now_ms: int) -> int:
        """Keep one event; returns its seq. Then the bounds apply (it may itself go)."""
        self.last_seq += 1
        self._entries.append(JournalEntry(self.last_seq, now_ms, size, payload))
        self.bytes += size
        self.expire(now_ms)
        return self.last_seq

    def ack(self, seq: int) -> None:
        """The client has every event up to `seq` (capped at the last one): drop them."""
        seq = min(seq, self.last_seq)
        self.acked = max(self.acked, seq)
        while self._entries and self._entries[0].seq <= self.acked:
            self.bytes -= self._entries.popleft().size

    def expire(self, now_ms: int) -> None:
        """Drop the oldest events beyond the byte bound or older than the age bound."""
        entries = self._entries
        while entries and (
            self.bytes > self.max_bytes or now_ms - entries[0].at_ms > self.max_age_ms
        ):
            gone = entries.popleft()
            self.bytes -= gone.size
            self.dropped = max(self.dropped, gone.seq)

    def replay_after(self, seq: int, now_ms: int) -> list[JournalEntry[P]]:
        """The kept events above `seq`, oldest first.

        Raises:
            ReplayImpossible: see the module docstring.
        """
        self.expire(now_ms)
        if seq > self.last_seq:
            raise ReplayImpossible(
                "journal_gap", f"event {seq} was never sent (the last is {self.last_seq})"
            )
        if seq < self.acked:
            raise ReplayImpossible(
                "journal_gap", f"events up to {self.acked} were acknowledged; {seq} is behind"
            )
        if seq < self.dropped:
            raise ReplayImpossible(
                "journal_overflow",
                f"events {seq + 1}..{self.dropped} left the journal before they were acknowledged",
            )
        return [e for e in self._entries if e.seq > seq]
