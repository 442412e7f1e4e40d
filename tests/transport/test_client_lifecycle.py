"""DuplexClient driven by the shared client machines (`mode=`), against a real server."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.transport.conftest import LiveServer
from transport.client import DuplexClient


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


def test_ptt_hold_commits_with_its_own_id_and_settles_after_the_reply(
    live_server: LiveServer,
) -> None:
    async def run() -> tuple[dict, list[str]]:
        async with DuplexClient.connect(live_server.ws_url, mode="ptt") as client:
            await client.wait_for("session.updated")
            await client.hold_to_talk(_tone(400))
            await client.wait_for("response.done", timeout=20)
            await client.wait_for("playback.acknowledged", timeout=10)
            await asyncio.sleep(0.1)
            assert client.lifecycle is not None
            return client.lifecycle.snapshot(), [
                type(e).__struct_config__.tag for e in client.history
            ]

    snapshot, seen = asyncio.run(asyncio.wait_for(run(), 40))
    assert "input_audio_buffer.committed" in seen
    assert snapshot["watchdog"] == "disarmed"
    assert snapshot["pending_commits"] == []


def test_a_muted_hold_sends_no_commit(live_server: LiveServer) -> None:
    async def run() -> list[str]:
        async with DuplexClient.connect(live_server.ws_url, mode="ptt") as client:
            await client.wait_for("session.updated")
            await client.hold_to_talk(_tone(400), muted=True)
            await asyncio.sleep(0.3)
            return [type(e).__struct_config__.tag for e in client.history]

    seen = asyncio.run(asyncio.wait_for(run(), 20))
    assert "input_audio_buffer.committed" not in seen
    assert "error" not in seen
