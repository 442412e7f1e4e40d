"""End to end against a real uvicorn on 127.0.0.1 with the scripted backend."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
import websockets

from backends.base import StageFailed
from clients.duplex_client import DuplexClient, ServerError
from spec.limits import Limits
from tests.transport.conftest import LiveServer, start_server
from transport.settings import ServerSettings

JPEG = b"\xff\xd8\xff\xe0" + b"frame".ljust(60, b".")


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


async def _speech_and_camera_turns(url: str, turns: int = 2) -> list[str]:
    statuses = []
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection=None)
        for _ in range(turns):
            await client.stream_audio(_tone(300), frames=[JPEG])
            await client.commit(create_response=True)
            result = await client.collect_response(timeout=20)
            assert result.errors == []
            assert result.audio
            statuses.append(result.status)
            await client.append_audio(b"", frames=[JPEG])
            await client.commit(create_response=True)
            result = await client.collect_response(timeout=20)
            assert result.errors == []
            statuses.append(result.status)
    return statuses


def test_b24_three_inputs_that_crashed_a_session_get_answers_and_the_session_lives_on(
    live_server: LiveServer,
) -> None:
    """Reproductions from a hostile-client run: a camera-only append after `session.update`
    to 24 kHz, a field nested 1,200 deep, and `idle_timeout_s: 1e306` each crashed the
    session, which then closed with 1000. Now: valid, `invalid_json`, `bad_event`; the
    session lives on."""
    frame = base64.b64encode(JPEG).decode()

    async def run() -> tuple[list[str], object]:
        answers = []
        async with websockets.connect(live_server.ws_url) as ws:
            await ws.recv()  # session.created
            await ws.send(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {
                            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}
                        },
                    }
                )
            )
            answers.append(json.loads(await ws.recv())["type"])
            for frame_json in (
                json.dumps({"type": "input_audio_buffer.append", "video_frames": [frame]}),
                '{"type":"session.heartbeat","junk":' + "[" * 1200 + "]" * 1200 + "}",
                '{"type":"session.update","session":{"idle_timeout_s":1e306}}',
            ):
                await ws.send(frame_json)
                await ws.send('{"type":"session.heartbeat"}')
                while (reply := json.loads(await ws.recv()))["type"] != "session.heartbeat_ack":
                    answers.append(
                        reply["error"]["code"] if reply["type"] == "error" else reply["type"]
                    )
                answers.append("ack")
            return answers, ws.close_code

    answers, close_code = asyncio.run(asyncio.wait_for(run(), 30))
    assert answers == ["session.updated", "ack", "invalid_json", "ack", "bad_event", "ack"]
    assert close_code is None


@pytest.mark.parametrize("sessions", [2, 8])
def test_concurrent_sessions_complete_speech_and_camera_turns(
    live_server: LiveServer, sessions: int
) -> None:
    async def run() -> list[list[str]]:
        return await asyncio.gather(
            *(_speech_and_camera_turns(live_server.ws_url) for _ in range(sessions))
        )

    results = asyncio.run(asyncio.wait_for(run(), 60))
    assert results == [["completed"] * 4] * sessions


def test_b24_garbage_and_a_failing_backend_do_not_disturb_other_sessions(
    live_server: LiveServer,
) -> None:
    async def garbage() -> list[str]:
        codes = []
        async with websockets.connect(live_server.ws_url) as ws:
            await ws.recv()  # session.created
            for frame in (
                "{",
                "[]",
                '{"type":"nope"}',
                '{"type":"playback.ack"}',
                '{"type":"input_audio_buffer.append","audio":"!!"}',
                '{"type":"input_audio_buffer.commit"}',
                "\x00" * 50,
            ):
                await ws.send(frame)
                reply = json.loads(await ws.recv())
                codes.append(reply["error"]["code"])
        return codes

    async def failing() -> str:
        async with DuplexClient.connect(live_server.ws_url) as client:
            await client.update_session(turn_detection=None)
            await client.stream_audio(_tone(300))
            await client.commit(create_response=True, event_id="doomed")
            result = await client.collect_response(timeout=20)
            return result.status

    async def run() -> tuple[list[str], str, list[list[str]]]:
        bad = asyncio.create_task(garbage())
        live_server.script.park("vlm")
        doomed = asyncio.create_task(failing())
        [victim] = await live_server.script.wait_parked("vlm")
        live_server.script.fail("vlm", StageFailed, request_id=victim)
        live_server.script.release("vlm")
        good = await asyncio.gather(
            *(_speech_and_camera_turns(live_server.ws_url) for _ in range(3))
        )
        return await bad, await doomed, good

    codes, doomed, good = asyncio.run(asyncio.wait_for(run(), 60))
    assert codes == [
        "invalid_json",
        "bad_event",
        "unknown_event",
        "bad_event",
        "bad_event",
        "input_audio_buffer_empty",
        "invalid_json",
    ]
    assert doomed == "failed"
    assert good == [["completed"] * 4] * 3


def test_upstream_duplex_client_spellings_complete_a_turn(live_server: LiveServer) -> None:
    async def run() -> list[str]:
        url = live_server.ws_url + "?duplex=1&model=x&autostart=0"
        seen: list[str] = []
        async with websockets.connect(url) as ws:

            async def send(obj: dict) -> None:
                await ws.send(json.dumps(obj))

            await send(
                {
                    "type": "session.update",
                    "session": {
                        "input_audio_format": "pcm16",
                        "output_audio_format": "pcm16",
                        "sample_rate_hz": 16000,
                        "turn_detection": None,
                        "modalities": ["audio"],
                        "extra_body": {"auto_response": True},
                    },
                }
            )
            import base64

            chunk = base64.b64encode(_tone(100)).decode()
            for i in range(3):
                await send(
                    {
                        "type": "input_audio_buffer.append",
                        "audio": chunk,
                        "format": "pcm16",
                        "sample_rate_hz": 16000,
                        "duration_ms": 100,
                        "audio_end_ms": 100 * (i + 1),
                        "is_speech": True,
                        "overlap_action": "listen",
                        "event_id": f"a{i}",
                    }
                )
            await send({"type": "session.heartbeat"})
            await send(
                {
                    "type": "input_audio_buffer.commit",
                    "final": True,
                    "response_create": True,
                    "event_id": "c1",
                }
            )
            response_id = item_id = None
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 20))
                seen.append(event["type"])
                assert event["type"] != "error", event
                if event["type"] == "response.output_audio.delta":
                    response_id, item_id = event["response_id"], event["item_id"]
                if event["type"] == "response.done":
                    break
            await send({"type": "session.event_ack", "server_event_seq": 3})
            await send(
                {
                    "type": "playback.ack",
                    "response_id": response_id,
                    "item_id": item_id,
                    "played_ms": 500,
                    "committed_ms": 500,
                }
            )
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 10))
                seen.append(event["type"])
                assert event["type"] != "error", event
                if event["type"] == "playback.acknowledged":
                    break
        return seen

    seen = asyncio.run(asyncio.wait_for(run(), 40))
    assert seen[0] == "session.created"
    assert "session.heartbeat_ack" in seen
    assert "input_audio_buffer.committed" in seen
    assert seen[-1] == "playback.acknowledged"


def test_health_readiness_and_metrics_endpoints(live_server: LiveServer) -> None:
    asyncio.run(asyncio.wait_for(_speech_and_camera_turns(live_server.ws_url, 1), 30))
    with httpx.Client(base_url=live_server.url) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["backend"] == "scripted"
        text = http.get("/metrics").text
    for needle in (
        "joyduplex_sessions_active 0",
        "joyduplex_sessions_total 1",
        'joyduplex_events_in_total{type="input_audio_buffer.append"}',
        'joyduplex_events_out_total{type="response.done"} 2',
        "joyduplex_time_to_first_audio_seconds_count 2",
        'joyduplex_stage_latency_seconds_count{stage="vlm"} 2',
        "joyduplex_audio_deltas_dropped_total 0",
    ):
        assert needle in text


def test_max_sessions_is_refused_with_resource_exhausted_and_close_1013() -> None:
    live, stop = start_server(ServerSettings(limits=Limits(max_sessions=1)))
    try:

        async def run() -> tuple[str, int | None]:
            async with websockets.connect(live.ws_url) as first:
                await first.recv()
                async with websockets.connect(live.ws_url) as second:
                    error = json.loads(await second.recv())
                    with pytest.raises(websockets.ConnectionClosed):
                        await second.recv()
                    return error["error"]["code"], second.close_code

        assert asyncio.run(run()) == ("resource_exhausted", 1013)
    finally:
        stop()


def test_api_key_via_header_subprotocol_or_query_and_refusal_with_http_401() -> None:
    """A missing or wrong key is answered 401 before the upgrade (B26; it was an `error`
    event and close 1008 after the upgrade)."""
    live, stop = start_server(ServerSettings(api_key="s3cret"))
    try:

        async def attempt(**kw: object) -> str:
            url = live.ws_url + kw.pop("query", "")  # type: ignore[operator]
            try:
                async with websockets.connect(url, **kw) as ws:  # type: ignore[arg-type]
                    return str(json.loads(await ws.recv())["type"])
            except websockets.InvalidStatus as exc:
                assert exc.response.status_code == 401
                return str(json.loads(bytes(exc.response.body or b""))["error"]["code"])

        async def run() -> list[str]:
            return [
                await attempt(),
                await attempt(additional_headers={"Authorization": "Bearer wrong"}),
                await attempt(additional_headers={"Authorization": "Bearer s3cret"}),
                await attempt(subprotocols=["realtime", "openai-insecure-api-key.s3cret"]),
                await attempt(query="?token=s3cret"),
            ]

        assert asyncio.run(run()) == [
            "unauthorized",
            "unauthorized",
            "session.created",
            "session.created",
            "session.created",
        ]
    finally:
        stop()


def test_disallowed_origin_is_refused_with_http_403() -> None:
    """An origin outside `allowed_origins` is answered 403 before the upgrade (B26; it was
    an `error` event after the upgrade)."""
    live, stop = start_server(ServerSettings(allowed_origins=("http://127.0.0.1:8000",)))
    try:

        async def run() -> tuple[int, str]:
            with pytest.raises(websockets.InvalidStatus) as info:
                async with websockets.connect(live.ws_url, origin="http://evil.example"):  # type: ignore[arg-type]
                    pass
            response = info.value.response
            body = json.loads(bytes(response.body or b""))
            return response.status_code, body["error"]["code"]

        assert asyncio.run(run()) == (403, "origin_not_allowed")
    finally:
        stop()


def test_an_oversize_frame_is_event_too_large_and_the_session_lives_on() -> None:
    live, stop = start_server(ServerSettings(limits=Limits(max_event_bytes=10_000)))
    try:

        async def run() -> tuple[str, str]:
            async with websockets.connect(live.ws_url) as ws:
                await ws.recv()
                await ws.send('{"type":"session.heartbeat","pad":"' + "x" * 20_000 + '"}')
                first = json.loads(await ws.recv())["error"]["code"]
                await ws.send('{"type":"session.heartbeat"}')
                second = json.loads(await ws.recv())["type"]
                return first, second

        assert asyncio.run(run()) == ("event_too_large", "session.heartbeat_ack")
    finally:
        stop()


def test_graceful_shutdown_closes_sessions_with_reason_shutdown_and_1001() -> None:
    live, stop = start_server()

    async def run() -> tuple[str, int | None]:
        async with websockets.connect(live.ws_url) as ws:
            await ws.recv()
            loop = asyncio.get_running_loop()
            loop.run_in_executor(None, stop)
            closed = json.loads(await asyncio.wait_for(ws.recv(), 20))
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            return closed["reason"], ws.close_code

    assert asyncio.run(run()) == ("shutdown", 1001)


def test_server_error_from_the_client_helper(live_server: LiveServer) -> None:
    async def run() -> str:
        async with DuplexClient.connect(live_server.ws_url) as client:
            with pytest.raises(ServerError) as info:
                await client.update_session(
                    turn_detection={"type": "semantic_vad", "eagerness": "eager"}
                )
            return info.value.code

    assert asyncio.run(run()) == "unsupported_turn_detection"


def test_b18_a_dead_engine_fails_readiness_and_new_sessions_get_resource_exhausted() -> None:
    """B18 at the edge: the VLM engine dies mid-session; that response fails once
    (EngineDead is a BackendUnavailable: resource_exhausted), /readyz turns 503 naming the
    stage, and a new session is refused with resource_exhausted and close 1013 instead of
    being admitted to a dead backend."""
    live, stop = start_server()
    try:
        live.script.kill("vlm")

        async def run() -> tuple[list[str], str, int | None]:
            async with DuplexClient.connect(live.ws_url) as client:
                await client.update_session(turn_detection=None)
                await client.stream_audio(_tone(300), frames=[JPEG])
                await client.commit(create_response=True)
                result = await client.collect_response(timeout=20)
                codes = [e.code for e in result.errors]
            async with websockets.connect(live.ws_url) as late:
                error = json.loads(await late.recv())
                with pytest.raises(websockets.ConnectionClosed):
                    await late.recv()
                return codes, error["error"]["message"], late.close_code

        codes, message, close_code = asyncio.run(asyncio.wait_for(run(), 30))
        assert codes == ["resource_exhausted"], codes
        assert close_code == 1013 and "stage vlm out of service" in message
        with httpx.Client(base_url=live.url) as http:
            ready = http.get("/readyz")
        assert ready.status_code == 503
        assert "stage vlm out of service" in ready.json()["reason"]
    finally:
        stop()


def test_b25_an_overloaded_server_sheds_new_sessions_with_1013_and_serves_the_admitted() -> None:
    """Overload is shed at admission, not shared: while the host measures overload, a new
    session gets resource_exhausted and close 1013; the session admitted before keeps
    working; when the load is back under the limits, sessions are admitted again."""
    live, stop = start_server()
    host = live.app.state.host
    gate = host.overload
    try:

        async def refused() -> tuple[str, str, int | None]:
            async with websockets.connect(live.ws_url) as late:
                error = json.loads(await late.recv())
                with pytest.raises(websockets.ConnectionClosed):
                    await late.recv()
                return error["error"]["code"], error["error"]["message"], late.close_code

        async def run() -> None:
            async with DuplexClient.connect(live.ws_url) as admitted:
                gate.loop_lag_limit_ms = 1e-9  # every wake-up of the watcher is now late
                gate.vad_limit_ms = -1.0
                while not gate.closed:  # the host's own watcher closes the gate
                    await asyncio.sleep(0.05)
                code, message, close_code = await refused()
                assert (code, close_code) == ("resource_exhausted", 1013)
                assert "overloaded" in message
                await admitted.update_session(turn_detection=None)
                await admitted.stream_audio(_tone(300), frames=[JPEG])
                await admitted.commit(create_response=True)
                result = await admitted.collect_response(timeout=20)
                assert result.status == "completed" and result.audio
            gate.loop_lag_limit_ms, gate.vad_limit_ms = 1e9, 1e9
            while gate.closed:
                await asyncio.sleep(0.05)
            async with DuplexClient.connect(live.ws_url) as again:
                await again.update_session(turn_detection=None)

        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        stop()


def test_session_created_names_the_asr_languages_and_a_pin_of_another_is_an_error(
    live_server: LiveServer,
) -> None:
    """The wire form of `capabilities` (a duplex extension of `session.created`) and of
    the refusal of a language the ASR does not know."""
    live_server.script.asr_languages = ("en",)

    async def run() -> tuple[dict[str, object], dict[str, object]]:
        async with websockets.connect(live_server.ws_url) as ws:
            created = json.loads(await ws.recv())
            pin = {"audio": {"input": {"transcription": {"language": "de"}}}}
            await ws.send(json.dumps({"type": "session.update", "event_id": "e1", "session": pin}))
            return created, json.loads(await ws.recv())

    created, answer = asyncio.run(asyncio.wait_for(run(), 30))
    assert created["type"] == "session.created"
    assert created["capabilities"] == {"input_languages": ["en"], "function_calling": True}
    assert answer["type"] == "error"
    assert {k: answer["error"][k] for k in ("type", "code", "param", "event_id")} == {
        "type": "invalid_request_error",
        "code": "unsupported_language",
        "param": "session.audio.input.transcription.language",
        "event_id": "e1",
    }
