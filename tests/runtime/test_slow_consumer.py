"""A client that stops reading is closed with 1008 ("slow consumer") and its session
slot is freed (docs/session-semantics.md section 10): it can no longer hold a slot
forever, even with an idle timeout (whose close it never reads either)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from spec import events as ev
from spec.limits import Limits
from tests.runtime.conftest import Harness, eventually, hosted

pytestmark = pytest.mark.anyio


@pytest.fixture
async def strict() -> AsyncIterator[Harness]:
    limits = Limits(max_outbound_events=8, max_sessions=2, slow_consumer_s=0.3, idle_timeout_s=1)
    async with hosted(limits) as h:
        yield h


async def test_a_client_that_never_reads_is_closed_1008_and_its_slot_freed(
    strict: Harness,
) -> None:
    """Reproduction: 3 clients that never read held 3 sessions for 100 s with
    `idle_timeout_s = 5`, locking everyone out at `max_sessions`."""
    stuck = [await strict.connect(buffer=0) for _ in range(2)]
    assert strict.host.refusal() is not None  # full
    for client in stuck:  # each answer waits for a reader that never comes
        await client.send(ev.SessionHeartbeat())
    await eventually("the slow consumers to be closed", lambda: strict.host.sessions == 0)
    assert [c.channel.close_code for c in stuck] == [1008, 1008]
    assert [c.channel.close_reason for c in stuck] == ["slow consumer"] * 2
    assert strict.host.metrics.value("joyduplex_slow_consumers_total") == 2
    assert strict.host.refusal() is None  # the slots are free again
    client = await strict.connect()
    await client.send(ev.SessionHeartbeat())
    await client.until("session.heartbeat_ack")


async def test_a_client_that_reads_is_never_a_slow_consumer(strict: Harness) -> None:
    client = await strict.connect(buffer=0)
    for _ in range(20):
        await client.send(ev.SessionHeartbeat())
        await client.until("session.heartbeat_ack")
        await anyio.sleep(0.02)
    assert client.channel.close_code is None
