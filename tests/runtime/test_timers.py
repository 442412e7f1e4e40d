"""One timer facility per process: deadlines fire in order, an earlier deadline wakes the
timer at once, a failing owner does not stop the others, and sessions served by a host
whose timers run use them instead of a task of their own."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest
import websockets

from runtime.timers import Timers
from tests.transport.conftest import start_server

pytestmark = pytest.mark.anyio


class Owner:
    def __init__(self, name: str, log: list[str], *, fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def timer_fired(self, at: float) -> None:
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError("a session's bug")


async def test_deadlines_fire_in_order_and_an_earlier_one_wakes_the_timer() -> None:
    timers = Timers()
    log: list[str] = []
    done = anyio.Event()

    class Last(Owner):
        def timer_fired(self, at: float) -> None:
            super().timer_fired(at)
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(timers.run)
        now = anyio.current_time()
        timers.schedule(Owner("late", log), now + 3600)  # the timer sleeps towards this
        await anyio.sleep(0)
        timers.schedule(Owner("b", log, fail=True), now + 0.02)  # earlier: wakes it
        timers.schedule(Owner("a", log), now + 0.01)
        timers.schedule(Last("c", log), now + 0.03)
        with anyio.fail_after(30):
            await done.wait()
        tg.cancel_scope.cancel()
    assert log == ["a", "b", "c"]  # b's failure did not stop c
    assert len(timers) == 1 and not timers.running


def test_b25_a_hosted_session_uses_the_process_timers_for_its_idle_timeout() -> None:
    live, stop = start_server()
    timers = live.app.state.host.timers
    try:

        async def run() -> str:
            async with websockets.connect(live.ws_url) as ws:
                await ws.recv()  # session.created
                await ws.send(
                    json.dumps({"type": "session.update", "session": {"idle_timeout_s": 0.2}})
                )
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] == "session.closed":
                        return str(event["reason"])

        fired_before = timers.fired
        assert timers.running
        assert asyncio.run(asyncio.wait_for(run(), 30)) == "idle_timeout"
        assert timers.fired > fired_before
    finally:
        stop()
