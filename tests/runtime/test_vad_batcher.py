"""The per-process VAD tick: one scoring call per tick for every session that queued
audio, and no session is left waiting when a leader or a waiter is cancelled."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

from runtime.vad_batcher import VadBatcher

pytestmark = pytest.mark.anyio


class CountingVad:
    """Scores every frame as its session's index; records each call's batch."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.gate: anyio.Event | None = None

    def new_state(self) -> Any:
        return object()

    async def score_sequences(self, states: Any, sequences: Any) -> list[Any]:
        self.calls.append(len(states))
        if self.gate is not None:
            await self.gate.wait()
        return [np.full(len(s), float(s[0, 0]), dtype=np.float32) for s in sequences]


def frames(value: float, n: int = 2) -> np.ndarray:
    return np.full((n, 512), value, dtype=np.float32)


async def test_b10_sessions_queued_within_one_tick_are_scored_in_one_call() -> None:
    vad = CountingVad()
    batcher = VadBatcher(vad)  # type: ignore[arg-type]
    results: dict[int, list[float]] = {}

    async def one(i: int) -> None:
        results[i] = await batcher.score(vad.new_state(), frames(i / 100))

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(one, i)
    assert vad.calls == [50]
    assert results == {i: [pytest.approx(i / 100)] * 2 for i in range(50)}
    assert (batcher.batches, batcher.frames, batcher.queued) == (1, 100, 0)


async def test_b10_a_cancelled_leader_still_answers_everyone_who_joined() -> None:
    vad = CountingVad()
    vad.gate = anyio.Event()
    batcher = VadBatcher(vad)  # type: ignore[arg-type]
    answered: list[list[float]] = []

    async def waiter() -> None:
        answered.append(await batcher.score(vad.new_state(), frames(0.5)))

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as leader_scope:
            tg.start_soon(batcher.score, vad.new_state(), frames(0.1))  # leads
            await anyio.sleep(0)
        for _ in range(3):
            tg.start_soon(waiter)
        while not vad.calls:  # the leader is inside its (shielded) scoring call
            await anyio.sleep(0.001)
        leader_scope.cancel()
        vad.gate.set()
    assert answered == [[0.5, 0.5]] * 3


async def test_b10_a_cancelled_waiter_leaves_the_queue_and_passes_the_lead_on() -> None:
    vad = CountingVad()
    vad.gate = anyio.Event()
    batcher = VadBatcher(vad)  # type: ignore[arg-type]
    later: list[list[float]] = []

    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.score, vad.new_state(), frames(0.1))  # leads, held at the gate
        while not vad.calls:
            await anyio.sleep(0.001)
        doomed = anyio.CancelScope()
        tg.start_soon(_scoped, doomed, batcher, vad)  # queues behind the leader
        await anyio.sleep(0)

        async def survivor() -> None:
            later.append(await batcher.score(vad.new_state(), frames(0.7)))

        tg.start_soon(survivor)
        await anyio.sleep(0)
        doomed.cancel()
        vad.gate.set()
    assert later == [[pytest.approx(0.7)] * 2]
    assert batcher.queued == 0
    assert vad.calls == [1, 1]  # the cancelled waiter's frames were never scored


async def _scoped(scope: anyio.CancelScope, batcher: VadBatcher, vad: CountingVad) -> None:
    with scope:
        await batcher.score(vad.new_state(), frames(0.3))


class SliceRecordingVad:
    """Scores every frame as its own first sample; records each call's sequence lengths."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def new_state(self) -> Any:
        return object()

    async def score_sequences(self, states: Any, sequences: Any) -> list[Any]:
        self.calls.append([len(s) for s in sequences])
        return [s[:, 0].astype(np.float32) for s in sequences]


async def test_a_sessions_backlog_is_scored_in_slices_so_it_never_delays_another() -> None:
    """Reproduction: one session's 14 MB append put 2.4 s of frames in the batch every
    session shares (their append-to-scored time went from 5 ms to 2.7 s)."""
    vad = SliceRecordingVad()
    batcher = VadBatcher(vad, slice_frames=48)  # type: ignore[arg-type]
    backlog = np.repeat((np.arange(1_000, dtype=np.float32) / 1_000)[:, None], 512, axis=1)
    results: dict[str, list[float]] = {}
    order: list[str] = []

    async def one(name: str, frames_: np.ndarray) -> None:
        results[name] = await batcher.score(vad.new_state(), frames_)
        order.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "hog", backlog)
        await anyio.sleep(0)
        tg.start_soon(one, "light", frames(0.5))
    assert vad.calls[0] == [48, 2]  # the light session is scored in the first batch
    assert all(max(call) <= 48 for call in vad.calls)
    assert order == ["light", "hog"]
    assert results["light"] == [0.5, 0.5]
    assert results["hog"] == pytest.approx(list(backlog[:, 0]))  # every frame, in order
    assert (batcher.frames, batcher.queued) == (1_002, 0)


async def test_a_session_joining_while_a_backlog_is_scored_waits_one_slice_at_most() -> None:
    vad = SliceRecordingVad()
    batcher = VadBatcher(vad, slice_frames=48)  # type: ignore[arg-type]
    joined_at: list[int] = []

    async def hog() -> None:
        await batcher.score(vad.new_state(), frames(0.1, 480))

    async def late() -> None:
        while len(vad.calls) < 3:  # the backlog is being scored
            await anyio.sleep(0.001)
        joined_at.append(len(vad.calls))
        await batcher.score(vad.new_state(), frames(0.9))
        joined_at.append(len(vad.calls))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hog)
        tg.start_soon(late)
    start, end = joined_at
    assert end - start <= 2  # scored in the next batch (or the one after, at the boundary)
    assert len(vad.calls) == 10  # 480 frames in slices of 48


class JoiningSession:
    """One session streaming steadily: during each VAD call (one clock second) its next
    append of `per_append` frames joins its slot, until `appends` were made."""

    def __init__(self, appends: int, per_append: int) -> None:
        self.appends, self.per_append = appends, per_append
        self.now = 0.0
        self.calls = 0
        self.held: list[int] = []  # frames its slot held at each call
        self.scored: list[float] = []
        self.batcher = VadBatcher(self, tick_s=0, clock=lambda: self.now)  # type: ignore[arg-type]
        self.slot: Any = None
        self.tg: Any = None

    def new_state(self) -> Any:
        return object()

    async def score_sequences(self, states: Any, sequences: Any) -> list[Any]:
        self.calls += 1
        self.now += 1.0
        self.held.append(len(self.slot.frames))
        if self.calls < self.appends:
            self._append(states[0])
        return [np.zeros(len(s), dtype=np.float32) for s in sequences]

    def _append(self, state: Any) -> None:
        self.slot = self.batcher.submit(
            self.slot, state, frames(0.1, self.per_append), self.scored.extend, self.tg
        )

    async def stream(self) -> None:
        async with anyio.create_task_group() as self.tg:
            self._append(self.new_state())


async def test_vad_wait_of_a_session_that_keeps_appending_is_counted_per_append() -> None:
    """Regression: a slot that more frames keep joining while it is scored stays queued;
    its wait was measured from its first frames, so a session streaming steadily looked
    ever later (the overload gate shed new sessions at a third of the capacity)."""
    session = JoiningSession(appends=5, per_append=1)
    await session.stream()
    assert (session.calls, len(session.scored), session.batcher.queued) == (5, 5, 0)
    # each frame waited one call, never five
    assert session.batcher.take_longest_wait_s() == 1.0


async def test_a_slot_that_frames_keep_joining_holds_only_its_unscored_frames() -> None:
    """Regression: a slot kept every frame it was ever given until it was done, so a
    session whose next append always joined before the tick finished held (and copied
    on every append) all its audio since the slot was made."""
    session = JoiningSession(appends=50, per_append=2)
    await session.stream()
    assert (session.calls, len(session.scored), session.batcher.queued) == (50, 100, 0)
    assert max(session.held) == 2  # only the frames this tick scores, never the ones before


async def test_the_time_spent_scoring_is_handed_to_the_watcher_once() -> None:
    """The VAD's busy share (admission's capacity signal) is the wall time of its scoring
    calls: five calls of one clock second each, read once, then nothing until more."""
    session = JoiningSession(appends=5, per_append=1)
    await session.stream()
    assert session.batcher.take_scoring_s() == 5.0
    assert session.batcher.take_scoring_s() == 0.0
