from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import numpy as np
import pytest

from backends.scripted.backend import create_backend
from backends.scripted.script import Script
from runtime.channel import memory_channel_pair
from runtime.host import HostSettings, SessionHost
from runtime.stage_executor import StageTimeouts
from spec import events as ev
from spec.limits import Limits
from spec.session_config import validate_session

#: how long a test waits for something the runtime will do (seconds): a hang guard only,
#: never a speed bound, so it is generous for a loaded 2-core machine
HANG_GUARD_S = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def eventually(what: str, condition: Callable[[], object]) -> None:
    """Wait until `condition()` holds: an event the runtime will produce (a hang guard
    bounds the wait, nothing measures its duration)."""
    with anyio.move_on_after(HANG_GUARD_S):
        while not condition():
            await anyio.sleep(0.005)
    assert condition(), f"still waiting for {what} after {HANG_GUARD_S:g} s"


def tone(ms: int, amplitude: int = 8000) -> bytes:
    n = ms * 16
    return (np.sin(np.arange(n) / 5.0) * amplitude).astype("<i2").tobytes()


class Client:
    """The client end of an in-memory session."""

    def __init__(self, send: Any, receive: Any, channel: Any) -> None:
        self._send = send
        self._receive = receive
        self.channel = channel
        self.seen: list[Any] = []

    async def send(self, event: ev.ClientEvent) -> None:
        await self._send.send(event)

    async def next(self, timeout: float = HANG_GUARD_S) -> Any:
        with anyio.fail_after(timeout):
            event = await self._receive.receive()
        self.seen.append(event)
        return event

    async def until(
        self, tag: str, timeout: float = HANG_GUARD_S, where: Callable[[Any], bool] = lambda e: True
    ) -> Any:
        with anyio.fail_after(timeout):
            while True:
                event = await self.next(timeout)
                if event.__struct_config__.tag == tag and where(event):
                    return event

    def tags(self) -> list[str]:
        return [e.__struct_config__.tag for e in self.seen]

    async def close(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


class Harness:
    def __init__(self, script: Script, host: SessionHost, tg: Any) -> None:
        self.script = script
        self.host = host
        self.tg = tg
        self.clients: list[Client] = []

    async def connect(
        self, *, config: dict[str, Any] | None = None, buffer: float = float("inf")
    ) -> Client:
        channel, send, receive = memory_channel_pair(buffer)
        cfg = validate_session(config or {})
        self.tg.start_soon(lambda: self.host.serve(channel, config=cfg))
        client = Client(send, receive, channel)
        self.clients.append(client)
        await client.until("session.created")
        return client


@contextlib.asynccontextmanager
async def hosted(
    limits: Limits, *, timeouts: StageTimeouts | None = None, delegate: Any = None
) -> AsyncIterator[Harness]:
    """A started host on the scripted backend, its sessions in one task group; `delegate`:
    the backend's background model (B31), none by default."""
    script = Script()
    settings = HostSettings(backend="scripted", limits=limits)
    if timeouts is not None:
        settings = dataclasses.replace(settings, timeouts=timeouts)
    backend = create_backend(script=script)
    backend.delegate = delegate
    host = SessionHost(settings, backend=backend)
    await host.start()
    async with anyio.create_task_group() as tg:
        h = Harness(script, host, tg)
        yield h
        for client in h.clients:
            await client.close()
        tg.cancel_scope.cancel()
    await host.stop()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    # slow_consumer_s=0: some tests stop reading on purpose, for as long as a loaded
    # machine takes (tests/runtime/test_slow_consumer.py sets its own)
    async with hosted(Limits(max_outbound_events=32, max_sessions=8, slow_consumer_s=0)) as h:
        yield h
