"""The official `openai` SDK's realtime client (GA) works against /v1/realtime."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from tests.transport.conftest import LiveServer

openai = pytest.importorskip("openai")


def _tone_b64(ms: int) -> str:
    pcm = (np.sin(np.arange(ms * 24) / 5.0) * 8000).astype("<i2").tobytes()  # 24 kHz
    return base64.b64encode(pcm).decode()


def test_openai_sdk_realtime_client_completes_a_turn(live_server: LiveServer) -> None:
    live_server.script.say("hello from the sdk").reply("Hello back.")

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(
            api_key="sk-local",
            base_url=live_server.url + "/v1",
            websocket_base_url=live_server.url.replace("http://", "ws://") + "/v1",
        )
        seen: list[str] = []
        async with client.realtime.connect(model="joyai") as conn:
            await conn.session.update(
                session={
                    "type": "realtime",
                    "output_modalities": ["audio"],
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "turn_detection": None,
                        }
                    },
                }
            )
            for _ in range(10):
                await conn.input_audio_buffer.append(audio=_tone_b64(40))
            await conn.input_audio_buffer.commit()
            await conn.response.create()
            async for event in conn:
                seen.append(event.type)
                if event.type == "response.done":
                    assert event.response.status == "completed"
                    break
                if event.type == "error":
                    raise AssertionError(event.error)
        await client.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(run(), 30))
    assert "session.updated" in seen
    assert "response.output_audio.delta" in seen
    assert seen[-1] == "response.done"
