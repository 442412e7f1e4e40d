"""Admission at the measured capacity (B25): a host whose VAD was measured busy refuses
the session that would pass `shed_vad_busy`, says so once per shedding episode, and says
when the episode is over and how many were refused."""

from __future__ import annotations

import logging

import anyio
import pytest

from runtime import host as host_module
from spec.errors import ErrorCode
from spec.limits import Limits
from tests.runtime.conftest import eventually, hosted

pytestmark = pytest.mark.anyio


async def test_b25_a_host_at_its_measured_vad_capacity_refuses_and_logs_one_episode(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_module, "SHEDDING_QUIET_S", 0.0)
    caplog.set_level(logging.WARNING, logger="joyduplex.runtime")
    async with hosted(Limits(max_sessions=8, shed_vad_busy=0.72)) as h:
        host = h.host
        # measured: the VAD 60% busy with ten sessions, 6% each (no watcher runs here)
        host.overload.observe(0, 0, vad_busy=0.6, sessions=10)
        await h.connect()  # 0.6 + 2 x 0.06 = 0.72: room for one more
        assert host.refusal() is None
        await h.connect()
        for _ in range(3):  # 0.6 + 3 x 0.06 > 0.72
            refusal = host.refusal()
            assert refusal is not None and refusal.code is ErrorCode.RESOURCE_EXHAUSTED
            assert "measured capacity (VAD 60% busy, 2 sessions admitted since" in refusal.message
        starts = [r for r in caplog.messages if r.startswith("refusing new sessions")]
        assert len(starts) == 1
        # the watcher measures the idle VAD: the busy period leaves its window
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.watch, 0.01)
            await eventually("shedding over", lambda: host.overload.refusal() is None)
            await eventually(
                "the episode's end logged",
                lambda: any(m.startswith("admitting new sessions again") for m in caplog.messages),
            )
            tg.cancel_scope.cancel()
        end = next(m for m in caplog.messages if m.startswith("admitting new sessions again"))
        assert "3 refused meanwhile" in end
