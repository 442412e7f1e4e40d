"""The official `openai` SDK's realtime client (GA) works against /v1/realtime."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import pytest

from tests.openai_sdk import sdk_client
from tests.transport.conftest import LiveServer

openai = pytest.importorskip("openai")


def _tone_b64(ms: int) -> str:
    pcm = (np.sin(np.arange(ms * 24) / 5.0) * 8000).astype("<i2").tobytes()  # 24 kHz
    return base64.b64encode(pcm).decode()


def test_openai_sdk_realtime_client_completes_a_turn(live_server: LiveServer) -> None:
    live_server.script.say("hello from the sdk").reply("Hello back.")

    async def run() -> list[str]:
        client = sdk_client(live_server.url)
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


async def _sdk_call(url: str, **create: Any) -> tuple[Any, dict[str, Any]]:
    """Place a call with the SDK's `realtime.calls.create`; return (raw response,
    the `session.created` event off the `oai-events` channel)."""
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from clients.webrtc_call import MicrophoneTrack

    peer = RTCPeerConnection()
    mic = MicrophoneTrack()
    peer.addTrack(mic)
    channel = peer.createDataChannel("oai-events")
    opened = asyncio.Event()
    created: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    channel.on("open", opened.set)

    @channel.on("message")
    def _message(message: str | bytes) -> None:
        event = json.loads(message)
        if event.get("type") == "session.created" and not created.done():
            created.set_result(event)

    client = openai.AsyncOpenAI(api_key="sk-local", base_url=url + "/v1")
    try:
        await peer.setLocalDescription(await peer.createOffer())
        raw = await client.realtime.calls.with_raw_response.create(
            sdp=peer.localDescription.sdp, **create
        )
        answer = raw.parse().text
        assert "m=audio" in answer
        await peer.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await asyncio.wait_for(opened.wait(), 20)
        return raw, await asyncio.wait_for(created, 20)
    finally:
        mic.stop()
        await client.close()
        await peer.close()


def test_b36_the_openai_sdk_places_a_call(live_server: LiveServer) -> None:
    raw, created = asyncio.run(_sdk_call(live_server.url))
    assert raw.status_code == 201
    assert raw.headers["content-type"].startswith("application/sdp")
    location = raw.headers["location"]
    assert location.startswith("/v1/realtime/calls/")
    assert len(location) > len("/v1/realtime/calls/")
    assert created["session"]["id"]


def test_b36_the_openai_sdk_sends_the_session_with_the_offer(live_server: LiveServer) -> None:
    raw, created = asyncio.run(
        _sdk_call(live_server.url, session={"type": "realtime", "instructions": "be brief"})
    )
    assert raw.status_code == 201
    assert created["session"]["instructions"] == "be brief"


def test_openai_sdk_reads_user_and_assistant_items_as_messages(live_server: LiveServer) -> None:
    """Every message item on the wire says `"type": "message"`, its role and object, so
    the SDK's item union parses a user item and an assistant reply as messages; the
    response and session objects name their object and state."""
    live_server.script.reply("It is red.")

    async def run() -> dict[str, list[Any]]:
        client = sdk_client(live_server.url)
        seen: dict[str, list[Any]] = {}
        async with client.realtime.connect(model="joyai") as conn:
            await conn.session.update(
                session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
            )
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "What colour is it?"}],
                }
            )
            await conn.response.create()
            retrieved = False
            async for event in conn:
                seen.setdefault(event.type, []).append(event)
                if event.type == "error":
                    raise AssertionError(event.error)
                if event.type == "response.done" and not retrieved:
                    user_id = seen["conversation.item.added"][0].item.id
                    await conn.conversation.item.retrieve(item_id=user_id)
                    retrieved = True
                if event.type == "conversation.item.retrieved":
                    break
        await client.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(run(), 30))
    [user_added, reply_added] = seen["conversation.item.added"]
    for item in (user_added.item, seen["conversation.item.retrieved"][0].item):
        assert (item.type, item.role, item.object) == ("message", "user", "realtime.item")
    [done] = seen["response.done"]
    [created] = seen["response.created"]
    assert (created.response.object, created.response.status) == (
        "realtime.response",
        "in_progress",
    )
    assert (done.response.object, done.response.status) == ("realtime.response", "completed")
    session = seen["session.updated"][0].session
    assert (session.type, session.object) == ("realtime", "realtime.session")
    replies = [
        reply_added.item,
        seen["response.output_item.added"][0].item,
        seen["response.output_item.done"][0].item,
        done.response.output[0],
    ]
    for item in replies:
        assert (item.type, item.role, item.object) == ("message", "assistant", "realtime.item")
    assert done.response.output[0].content[0].transcript == "It is red."
    assert [e.item.type for e in seen["conversation.item.done"]] == ["message", "message"]
