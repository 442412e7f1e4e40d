"""`VadFeed`: one session's audio on its way to the process's VAD tick, and back.

Each `ScoreVad` effect's audio is cut into whole 512-sample frames (the rest waits for the
next append) and queued on the `VadBatcher`, which scores every session's frames together
on its tick and hands this session its probabilities in order (`deliver`), with the
frames' levels (RMS in dB below full scale: the turn detector compares them with the
utterance's own speech, B43). A listening session's frames are mostly noise, so the levels
are measured only for a delivery that may hold speech (a probability above
`LEVELS_ABOVE`, under any threshold a session may set); one that cannot carries none.
The feed counts frames submitted and applied, so the reader can wait until the verdicts
on the audio applied so far are in (`settled`: a commit never races its own audio's
verdict) and hold back a session that outruns the VAD (`backlog`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from backends.base import VAD_FRAME_SAMPLES
from runtime.stage_executor import float_pcm

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup

    from runtime.vad_batcher import VadBatcher

__all__ = ["VadFeed"]


class VadFeed:
    __slots__ = (
        "_applied",
        "_deliver",
        "_frames",
        "_progress",
        "_rest",
        "_slot",
        "_state",
        "_stopped",
        "_submitted",
        "batcher",
    )

    def __init__(
        self, batcher: VadBatcher, deliver: Callable[[list[float], list[float]], None]
    ) -> None:
        self.batcher = batcher
        #: the probabilities of the next frames, in order, and their levels (dBFS)
        self._deliver = deliver
        self._frames: deque[Any] = deque()  # the frames queued (rows of samples), in order
        self._state = batcher.vad.new_state()
        self._rest = np.zeros(0, dtype=np.float32)
        self._slot: Any = None  # this session's place in the VAD queue
        self._submitted = 0  # frames queued for scoring ...
        self._applied = 0  # ... and those whose verdict the session has seen
        self._progress: anyio.Event | None = None  # while the reader waits for verdicts
        self._stopped = False

    @property
    def backlog(self) -> int:
        """Frames queued whose verdict has not come back yet."""
        return self._submitted - self._applied

    def submit(self, pcm16: bytes, tg: TaskGroup) -> None:
        """Queue the whole frames of an append's audio for the next VAD tick."""
        audio = float_pcm(pcm16)
        if len(self._rest):
            audio = np.concatenate([self._rest, audio])
        n = len(audio) // VAD_FRAME_SAMPLES
        self._rest = audio[n * VAD_FRAME_SAMPLES :]
        if n:
            self._submitted += n
            frames = audio[: n * VAD_FRAME_SAMPLES].reshape(n, VAD_FRAME_SAMPLES)
            self._frames.extend(frames)
            self._slot = self.batcher.submit(self._slot, self._state, frames, self._scored, tg)

    def _scored(self, probabilities: list[float]) -> None:
        self._applied += len(probabilities)
        frames = [self._frames.popleft() for _ in probabilities if self._frames]
        speech = bool(probabilities) and max(probabilities) > LEVELS_ABOVE
        levels = [frame_level_db(frame) for frame in frames] if speech else []
        if not self._stopped:
            self._deliver(probabilities, levels)
        if self._progress is not None:
            self._progress.set()

    async def settled(self) -> None:
        """Wait until the verdict on every frame submitted so far was applied (or the
        feed stopped)."""
        while self._applied < self._submitted and not self._stopped:
            self._progress = anyio.Event()
            await self._progress.wait()
        self._progress = None

    def stop(self) -> None:
        """No more verdicts are applied (the session crashed or ended); a reader waiting
        for them goes on."""
        self._stopped = True
        if self._progress is not None:
            self._progress.set()

    def discard(self) -> None:
        """Leave the VAD queue: frames still queued are not scored."""
        self.stop()
        self.batcher.discard(self._slot)


#: levels go with a delivery holding a probability above this: under any threshold a
#: session may set (spec.turn_detection: above 0.15), so every frame that may be speech,
#: and those around it, has one
LEVELS_ABOVE = 0.15
#: the level of a frame of digital silence (dBFS): below any floor
SILENT_DB = -120.0
_SILENT_POWER = 10.0 ** (SILENT_DB / 10.0)


def frame_level_db(frame: Any) -> float:
    """A frame's RMS (float samples, full scale 1.0) in dB below full scale, never below
    `SILENT_DB`."""
    power = float(np.dot(frame, frame)) / len(frame)
    return 10.0 * math.log10(power) if power > _SILENT_POWER else SILENT_DB
