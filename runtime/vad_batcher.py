"""Batched server VAD across sessions (the session tier of docs/architecture.md section 3).

Every session due in a tick queues its frames (the whole 512-sample frames of one append);
the first one becomes the leader, yields once so the others can join, then scores the
whole batch in one `Vad.score_sequences` call: step j scores frame j of every session
that has one (the model is recurrent, so a session's frames go in order), and all the
steps run in one worker-thread hop, not one hop per 32 ms frame. The batch is shielded
so a leader that is cancelled still answers everyone who joined it.
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

#: sessions per `score_sequences` call
MAX_BATCH = 256


class _Slot:
    __slots__ = ("done", "frames", "probabilities", "state")

    def __init__(self, state: VadState, frames: npt.NDArray[np.float32]) -> None:
        self.state = state
        self.frames = frames
        self.probabilities: list[float] = []
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
        if len(frames) == 0:
            return []
        slot = _Slot(state, frames)
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
        return slot.probabilities

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                scored = await self.vad.score_sequences(
                    [s.state for s in batch], [s.frames for s in batch]
                )
            except Exception:  # a VAD failure must not stall the sessions waiting on it
                frames = sum(len(s.frames) for s in batch)
                log.exception("VAD batch of %d frames failed; scoring them as silence", frames)
                scored = [np.zeros(len(s.frames), dtype=np.float32) for s in batch]
            self.batches += 1
            for slot, probabilities in zip(batch, scored, strict=True):
                self.frames += len(slot.frames)
                slot.probabilities = [float(p) for p in probabilities]
                slot.done.set()
