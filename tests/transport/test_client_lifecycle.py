"""DuplexClient driven by the shared client machines (`mode=`), against a real server.

"Nothing more happens" is checked with a sentinel rather than a sleep: a heartbeat sent
after the hold is answered after everything the server sends for the events before it
(one session applies its client events in order and its outbound queue is FIFO), so once
its ack is here, an event caused by the hold would already be in the history.
"""

from __future__ import annotations

import asyncio

import numpy as np

from clients.duplex_client import DuplexClient
from spec.events import SessionHeartbeat
from tests.transport.conftest import LiveServer


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


async def _round_trip(client: DuplexClient) -> None:
    """A heartbeat and its ack: the server has answered everything sent before it."""
    await client.send(SessionHeartbeat(event_id=client.next_event_id()))
    await client.wait_for("session.heartbeat_ack", timeout=30)


def test_ptt_hold_commits_with_its_own_id_and_settles_after_the_reply(
    live_server: LiveServer,
) -> None:
    async def run() -> tuple[dict, list[str]]:
        async with DuplexClient.connect(live_server.ws_url, mode="ptt") as client:
            await client.wait_for("session.updated")
            await client.hold_to_talk(_tone(400))
            await client.wait_for("response.done", timeout=20)
            await client.wait_for("playback.acknowledged", timeout=10)
            await _round_trip(client)
            assert client.lifecycle is not None
            return client.lifecycle.snapshot(), [
                type(e).__struct_config__.tag for e in client.history
            ]

    snapshot, seen = asyncio.run(asyncio.wait_for(run(), 60))
    assert "input_audio_buffer.committed" in seen
    assert snapshot["watchdog"] == "disarmed"
    assert snapshot["pending_commits"] == []


def test_a_muted_hold_sends_no_commit(live_server: LiveServer) -> None:
    async def run() -> list[str]:
        async with DuplexClient.connect(live_server.ws_url, mode="ptt") as client:
            await client.wait_for("session.updated")
            await client.hold_to_talk(_tone(400), muted=True)
            await _round_trip(client)
            assert client.lifecycle is not None
            assert client.lifecycle.snapshot()["pending_commits"] == []
            return [type(e).__struct_config__.tag for e in client.history]

    seen = asyncio.run(asyncio.wait_for(run(), 40))
    assert seen[-1] == "session.heartbeat_ack"
    assert "input_audio_buffer.committed" not in seen
    assert "error" not in seen
