"""B43: the VAD feed hands the session each frame's level (dBFS) with its probability, in
order, across appends that split frames, so the turn detector can see the energy drop; a
delivery that cannot hold speech (a listening session's noise) costs no levels."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from runtime.vad_batcher import VadBatcher
from runtime.vad_feed import SILENT_DB, VadFeed
from tests.runtime.test_vad_batcher import CountingVad

pytestmark = pytest.mark.anyio


def _pcm16(amplitude: float, samples: int) -> bytes:
    return (np.full(samples, amplitude * 32767.0)).astype("<i2").tobytes()


async def test_b43_each_frames_level_comes_with_its_probability_in_order() -> None:
    delivered: list[tuple[list[float], list[float]]] = []
    feed = VadFeed(VadBatcher(CountingVad()), lambda p, lv: delivered.append((p, lv)))  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        feed.submit(_pcm16(0.5, 700), tg)  # one frame and a part of the next
        feed.submit(_pcm16(0.5, 324) + _pcm16(0.0, 512), tg)
        await feed.settled()
    probabilities = [p for part, _ in delivered for p in part]
    levels = [lv for _, part in delivered for lv in part]
    assert len(probabilities) == len(levels) == 3
    assert levels[0] == pytest.approx(-6.02, abs=0.01)  # a constant half of full scale
    assert levels[1] == pytest.approx(-6.02, abs=0.01)  # joined across the two appends
    assert levels[2] == SILENT_DB  # digital silence: far below any floor


async def test_b43_frames_that_cannot_be_speech_carry_no_levels() -> None:
    delivered: list[tuple[list[float], list[float]]] = []
    feed = VadFeed(VadBatcher(CountingVad()), lambda p, lv: delivered.append((p, lv)))  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        feed.submit(_pcm16(0.05, 1024), tg)  # scored 0.05: noise, under any threshold
        await feed.settled()
    assert [len(p) for p, _ in delivered] == [2] and [lv for _, lv in delivered] == [[]]
