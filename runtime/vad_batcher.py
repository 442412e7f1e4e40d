"""Batched server VAD across sessions, on a per-process tick (docs/architecture.md, the
session tier).

Silero costs about 130 us for one frame alone and about 40-55 us per frame in a batch of
64 or more, so the batch size decides how many listening sessions a core holds. Every
session that appended audio queues its whole 512-sample frames (`submit`, synchronous,
from the append path); the queue is scored once per tick (`TICK_S`), all of it in one
`Vad.score_sequences` call and one worker-thread hop (step j scores frame j of every
session that has one: the model is recurrent, so a session's frames go in order), and
each session's verdicts are handed to its callback on the event loop.

A session holds at most one slot: frames it submits while its slot waits join that slot
(even while a batch scores it: the rest is scored next tick, in order), so one session
never appears twice in a batch.

Fair sharing: a batch takes at most `slice_frames` frames of each session (`SLICE_FRAMES`,
about 1.5 s of audio per 20 ms tick, far ahead of real time); a session with a longer
backlog keeps its place in the queue and goes on in the next ticks, so one session's
backlog never delays the frames of another by more than one slice per tick.

The tick task (`run`) lives in the task group of a session that submitted: the first
submit starts it there, and when that session ends (its task group cancels the tick),
the tick starts again in the task group of the next session still waiting, so audio
never waits for a submit that may not come. Scoring and delivery are shielded: a batch
that started is always answered. Why not a task per session: waking one per append and
one per verdict cost more than the append itself once hundreds of sessions listen.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import numpy as np

from runtime.clock import loop_clock

if TYPE_CHECKING:
    import numpy.typing as npt
    from anyio.abc import TaskGroup

    from backends.base import Vad, VadState

__all__ = ["SLICE_FRAMES", "TICK_S", "VadBatcher", "Verdicts"]

log = logging.getLogger("joyduplex.runtime.vad")

#: the scoring cadence: audio waits at most this long for its batch
TICK_S = 0.02
#: the most frames of one session scored in one batch (48 x 32 ms = 1.5 s of audio)
SLICE_FRAMES = 48


#: what a session is handed for each scored slice of its frames: their speech
#: probabilities, in order
Verdicts = Callable[[list[float]], None]


class _Slot:
    __slots__ = ("arrivals", "frames", "on_scored", "owner", "queued", "state")

    def __init__(
        self,
        state: VadState,
        frames: npt.NDArray[np.float32],
        on_scored: Verdicts,
        owner: TaskGroup,
        now: float,
    ) -> None:
        self.state = state
        self.frames = frames  # not scored yet, in order (scored frames leave each tick)
        self.on_scored = on_scored
        self.owner = owner  # the submitting session's task group: a home for the tick
        self.queued = True  # in the queue: more frames of its session may join it
        #: (frames held once they came, when), counted from the slot's first unscored
        #: frame: the wait of each append's frames is measured from its own arrival
        self.arrivals: deque[tuple[int, float]] = deque([(len(frames), now)])

    @property
    def done(self) -> bool:
        return len(self.frames) == 0


class VadBatcher:
    def __init__(
        self,
        vad: Vad,
        *,
        tick_s: float = TICK_S,
        slice_frames: int = SLICE_FRAMES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`tick_s=0` scores at the next loop iteration (tests on a simulated clock);
        `clock` (seconds) times the waits, the event loop's by default."""
        self.vad = vad
        self.tick_s = tick_s
        self.slice_frames = slice_frames
        self._queue: list[_Slot] = []
        self.running = False  # a tick task is started (or about to be)
        self.batches = 0
        self.frames = 0
        self.longest_wait_s = 0.0  # since `take_longest_wait_s` last read it
        self.scoring_s = 0.0  # wall time spent in scoring calls since `take_scoring_s`
        self._now = clock or loop_clock()  # anyio.current_time(), bound once (per append)

    @property
    def queued(self) -> int:
        """Sessions whose frames wait for the next tick."""
        return len(self._queue)

    def take_longest_wait_s(self) -> float:
        """The longest a session's audio waited for its verdict since the last read (queued
        to scored, or queued and still waiting, or held back by a reader that waited for
        its backlog to be scored): the overload signal of the VAD."""
        now = self._now()
        oldest = min((s.arrivals[0][1] for s in self._queue if s.arrivals), default=now)
        longest = max(self.longest_wait_s, now - oldest)
        self.longest_wait_s = 0.0
        return longest

    def take_scoring_s(self) -> float:
        """Seconds the VAD spent scoring (wall time, waits for the CPU included) since the
        last read: over a period, the share of it the VAD was busy, the capacity signal
        of the VAD (near 1, verdicts start to queue)."""
        spent, self.scoring_s = self.scoring_s, 0.0
        return spent

    def note_wait(self, seconds: float) -> None:
        """A session's reader waited `seconds` for its audio's verdicts before it could
        read on: audio the VAD had not scored yet was held back in the connection."""
        self.longest_wait_s = max(self.longest_wait_s, seconds)

    def submit(
        self,
        slot: _Slot | None,
        state: VadState,
        frames: npt.NDArray[np.float32],
        on_scored: Verdicts,
        owner: TaskGroup,
    ) -> _Slot | None:
        """Queue `frames` (shape [k, 512]) of one session for the next tick; `slot` is
        the one this returned last time for the same session (its frames join it while
        it waits). `on_scored` gets the probabilities of each scored slice, in order, on
        the event loop; `owner` (the session's task group) hosts the tick if none runs."""
        if len(frames) == 0:
            return slot
        if slot is not None and slot.queued:
            slot.frames = np.concatenate([slot.frames, frames])
            slot.arrivals.append((len(slot.frames), self._now()))
        else:
            slot = _Slot(state, frames, on_scored, owner, self._now())
            self._queue.append(slot)
        self._ensure_tick(owner)
        return slot

    def discard(self, slot: _Slot | None) -> None:
        """Drop a slot whose session ended (its frames are never scored)."""
        if slot is not None and slot.queued:
            slot.queued = False
            self._queue.remove(slot)

    async def score(self, state: VadState, frames: npt.NDArray[np.float32]) -> list[float]:
        """Probabilities of `frames` (shape [k, 512]) for one session, in order: `submit`
        for a caller that can wait (tests, tools)."""
        probabilities: list[float] = []
        if len(frames) == 0:
            return probabilities
        scored = anyio.Event()

        def on_scored(part: list[float]) -> None:
            probabilities.extend(part)
            if len(probabilities) >= len(frames):
                scored.set()

        async with anyio.create_task_group() as tg:
            slot = self.submit(None, state, frames, on_scored, tg)
            try:
                await scored.wait()
            finally:
                self.discard(slot)  # cancelled while waiting: its frames go unscored
                tg.cancel_scope.cancel()  # a tick hosted here moves on to another session
        return probabilities

    def _ensure_tick(self, owner: TaskGroup) -> None:
        if not self.running:
            self.running = True  # at once: a second submit must not start another
            owner.start_soon(self.run)

    async def run(self) -> None:
        """Score the queue once per tick until there is nothing left; started by
        `submit` in a session's task group."""
        self.running = True
        try:
            while self._queue:
                tick = self.tick_s
                await anyio.sleep(tick - anyio.current_time() % tick if tick > 0 else 0)
                with anyio.CancelScope(shield=True):
                    await self._score(list(self._queue))
                    # slots with frames left keep their place; those queued meanwhile follow
                    for slot in self._queue:
                        slot.queued = not slot.done
                    self._queue = [s for s in self._queue if s.queued]
        finally:
            self.running = False
            self._rehome()

    def _rehome(self) -> None:
        """The tick ended (nothing queued, or its session's task group cancelled it):
        if frames still wait, start it again in a waiting session's task group."""
        for slot in list(self._queue):
            if slot.owner.cancel_scope.cancel_called:
                continue  # that session is ending: it will not be answered anyway
            try:
                self._ensure_tick(slot.owner)
            except RuntimeError:  # a task group that already closed
                self.running = False
                continue
            return

    async def _score(self, batch: list[_Slot]) -> None:
        """Score the next slice of every slot of `batch` and hand each its verdicts."""
        if not batch:
            return
        slices = [s.frames[: self.slice_frames] for s in batch]
        started = self._now()
        try:
            scored = await self.vad.score_sequences([s.state for s in batch], slices)
        except Exception:  # a VAD failure must not stall the sessions waiting on it
            frames = sum(len(f) for f in slices)
            log.exception("VAD batch of %d frames failed; scoring them as silence", frames)
            scored = [np.zeros(len(f), dtype=np.float32) for f in slices]
        self.batches += 1
        now = self._now()
        self.scoring_s += now - started
        for slot, part, probabilities in zip(batch, slices, scored, strict=True):
            n = len(part)
            self.frames += n
            # frames that joined during the call follow the scored ones: both stay in order
            slot.frames = slot.frames[n:]
            arrivals = slot.arrivals
            if arrivals and arrivals[0][0] <= n:  # the oldest waited longest
                self.longest_wait_s = max(self.longest_wait_s, now - arrivals[0][1])
            slot.arrivals = deque((end - n, at) for end, at in arrivals if end > n)
            try:
                slot.on_scored(np.asarray(probabilities, dtype=np.float64).tolist())
            except Exception:  # one session's failure must not cost the others their verdicts
                log.exception("a session failed to take its VAD verdicts")
