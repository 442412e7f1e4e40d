"""Hosts of a multi-worker server, in one process: the shared `WorkerBoard` makes each
host's readiness the whole server's, and each admits its share of `max_sessions`."""

from __future__ import annotations

import os

import anyio
import pytest

from backends.scripted.backend import create_backend
from backends.scripted.script import Script
from runtime.channel import memory_channel_pair
from runtime.host import HostSettings, SessionHost
from runtime.workers import WorkerBoard, WorkerState
from spec.limits import Limits

pytestmark = pytest.mark.anyio


def _hosts(board: WorkerBoard, script: Script, max_sessions: int = 3) -> list[SessionHost]:
    settings = HostSettings(backend="scripted", limits=Limits(max_sessions=max_sessions))
    return [
        SessionHost(settings, backend=create_backend(script=script), board=board, worker=i)
        for i in range(board.size)
    ]


async def test_readiness_waits_for_every_worker_and_names_the_ones_not_ready() -> None:
    board = WorkerBoard(2)
    for index in range(2):
        board.starting(index)
        board.set_pid(index, 4200 + index)
    first, second = _hosts(board, Script())
    await first.start()

    readiness = first.readiness()
    assert not readiness.ready
    assert readiness.reason == "worker 1 (pid 4201): starting"
    assert (readiness.workers_ready, len(readiness.workers)) == (1, 2)
    assert readiness.worker.pid == os.getpid()
    # a host names itself with its own pid (the board's may be the supervisor's guess)
    assert second.readiness().reason == f"worker 1 (pid {os.getpid()}): starting"

    await second.start()
    assert first.readiness().ready and second.readiness().ready
    assert first.readiness().reason is None

    await second.close_sessions()
    assert board.status(1).state is WorkerState.SHUTTING_DOWN
    assert first.readiness().reason == "worker 1 (pid 4201): shutting down"
    board.exited(1)
    assert first.readiness().reason == "worker 1 (pid 4201): exited"
    await first.stop()
    await second.stop()


async def test_each_worker_admits_its_share_and_publishes_its_sessions() -> None:
    board = WorkerBoard(2)
    first, second = _hosts(board, Script(), max_sessions=3)
    for host in (first, second):
        await host.start()
    assert first.slots.capacity == second.slots.capacity == 2  # ceil(3 / 2)
    async with anyio.create_task_group() as tg:
        ends = []
        for _ in range(2):
            channel, send, receive = memory_channel_pair(float("inf"))
            tg.start_soon(first.serve, channel)
            ends.append((send, receive))
            await receive.receive()  # session.created
        refusal = first.refusal()
        assert refusal is not None
        assert "this worker is at its limit of 2 sessions" in refusal.message
        assert "max_sessions 3 over 2 workers" in refusal.message
        assert second.refusal() is None
        readiness = second.readiness()
        assert [w.sessions for w in readiness.workers] == [2, 0]
        assert readiness.sessions_all == 2
        for send, receive in ends:
            await send.aclose()
            await receive.aclose()
    assert board.status(0).sessions == 0
    for host in (first, second):
        await host.stop()


async def test_watch_measures_loop_lag_and_cpu_and_publishes() -> None:
    board = WorkerBoard(1)
    (host,) = _hosts(board, Script())
    await host.start()
    board.publish(0, WorkerState.STARTING, 7)  # stale: the next tick rewrites it
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.watch, 0.01)
        while host.metrics.value("joyduplex_event_loop_lag_seconds_count") < 2:
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert board.status(0).state is WorkerState.READY and board.status(0).sessions == 0
    assert host.metrics.value("process_cpu_seconds_total") > 0
    await host.stop()
