"""B36: a session over a WebRTC call (`POST /v1/realtime/calls`), against a real uvicorn on
127.0.0.1 with the scripted backend and an aiortc peer (`clients.webrtc_call`): Opus both
ways, events on the `oai-events` data channel, the refusals before any media, and calls
that end without their peer.

Every wait is for an event (with a generous timeout for a loaded machine); nothing here
asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from aiortc import RTCPeerConnection

from clients.duplex_client import DuplexClient
from clients.errors import HandshakeRefused
from clients.webrtc_call import MicrophoneTrack, open_call
from spec.events import OutputAudioBufferClear
from spec.limits import Limits
from tests.served_process import serve
from tests.transport.conftest import LiveServer, start_server
from transport.settings import ServerSettings, WebRtcSettings

KEY = "call-test-key"
#: a red picture for the camera track
RED = np.zeros((240, 320, 3), dtype=np.uint8)
RED[..., 0] = 220


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


def _types(history: list[Any]) -> list[str]:
    return [str(type(e).__struct_config__.tag) for e in history]


async def _until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    with_deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > with_deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def _spoken_turn(client: DuplexClient, speak: Any) -> tuple[list[str], str]:
    await client.update_session(turn_detection=None)
    await speak(_tone(400))
    await client.commit(create_response=True)
    result = await client.collect_response(timeout=30)
    assert result.errors == []
    assert result.status == "completed"
    return result.user_transcripts, result.transcript


def test_b36_a_spoken_turn_over_a_call_equals_the_websockets(live_server: LiveServer) -> None:
    async def over_websocket() -> tuple[list[str], str]:
        async with DuplexClient.connect(live_server.ws_url) as client:

            async def speak(pcm: bytes) -> None:
                await client.stream_audio(pcm)

            return await _spoken_turn(client, speak)

    async def over_call() -> tuple[tuple[list[str], str], list[str], int, str | None]:
        async with open_call(live_server.url) as call:
            turn = await _spoken_turn(call, call.speak)
            await call.wait_for("output_audio_buffer.stopped", timeout=30)
            return turn, _types(call.history), len(call.heard), call.call_id

    websocket_turn = asyncio.run(over_websocket())
    call_turn, types, heard, call_id = asyncio.run(over_call())
    assert call_turn == websocket_turn
    assert call_id is not None and call_id.startswith("rtc_")
    # the reply came as Opus on the track, never as deltas on the data channel
    assert "response.output_audio.delta" not in types
    assert heard > 0
    assert "playback.acknowledged" not in types  # the call's own reports get no echo
    started, stopped, done = (
        types.index("output_audio_buffer.started"),
        types.index("output_audio_buffer.stopped"),
        types.index("response.done"),
    )
    assert types.index("response.content_part.added") < started < stopped
    assert done < stopped


def test_b36_the_answer_is_201_sdp_with_the_calls_location(live_server: LiveServer) -> None:
    async def place() -> httpx.Response:
        peer = RTCPeerConnection()
        peer.addTrack(MicrophoneTrack())
        peer.createDataChannel("oai-events")
        await peer.setLocalDescription(await peer.createOffer())
        try:
            async with httpx.AsyncClient() as http:
                return await http.post(
                    f"{live_server.url}/v1/realtime/calls",
                    content=peer.localDescription.sdp,
                    headers={"Content-Type": "application/sdp"},
                )
        finally:
            await peer.close()

    response = asyncio.run(place())
    assert response.status_code == 201
    assert response.headers["content-type"].startswith("application/sdp")
    assert response.headers["location"].startswith("/v1/realtime/calls/rtc_")
    assert "m=audio" in response.text and "a=sendrecv" in response.text


def test_b36_a_clear_keeps_in_history_only_the_audio_actually_sent(
    live_server: LiveServer,
) -> None:
    async def turns() -> tuple[str, list[str]]:
        async with open_call(live_server.url) as call:
            await call.update_session(turn_detection=None)
            await call.speak(_tone(400))
            await call.commit(create_response=True)
            result = await call.collect_response(timeout=30)
            if "output_audio_buffer.started" not in _types(call.history):
                await call.wait_for("output_audio_buffer.started", timeout=30)
            # some reply audio went out, and a microphone packet carried its position
            await _until(lambda: len(call.packets) > 10, "reply packets")
            await call.speak(_tone(60))
            await call.send(OutputAudioBufferClear(event_id="evt_clear"))
            await call.wait_for("output_audio_buffer.cleared", timeout=30)
            await call.speak(_tone(400))
            await call.commit(create_response=True)
            await call.collect_response(timeout=30)
            return result.transcript, _types(call.history)

    full, types = asyncio.run(turns())
    cleared = types.index("output_audio_buffer.cleared")
    assert (
        "output_audio_buffer.stopped"
        not in types[cleared : types.index("response.created", cleared)]
    )
    request: Any = live_server.script.requests_of("vlm")[-1]
    heard = [t.text for t in request.context.history if t.role == "assistant"]
    assert heard and full.startswith(heard[0]) and len(heard[0]) < len(full)


def test_b36_the_camera_track_reaches_the_frame_path(live_server: LiveServer) -> None:
    live_server.script.prepares_frames = True  # the VLM is handed each frame that arrives

    async def turn() -> None:
        async with open_call(live_server.url, camera=RED) as call:
            await call.wait_for("session.created", timeout=30)
            await _until(lambda: len(live_server.script.prepared_frames) > 0, "a camera frame")

    asyncio.run(turn())
    jpeg = live_server.script.prepared_frames[0]
    assert jpeg.startswith(b"\xff\xd8")  # a JPEG, as `video_frames` carries


def test_b36_the_offers_session_object_configures_the_session(live_server: LiveServer) -> None:
    async def created() -> Any:
        async with open_call(
            live_server.url, session={"type": "realtime", "instructions": "be brief"}
        ) as call:
            return await call.wait_for("session.created", timeout=30)

    assert asyncio.run(created()).session.instructions == "be brief"


def _post(url: str, body: bytes | str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/realtime/calls",
        content=body,
        headers={"Content-Type": "application/sdp", **headers},
    )


def test_b36_an_offer_that_cannot_be_used_is_refused_400(live_server: LiveServer) -> None:
    for body, ctype in (
        ("not sdp at all", "application/sdp"),
        ("v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", "application/sdp"),
        ("{}", "application/json"),
    ):
        response = _post(live_server.url, body, **{"Content-Type": ctype})
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "invalid_offer"
    bad_session = httpx.post(
        f"{live_server.url}/v1/realtime/calls",
        files={
            "sdp": (None, "v=0", "application/sdp"),
            "session": (None, "[1]", "application/json"),
        },
    )
    assert bad_session.status_code == 400
    assert bad_session.json()["error"]["code"] == "invalid_offer"


def test_b36_key_origin_and_capacity_are_checked_before_any_media() -> None:
    settings = replace(
        ServerSettings(backend="scripted"), api_key=KEY, limits=Limits(max_sessions=1)
    )
    live, stop = start_server(settings)
    try:
        wrong_key = _post(live.url, "v=0", Authorization="Bearer nope")
        assert wrong_key.status_code == 401
        assert wrong_key.json()["error"]["code"] == "unauthorized"
        origin = _post(
            live.url, "v=0", Authorization=f"Bearer {KEY}", Origin="https://evil.example"
        )
        assert origin.status_code == 403
        assert origin.json()["error"]["code"] == "origin_not_allowed"

        async def beyond_capacity() -> tuple[int, str]:
            async with open_call(live.url, token=KEY) as call:
                await call.wait_for("session.created", timeout=30)
                with pytest.raises(HandshakeRefused) as refused:
                    async with open_call(live.url, token=KEY):
                        pass
                return refused.value.status, str(refused.value.error_code)

        status, code = asyncio.run(beyond_capacity())
        assert (status, code) == (503, "resource_exhausted")
    finally:
        stop()


def test_b36_offers_that_arrive_together_past_capacity_are_refused_not_answered() -> None:
    # Regression: every concurrent offer passed admission before any of their sessions
    # took its slot, so the one past capacity was answered 201 and then its session was
    # refused with no data channel to say so: its peer waited out its setup timeout.
    settings = replace(ServerSettings(backend="scripted"), limits=Limits(max_sessions=2))
    live, stop = start_server(settings)
    try:

        async def offer(http: httpx.AsyncClient) -> int:
            peer = RTCPeerConnection()
            peer.addTrack(MicrophoneTrack())
            peer.createDataChannel("oai-events")
            try:
                await peer.setLocalDescription(await peer.createOffer())
                response = await http.post(
                    f"{live.url}/v1/realtime/calls",
                    content=peer.localDescription.sdp,
                    headers={"Content-Type": "application/sdp"},
                )
                return response.status_code
            finally:
                await peer.close()

        async def together() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as http:
                return sorted(await asyncio.gather(*(offer(http) for _ in range(6))))

        assert asyncio.run(together()) == [201, 201, 503, 503, 503, 503]
    finally:
        stop()


def _sessions(url: str) -> int:
    return int(httpx.get(f"{url}/readyz").json()["sessions"])


def test_b36_a_call_whose_peer_never_connects_frees_its_slot() -> None:
    settings = replace(
        ServerSettings(backend="scripted"), webrtc=WebRtcSettings(setup_timeout_s=1.0)
    )
    live, stop = start_server(settings)
    try:

        async def offer_only() -> None:
            peer = RTCPeerConnection()
            peer.addTrack(MicrophoneTrack())
            peer.createDataChannel("oai-events")
            await peer.setLocalDescription(await peer.createOffer())
            await peer.close()  # the answer is never applied: ICE never starts here
            async with httpx.AsyncClient() as http:
                response = await http.post(
                    f"{live.url}/v1/realtime/calls",
                    content=peer.localDescription.sdp,
                    headers={"Content-Type": "application/sdp"},
                )
            assert response.status_code == 201
            await _until(lambda: _sessions(live.url) == 1, "the call's session")
            await _until(lambda: _sessions(live.url) == 0, "the slot freed")
            # the registry forgets the call once its peer connection is closed, which
            # may come a moment after the session freed its slot
            await _until(lambda: live.app.state.calls.calls == {}, "the call forgotten")

        asyncio.run(offer_only())
    finally:
        stop()


def test_b36_a_call_whose_peer_goes_away_frees_its_slot(live_server: LiveServer) -> None:
    async def drop() -> None:
        async with open_call(live_server.url) as call:
            await call.wait_for("session.created", timeout=30)
            assert _sessions(live_server.url) == 1
            await call.peer.close()  # gone without a word
        await _until(lambda: _sessions(live_server.url) == 0, "the slot freed")
        await _until(lambda: live_server.app.state.calls.calls == {}, "the call forgotten")

    asyncio.run(drop())


def test_b36_hangup_ends_the_call(live_server: LiveServer) -> None:
    async def hang_up() -> None:
        async with open_call(live_server.url) as call:
            await call.wait_for("session.created", timeout=30)
            async with httpx.AsyncClient() as http:
                response = await http.post(
                    f"{live_server.url}/v1/realtime/calls/{call.call_id}/hangup"
                )
                assert response.status_code == 200
                unknown = await http.post(f"{live_server.url}/v1/realtime/calls/rtc_x/hangup")
                assert unknown.status_code == 404
                assert unknown.json()["error"]["code"] == "unknown_call"
            await _until(lambda: _sessions(live_server.url) == 0, "the slot freed")

    asyncio.run(hang_up())


def test_b36_a_sideband_websocket_sees_the_calls_events_and_drives_it(
    live_server: LiveServer,
) -> None:
    async def sideband() -> tuple[list[str], str]:
        async with open_call(live_server.url) as call:
            await call.wait_for("session.created", timeout=30)
            url = f"{live_server.ws_url}?call_id={call.call_id}"
            async with websockets.connect(url) as ws:
                await _until(
                    lambda: bool(live_server.app.state.calls.calls[call.call_id].channel.sidebands),
                    "the sideband",
                )
                update = {"instructions": "from the side"}
                await ws.send(
                    json.dumps({"type": "session.update", "event_id": "side_1", "session": update})
                )
                seen: list[str] = []
                while "session.updated" not in seen:
                    seen.append(json.loads(await ws.recv())["type"])
                updated = await call.wait_for("session.updated", timeout=30)
                unknown = f"{live_server.ws_url}?call_id=rtc_nope"
                async with websockets.connect(unknown) as other:
                    error = json.loads(await other.recv())
                return seen, f"{updated.session.instructions}|{error['error']['code']}"

    seen, result = asyncio.run(sideband())
    assert seen[-1] == "session.updated"
    assert result == "from the side|unknown_call"


@pytest.mark.slow
def test_b36_a_sideband_that_reaches_another_worker_is_relayed_to_the_call(
    tmp_path: Path,
) -> None:
    """`--workers 4`: the kernel hands each sideband websocket to any worker; twelve of
    them (all but surely some on another worker than the call's) each drive the call."""
    with serve(["--backend", "scripted"], tmp_path / "server.log", workers=4) as served:

        async def sidebands() -> list[str]:
            async with open_call(served.base) as call:
                await call.wait_for("session.created", timeout=60)
                got = []
                for n in range(12):
                    url = f"{served.ws_url}?call_id={call.call_id}"
                    async with websockets.connect(url) as ws:
                        update = {"instructions": f"side {n}"}
                        event = {
                            "type": "session.update",
                            "event_id": f"side_{n}",
                            "session": update,
                        }
                        await ws.send(json.dumps(event))
                        while True:
                            async with asyncio.timeout(60):
                                data = json.loads(await ws.recv())
                            assert data["type"] != "error", data
                            if data["type"] == "session.updated":
                                got.append(data["session"]["instructions"])
                                break
                return got

        assert asyncio.run(sidebands()) == [f"side {n}" for n in range(12)]
        assert "relayed to worker" in (tmp_path / "server.log").read_text()


def test_b36_joyduplex_client_speaks_its_turn_over_a_call(
    live_server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import wave

    import av

    from clients.cli import run_client
    from transport.call_media import jpeg_of

    wav = tmp_path / "in.wav"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(_tone(600))
    image = tmp_path / "red.jpg"
    image.write_bytes(jpeg_of(av.VideoFrame.from_ndarray(RED, format="rgb24")))
    reply = tmp_path / "reply.wav"
    status = asyncio.run(
        run_client(live_server.ws_url, wav, image, reply, None, timeout=30, transport="webrtc")
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "assistant:" in printed
    with wave.open(str(reply), "rb") as played:
        assert played.getframerate() == 48_000
        assert played.getnframes() > 0  # what the call's audio track played
