"""`TurnLog`: what history needs beyond the items' texts (B29, D30).

A model trained on observation ticks (JoyAI's) sees every earlier user turn with the time
it was observed and, for the newest ones, the frames it showed, and every answer in its
own grammar, a tick it stayed silent on included. Items hold texts only, so the session
records the rest here:

- when each user turn was taken (a commit with content, or a created user item), in
  seconds on the session clock: the `now_ms` of the event that made it, counted from the
  session's start (never a wall clock read here);
- the frames of the newest turns, bounded like the model context itself: at most
  `max_context_images` frames and `max_context_image_bytes` bytes for the whole session,
  oldest out first (frames are kept when the VLM request that showed them is submitted);
- which turns a response answered with silence (it ended by `listen`), so that silence
  is history too;
- whether any turn of the session has carried words (a query) yet, even one that has
  since left the conversation.

Entries belong to item versions and leave with them (`forget`), so the log is bounded by
`max_items` and the frame limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from core.statemachines.item import Item

__all__ = ["TurnLog"]


class TurnLog:
    __slots__ = (
        "_frames",
        "_silent",
        "_started_ms",
        "_times",
        "asked",
        "clock_ms",
        "frame_bytes",
        "frame_count",
        "max_bytes",
        "max_frames",
    )

    def __init__(self, started_ms: int, *, max_frames: int, max_bytes: int) -> None:
        self._started_ms = started_ms
        #: the time of the event being handled (set by the session on every event)
        self.clock_ms = started_ms
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        # keyed by item version (identity): a re-created id is a new turn
        self._times: dict[Item, float] = {}
        self._frames: dict[Item, tuple[bytes, ...]] = {}  # oldest first
        self._silent: set[Item] = set()
        self.frame_count = 0
        self.frame_bytes = 0
        #: some turn of this session carried words (a query) to the model
        self.asked = False

    def stamp(self, item: Item) -> None:
        """`item` is a user turn taken now (the first stamp of a version counts)."""
        if item not in self._times:
            self._times[item] = (self.clock_ms - self._started_ms) / 1000

    def time_s(self, item: Item) -> float | None:
        return self._times.get(item)

    def now_s(self) -> float:
        """The time a turn taken now would be stamped with."""
        return (self.clock_ms - self._started_ms) / 1000

    def restamp(self, item: Item, time_s: float) -> None:
        """`item`'s turn is dated `time_s`: the time its adopted preemptive response was
        built at (B35), which is what the model was told."""
        self._times[item] = time_s

    def is_turn(self, item: Item) -> bool:
        """Whether `item` was taken as a user turn (a quiet commit is not one)."""
        return item in self._times

    def keep_frames(self, item: Item, frames: Sequence[bytes]) -> None:
        """The frames `item` showed the model; the oldest kept frames make room."""
        if not frames:
            return
        kept = self._frames.pop(item, ())
        self._drop(kept)
        kept = (*kept, *frames)
        self._frames[item] = kept
        self.frame_count += len(kept)
        self.frame_bytes += sum(len(f) for f in kept)
        self._evict()

    def frames(self, item: Item) -> tuple[bytes, ...]:
        return self._frames.get(item, ())

    def answered_silently(self, item: Item) -> None:
        self._silent.add(item)

    def silent(self, item: Item) -> bool:
        return item in self._silent

    def forget(self, item: Item) -> None:
        """`item` left the conversation: so does what was recorded for it."""
        self._times.pop(item, None)
        self._silent.discard(item)
        self._drop(self._frames.pop(item, ()))

    def _drop(self, frames: tuple[bytes, ...]) -> None:
        self.frame_count -= len(frames)
        self.frame_bytes -= sum(len(f) for f in frames)

    def _evict(self) -> None:
        """Oldest frames out until both bounds hold; each frame is dropped once, so the
        work is linear in the frames ever kept."""
        while self._frames and (
            self.frame_count > self.max_frames or self.frame_bytes > self.max_bytes
        ):
            oldest = next(iter(self._frames))
            frames = self._frames[oldest]
            self.frame_count -= 1
            self.frame_bytes -= len(frames[0])
            if len(frames) > 1:
                self._frames[oldest] = frames[1:]
            else:
                del self._frames[oldest]
