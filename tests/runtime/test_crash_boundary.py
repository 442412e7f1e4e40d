"""The crash boundary (docs/session-semantics.md section 10): an unexpected exception
inside one session ends that session alone, with `error server_error` and close 1011,
logged once with its cause; never a crash loop, never close 1000. And the near-valid
inputs that used to crash a session (a camera-only append at 24 kHz, `idle_timeout_s:
1e306`) are valid or refused."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from spec import events as ev
from tests.runtime.conftest import HANG_GUARD_S, Harness, eventually, tone

pytestmark = pytest.mark.anyio

JPEG = b"\xff\xd8\xff\xe0" + b"frame".ljust(60, b".")


def _runner(harness: Harness, index: int) -> Any:
    return list(harness.host._runners.values())[index]


def _crashes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "crashed" in r.getMessage()]


async def _closed(client: Any) -> int | None:
    await eventually("the 1011 close", lambda: client.channel.close_code is not None)
    return int(client.channel.close_code)


async def _assert_unharmed(client: Any) -> None:
    await client.send(ev.InputAudioBufferAppend(audio=tone(300)))
    await client.send(ev.InputAudioBufferCommit(create_response=True))
    assert (await client.until("response.done")).response.status == "completed"
    assert [e for e in client.seen if e.__struct_config__.tag == "error"] == []


async def test_b24_an_exception_in_receive_ends_only_its_session_with_server_error_and_1011(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = await harness.connect()
    bad = await harness.connect()
    protocol = _runner(harness, 1).protocol

    def explode(event: Any, now_ms: int) -> None:
        raise ValueError("array of sample points is empty")

    monkeypatch.setattr(protocol, "receive", explode)
    await bad.send(ev.SessionHeartbeat())
    error = await bad.until("error")
    assert (error.error.type, error.error.code) == ("server_error", "internal_error")
    assert await _closed(bad) == 1011
    await eventually("the session to end", lambda: harness.host.sessions == 1)
    [record] = _crashes(caplog)  # logged once, with its cause
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)
    assert harness.host.metrics.value("joyduplex_sessions_crashed_total") == 1
    await _assert_unharmed(good)


async def test_b24_an_exception_in_the_timer_is_one_crash_not_a_loop(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await harness.connect(config={"idle_timeout_s": 0.2})
    runner = _runner(harness, 0)
    calls = 0

    def overflow(now_ms: int) -> None:
        nonlocal calls
        calls += 1
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(runner.protocol, "handle_timeout", overflow)
    error = await client.until("error")  # the idle deadline fires into the broken handler
    assert error.error.type == "server_error"
    assert await _closed(client) == 1011
    await anyio.sleep(0.1)
    assert calls == 1
    assert len(_crashes(caplog)) == 1


async def test_b24_an_exception_handling_a_stage_result_closes_with_1011(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await harness.connect()
    protocol = _runner(harness, 0).protocol

    def explode(result: Any, now_ms: int) -> None:
        raise KeyError("impossible")

    monkeypatch.setattr(protocol, "backend_event", explode)
    await client.send(ev.InputAudioBufferAppend(audio=tone(300)))
    await client.send(ev.InputAudioBufferCommit(create_response=True))
    error = await client.until("error")
    assert (error.error.type, error.error.code) == ("server_error", "internal_error")
    assert await _closed(client) == 1011
    assert len(_crashes(caplog)) == 1


async def test_b24_a_camera_only_append_at_24_khz_is_valid(harness: Harness) -> None:
    """Reproduction: crashed the session (`array of sample points is empty`), close 1000."""
    client = await harness.connect(config={"input_audio_format": "pcm16", "sample_rate_hz": 24_000})
    await client.send(ev.InputAudioBufferAppend(video_frames=[JPEG]))
    await client.send(ev.SessionHeartbeat())
    await client.until("session.heartbeat_ack")
    await client.send(ev.InputAudioBufferAppend(audio=tone(300)[:9600], video_frames=[JPEG]))
    await client.send(ev.InputAudioBufferCommit(create_response=True))
    assert (await client.until("response.done")).response.status == "completed"
    assert "error" not in client.tags()
    assert client.channel.close_code is None


async def test_b24_an_idle_timeout_of_1e306_is_refused_and_the_session_lives_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Reproduction: an OverflowError in the timer task, in a crash loop."""
    client = await harness.connect()
    patch = ev.SessionPatch(idle_timeout_s=1e306)
    await client.send(ev.SessionUpdate(session=patch, event_id="u1"))
    error = await client.until("error")
    assert (error.error.code, error.error.param, error.error.event_id) == (
        "bad_event",
        "session.idle_timeout_s",
        "u1",
    )
    with anyio.fail_after(HANG_GUARD_S):
        await client.send(ev.SessionHeartbeat())
        await client.until("session.heartbeat_ack")
    assert client.channel.close_code is None
    assert _crashes(caplog) == []


async def test_b24_a_server_event_that_cannot_be_sent_is_a_crash_not_a_hang(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encoding failure used to pass for a peer that went away: the writer ended
    silently and the session hung with its slot held."""
    client = await harness.connect()
    real_send = client.channel.send

    async def send(event: Any) -> None:
        if event.__struct_config__.tag == "session.heartbeat_ack":
            raise TypeError("cannot encode")
        await real_send(event)

    monkeypatch.setattr(client.channel, "send", send)
    await client.send(ev.SessionHeartbeat())
    assert await _closed(client) == 1011
    await eventually("the session to end", lambda: harness.host.sessions == 0)
    assert len(_crashes(caplog)) == 1
