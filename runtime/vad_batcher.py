"""Batched server VAD across sessions (DESIGN.md section 6).

Every session due in a tick queues its 512-sample frame; the first one becomes the leader,
yields once so the others can join, then scores the whole batch in one call (the Vad runs
it off the event loop). A session's frames are scored one call at a time, in order,
because the model is recurrent. The batch is shielded so a leader that is cancelled still
answers everyone who joined it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from backends.base import Vad, VadState

__all__ = ["VadBatcher"]

log = logging.getLogger("joyduplex.runtime.vad")

MAX_BATCH = 256


class _Slot:
    __slots__ = ("done", "frame", "probability", "state")

    def __init__(self, state: VadState, frame: npt.NDArray[np.float32]) -> None:
        self.state = state
        self.frame = frame
        self.probability = 0.0
        self.done = anyio.Event()


class VadBatcher:
    def __init__(self, vad: Vad) -> None:
        self.vad = vad
        self._queue: list[_Slot] = []
        self._leading = False
        self.batches = 0
        self.frames = 0

    async def score(self, state: VadState, frames: npt.NDArray[np.float32]) -> list[float]:
        """Probabilities of `frames` (shape [k, 512]) for one session, in order."""
        return [await self._score_one(state, frame) for frame in frames]

    async def _score_one(self, state: VadState, frame: npt.NDArray[np.float32]) -> float:
        slot = _Slot(state, frame)
        self._queue.append(slot)
        if not self._leading:
            self._leading = True
            try:
                await anyio.sleep(0)  # let the other sessions due in this tick join
                with anyio.CancelScope(shield=True):
                    await self._drain()
            finally:
                self._leading = False
        await slot.done.wait()
        return slot.probability

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                probs = await self.vad.score(
                    [s.state for s in batch], np.stack([s.frame for s in batch])
                )
            except Exception:  # a VAD failure must not stall the sessions waiting on it
                log.exception("VAD batch of %d frames failed; scoring them as silence", len(batch))
                probs = np.zeros(len(batch), dtype=np.float32)
            self.batches += 1
            self.frames += len(batch)
            for slot, p in zip(batch, probs, strict=True):
                slot.probability = float(p)
                slot.done.set()
