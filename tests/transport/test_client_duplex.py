"""`DuplexClient` against a fake server on 127.0.0.1: typed events, responses, errors."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from clients.duplex_client import ConnectionLost, DuplexClient, ServerError
from spec.events import ErrorDetail, ResponseDone, SessionClosed, SessionCreated
from tests.transport.test_client_fake_server import (
    REPLY_AUDIO,
    REPLY_WORDS,
    USER_TRANSCRIPT,
    FakeRealtimeServer,
    error,
    failed_turn,
    quiet_turn,
    session_object,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def fake() -> AsyncIterator[FakeRealtimeServer]:
    async with FakeRealtimeServer().running() as server:
        yield server


def _pcm(ms: int, rate: int = 16_000) -> bytes:
    return bytes(range(256)) * (rate * ms // 1000 * 2 // 256) + b"\x00" * (
        rate * ms // 1000 * 2 % 256
    )


@pytest.mark.anyio
async def test_collect_response_assembles_audio_and_transcripts_of_a_spoken_turn(
    fake: FakeRealtimeServer,
) -> None:
    async with DuplexClient.connect(fake.url) as client:
        session = await client.update_session(turn_detection=None)
        assert session.id == "sess_1"
        await client.stream_audio(_pcm(100), chunk_ms=20)
        before_commit = time.monotonic()
        commit_id = await client.commit(create_response=True)
        result = await client.collect_response(timeout=30)
        collected = time.monotonic()

    assert result.response_id == "resp_1"
    assert result.status == "completed"
    assert result.item_id == "item_2"
    assert result.audio == b"".join(REPLY_AUDIO)
    assert result.audio_ms() == pytest.approx(300)
    assert result.transcript == "".join(REPLY_WORDS)
    assert result.user_transcripts == [USER_TRANSCRIPT]
    assert result.errors == []
    # measured from the commit to the first audio delta: inside the turn (same clock)
    assert result.time_to_first_audio_s is not None
    assert 0 <= result.time_to_first_audio_s <= collected - before_commit
    assert isinstance(result.events[-1], ResponseDone)
    assert client.session == session_object()
    # what the server received: ids evt_<n>, five 20 ms appends, then the commit
    assert [e["event_id"] for e in fake.received] == [f"evt_{n}" for n in range(1, 8)]
    appends = fake.received_of("input_audio_buffer.append")
    assert len(appends) == 5
    assert b"".join(base64.b64decode(a["audio"]) for a in appends) == _pcm(100)
    assert fake.received_of("input_audio_buffer.commit") == [
        {"type": "input_audio_buffer.commit", "event_id": commit_id, "create_response": True}
    ]


@pytest.mark.anyio
async def test_wait_for_times_out_cleanly_and_the_client_stays_usable(
    fake: FakeRealtimeServer,
) -> None:
    async with DuplexClient.connect(fake.url) as client:
        assert isinstance(await client.wait_for("session.created", timeout=30), SessionCreated)
        # the fake never sends response.done: the 0.05 s timeout must fire. The guard only
        # tells it from the default 10 s (a wrong timeout); it is no speed bound.
        with anyio.fail_after(5), pytest.raises(TimeoutError, match=r"response\.done"):
            await client.wait_for("response.done", timeout=0.05)
        consumed = len(client.history)
        await client.send_raw('{"type": "session.heartbeat"}')
        ack = await client.wait_for("session.heartbeat_ack", timeout=30)
        assert ack.event_id
        assert client.history[consumed:] == [ack]  # the timeout lost and skipped nothing


@pytest.mark.anyio
async def test_refused_session_update_raises_server_error_with_its_detail() -> None:
    server = FakeRealtimeServer()
    server.answers["session.update"] = lambda event: [
        error(
            "unsupported_turn_detection",
            "semantic_vad is not supported",
            param="turn_detection",
            event_id=event["event_id"],
        )
    ]
    async with server.running(), DuplexClient.connect(server.url) as client:
        with pytest.raises(ServerError) as info:
            await client.update_session(turn_detection={"type": "semantic_vad"})
    assert info.value.code == "unsupported_turn_detection"
    assert info.value.param == "turn_detection"
    assert info.value.event_id == "evt_1"
    assert "semantic_vad is not supported" in str(info.value)


@pytest.mark.anyio
async def test_error_before_the_response_starts_raises_server_error() -> None:
    server = FakeRealtimeServer()
    server.answers["input_audio_buffer.commit"] = lambda event: [
        error("input_audio_buffer_empty", "nothing to commit", event_id=event["event_id"])
    ]
    async with server.running(), DuplexClient.connect(server.url) as client:
        await client.commit(create_response=True)
        with pytest.raises(ServerError, match="input_audio_buffer_empty"):
            await client.collect_response(timeout=30)


@pytest.mark.anyio
async def test_stage_failure_after_the_response_started_is_reported_in_the_result() -> None:
    server = FakeRealtimeServer()
    server.answers["input_audio_buffer.commit"] = lambda _event: failed_turn()
    async with server.running(), DuplexClient.connect(server.url) as client:
        await client.commit(create_response=True)
        result = await client.collect_response(timeout=30)
    assert (result.status, result.status_reason) == ("failed", "stage_failed")
    assert [e.code for e in result.errors] == ["stage_failed"]
    assert result.audio == b""


@pytest.mark.anyio
async def test_quiet_commit_collects_a_listen_result_without_a_response() -> None:
    server = FakeRealtimeServer()
    server.answers["input_audio_buffer.commit"] = lambda _event: quiet_turn()
    async with server.running(), DuplexClient.connect(server.url) as client:
        await client.commit()
        result = await client.collect_response(timeout=30)
    assert (result.response_id, result.status) == (None, "listen")
    assert result.status_reason == "silence_or_noise"


@pytest.mark.anyio
async def test_unknown_event_types_and_bad_frames_are_skipped() -> None:
    server = FakeRealtimeServer()
    server.greeting = [
        '{"type": "session.from_the_future", "event_id": "event_0"}',
        "not json",
        *server.greeting,
    ]
    async with server.running(), DuplexClient.connect(server.url) as client:
        created = await client.wait_for("session.created", timeout=30)
        assert isinstance(created, SessionCreated)
        assert client.skipped == [
            '{"type": "session.from_the_future", "event_id": "event_0"}',
            "not json",
        ]
        assert client.history == [created]


@pytest.mark.anyio
async def test_token_travels_as_a_bearer_header_with_extra_headers() -> None:
    server = FakeRealtimeServer(required_token="sk-test")
    async with (
        server.running(),
        DuplexClient.connect(server.url, token="sk-test", headers={"X-Trace": "t1"}) as client,
    ):
        await client.wait_for("session.created", timeout=30)
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert server.headers[0]["X-Trace"] == "t1"


@pytest.mark.anyio
async def test_refused_handshake_raises_connection_lost() -> None:
    server = FakeRealtimeServer(required_token="sk-test")
    async with server.running():
        with pytest.raises(ConnectionLost, match="401"):
            async with DuplexClient.connect(server.url, token="wrong"):
                pass


@pytest.mark.anyio
async def test_events_end_when_the_server_closes_and_waiting_then_raises(
    fake: FakeRealtimeServer,
) -> None:
    async with DuplexClient.connect(fake.url) as client:
        await client.close_session("done")
        events = [event async for event in client.events()]
        assert isinstance(events[0], SessionCreated)
        assert events[-1] == SessionClosed(event_id=events[-1].event_id, reason="done")
        with pytest.raises(ConnectionLost):
            await client.wait_for("session.updated", timeout=1)
        with pytest.raises(ConnectionLost):
            await client.commit()


@pytest.mark.anyio
async def test_stream_audio_paces_chunks_at_real_time_with_frames_on_the_first(
    fake: FakeRealtimeServer,
) -> None:
    jpeg = b"\xff\xd8\xff\xe0fake-jpeg"
    async with DuplexClient.connect(fake.url) as client:
        start = time.monotonic()
        ids = await client.stream_audio(_pcm(100), realtime=True, frames=[jpeg])
        elapsed = time.monotonic() - start
        await client.update_session()  # a round trip: every append has arrived
    assert len(ids) == 5
    assert elapsed >= 0.079
    appends = fake.received_of("input_audio_buffer.append")
    assert [base64.b64decode(f) for f in appends[0]["video_frames"]] == [jpeg]
    assert all("video_frames" not in a for a in appends[1:])
    assert {a["sample_rate_hz"] for a in appends} == {16_000}


@pytest.mark.anyio
async def test_playback_ack_cancel_and_create_response_send_typed_events(
    fake: FakeRealtimeServer,
) -> None:
    async with DuplexClient.connect(fake.url) as client:
        await client.ack_playback("resp_1", "item_2", 120.0)
        await client.cancel_response("resp_1")
        await client.create_response(output_modalities=["text"])
        await client.append_audio(b"", frames=[b"\x89PNG..."], is_speech=False)
        assert (await client.update_session()).id == "sess_1"
    sent = [{k: v for k, v in e.items() if k != "event_id"} for e in fake.received[:4]]
    assert sent == [
        {"type": "playback.ack", "response_id": "resp_1", "item_id": "item_2", "played_ms": 120.0},
        {"type": "response.cancel", "response_id": "resp_1"},
        {"type": "response.create", "response": {"output_modalities": ["text"]}},
        {
            "type": "input_audio_buffer.append",
            "video_frames": [base64.b64encode(b"\x89PNG...").decode()],
            "is_speech": False,
        },
    ]


@pytest.mark.anyio
async def test_lifecycle_mode_event_ids_never_collide(fake: FakeRealtimeServer) -> None:
    """The client machines and the client's own senders share one allocator."""
    async with DuplexClient.connect(fake.url, mode="ptt") as client:
        await client.wait_for("session.updated")  # the machines sent session.update
        await client.update_session()  # the client's own
        await client.hold_to_talk(_pcm(100))  # the machines: appends and the commit
        await client.collect_response(timeout=5)  # the machines acknowledge playback
        await client.ack_playback("resp_1", "item_2", 1.0)  # the client's own
        await client.cancel_response("resp_1")
        await client.update_session()  # a round trip: everything sent has arrived
    ids = [event["event_id"] for event in fake.received]
    senders = {event["type"] for event in fake.received}
    assert {"session.update", "input_audio_buffer.commit", "playback.ack"} <= senders
    assert len(ids) == len(set(ids)), ids
    assert set(ids) == {f"evt_{n}" for n in range(1, len(ids) + 1)}  # one counter


def _reader_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if "_reader_task" in t.get_name()]


@pytest.mark.anyio
async def test_the_reader_lives_exactly_as_long_as_the_block(fake: FakeRealtimeServer) -> None:
    assert _reader_tasks() == []
    async with DuplexClient.connect(fake.url) as client:
        assert len(_reader_tasks()) == 1
        await client.update_session()
    assert _reader_tasks() == []
    with pytest.raises(ConnectionLost):
        await client.commit()  # the socket closed with the block


@pytest.mark.anyio
async def test_an_error_of_the_block_propagates_unwrapped_and_stops_the_reader(
    fake: FakeRealtimeServer,
) -> None:
    with pytest.raises(ServerError):
        async with DuplexClient.connect(fake.url) as client:
            raise ServerError(ErrorDetail(type="invalid_request_error", code="x", message="m"))
    assert _reader_tasks() == []
    assert client.history  # it did read while the block ran


@pytest.mark.anyio
async def test_a_failing_reader_ends_the_block_with_its_error(fake: FakeRealtimeServer) -> None:
    def broken(_message: str | bytes) -> None:
        raise RuntimeError("reader bug")

    with pytest.raises(BaseExceptionGroup) as info:
        async with DuplexClient.connect(fake.url) as client:
            await client.wait_for("session.created", timeout=5)
            client._decode = broken  # type: ignore[method-assign,assignment]
            await client.update_session()  # its answer reaches the broken reader
    assert [str(e) for e in info.value.exceptions] == ["reader bug"]
    assert _reader_tasks() == []
