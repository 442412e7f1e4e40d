"""Batched server VAD across sessions, on a per-process tick (docs/architecture.md, the
session tier).

Silero costs about 130 us for one frame alone and about 55 us per frame in a batch of 64
or more, so the batch size decides how many listening sessions a core holds. Every
session that appended audio queues its whole 512-sample frames; the queue is scored once
per tick (`TICK_S`), all of it in one `Vad.score_sequences` call and one worker-thread hop
(step j scores frame j of every session that has one: the model is recurrent, so a
session's frames go in order).

Fair sharing: a batch takes at most `slice_frames` frames of each session (`SLICE_FRAMES`,
about 1.5 s of audio per 20 ms tick, far ahead of real time); a session with a longer
backlog keeps its place in the queue and goes on in the next ticks, so one session's
backlog never delays the frames of another by more than one slice per tick.

There is no background task: the first session to queue leads, waits for the tick
boundary, scores one slice of everything queued, then hands the lead to the first
session still waiting (so no session's reader is held for more than its own batch). The
wait and the scoring are shielded, so a leader that is cancelled still answers everyone
who joined; a waiter that is cancelled takes its frames out of the queue and, if it had
just been given the lead, passes it on. Each session scores from a task of its own (the
runner's VAD worker), so more audio keeps arriving while earlier audio waits for its
tick; any other client event waits for the verdicts, so a commit never races its own
audio's verdict.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import numpy as np

from runtime.clock import loop_clock

if TYPE_CHECKING:
    import numpy.typing as npt

    from backends.base import Vad, VadState

__all__ = ["SLICE_FRAMES", "TICK_S", "VadBatcher"]

log = logging.getLogger("joyduplex.runtime.vad")

#: the scoring cadence: audio waits at most this long for its batch
TICK_S = 0.02
#: the most frames of one session scored in one batch (48 x 32 ms = 1.5 s of audio)
SLICE_FRAMES = 48


class _Slot:
    __slots__ = ("done", "frames", "probabilities", "queued_at", "scored", "state", "wake")

    def __init__(self, state: VadState, frames: npt.NDArray[np.float32], now: float) -> None:
        self.state = state
        self.frames = frames
        self.scored = 0  # frames scored so far, in order
        self.probabilities: list[float] = []
        self.queued_at = now
        self.done = False
        self.wake = anyio.Event()  # set when scored, or when this slot's owner should lead


class VadBatcher:
    def __init__(
        self, vad: Vad, *, tick_s: float = TICK_S, slice_frames: int = SLICE_FRAMES
    ) -> None:
        """`tick_s=0` scores at the next loop iteration (tests on a simulated clock)."""
        self.vad = vad
        self.tick_s = tick_s
        self.slice_frames = slice_frames
        self._queue: list[_Slot] = []
        self._leading = False
        self.batches = 0
        self.frames = 0
        self.longest_wait_s = 0.0  # since `take_longest_wait_s` last read it
        self._now = loop_clock()  # anyio.current_time(), bound once (once per append)

    @property
    def queued(self) -> int:
        """Sessions whose frames wait for the next tick."""
        return len(self._queue)

    def take_longest_wait_s(self) -> float:
        """The longest a session's audio waited for its verdict (queued to scored) since
        the last read: the overload signal of the VAD."""
        longest, self.longest_wait_s = self.longest_wait_s, 0.0
        return longest

    async def score(self, state: VadState, frames: npt.NDArray[np.float32]) -> list[float]:
        """Probabilities of `frames` (shape [k, 512]) for one session, in order."""
        if len(frames) == 0:
            return []
        slot = _Slot(state, frames, self._now())
        self._queue.append(slot)
        try:
            while not slot.done:
                if self._leading:
                    await slot.wake.wait()
                    slot.wake = anyio.Event()
                    continue
                await self._lead()
        finally:
            if not slot.done and slot in self._queue:  # cancelled while waiting
                self._queue.remove(slot)
                self._pass_lead()
        return slot.probabilities

    async def _lead(self) -> None:
        self._leading = True
        try:
            with anyio.CancelScope(shield=True):
                tick = self.tick_s
                await anyio.sleep(tick - self._now() % tick if tick > 0 else 0)
                batch = list(self._queue)
                await self._score(batch)
                # slots with frames left keep their place; those queued meanwhile follow
                self._queue = [s for s in self._queue if not s.done]
        finally:
            self._leading = False
            self._pass_lead()

    def _pass_lead(self) -> None:
        if not self._leading and self._queue:
            self._queue[0].wake.set()

    async def _score(self, batch: list[_Slot]) -> None:
        """Score the next slice of every slot of `batch`; a slot whose frames are all
        scored is done and woken."""
        if not batch:
            return
        slices = [s.frames[s.scored : s.scored + self.slice_frames] for s in batch]
        try:
            scored = await self.vad.score_sequences([s.state for s in batch], slices)
        except Exception:  # a VAD failure must not stall the sessions waiting on it
            frames = sum(len(f) for f in slices)
            log.exception("VAD batch of %d frames failed; scoring them as silence", frames)
            scored = [np.zeros(len(f), dtype=np.float32) for f in slices]
        self.batches += 1
        for slot, part, probabilities in zip(batch, slices, scored, strict=True):
            self.frames += len(part)
            slot.scored += len(part)
            slot.probabilities.extend(np.asarray(probabilities, dtype=np.float64).tolist())
            if slot.scored >= len(slot.frames):
                slot.done = True
                slot.wake.set()
                waited = self._now() - slot.queued_at
                self.longest_wait_s = max(self.longest_wait_s, waited)
