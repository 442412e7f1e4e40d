"""Session resume (B27, docs/session-semantics.md D27, D28) over real websockets on
127.0.0.1: a client that loses its connection mid-reply reconnects with `session.resume`
and receives the rest of the reply, nothing twice; the refusals, the replaced socket,
journal overflow, grace expiry, and a GA client that did not opt in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import websockets

from clients.duplex_client import DuplexClient, ResumeState, ServerError
from spec import events as ev
from spec.limits import Limits
from spec.tables import AttachmentState
from tests.transport.conftest import LiveServer, start_server
from transport.settings import ServerSettings

REPLY = "Here is a reply long enough to be cut in the middle by a dropped connection."
#: a hang guard only (a loaded 2-core machine), never a speed bound
HANG_GUARD_S = 30.0


def _resumption(runner: Any) -> Any:
    """The resumable session's journal and attachment (`core.resume`)."""
    assert runner.protocol.resume is not None
    return runner.protocol.resume


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


def _server(**limits: object) -> tuple[LiveServer, Callable[[], None]]:
    settings = ServerSettings(backend="scripted", limits=Limits(**limits))  # type: ignore[arg-type]
    return start_server(replace(settings, backend="scripted"))


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live, stop = _server(resume_grace_s=60.0)
    yield live
    stop()


def _duplex_url(live: LiveServer) -> str:
    return live.url.replace("http://", "ws://") + "/v1/duplex"


async def _eventually(what: str, condition: Callable[[], object]) -> None:
    """Wait for something the server will do (bounded by a hang guard only)."""
    async with asyncio.timeout(HANG_GUARD_S):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def _ask(client: DuplexClient) -> None:
    await client.update_session(turn_detection=None)
    await client.stream_audio(_tone(300), is_speech=True)
    await client.commit(create_response=True)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def _audio_of(events: list[ev.ServerEvent], response_id: str) -> bytes:
    return b"".join(
        e.delta
        for e in events
        if isinstance(e, ev.ResponseOutputAudioDelta) and e.response_id == response_id
    )


def test_b27_a_connection_dropped_mid_reply_resumes_with_the_whole_reply_and_nothing_twice(
    server: LiveServer,
) -> None:
    host = server.app.state.host
    server.script.reply(REPLY)
    server.script.reply(REPLY)

    async def test() -> None:
        url = _duplex_url(server)
        # the reference: the same scripted reply, received without a drop
        async with DuplexClient.connect(url) as control:
            await _ask(control)
            whole = (await control.collect_response(timeout=HANG_GUARD_S)).audio
        assert whole
        server.script.latency["tts"] = 0.05  # slow the reply so the drop lands inside it
        async with DuplexClient.connect(url) as first:
            await _ask(first)
            delta = await first.wait_for("response.output_audio.delta", timeout=HANG_GUARD_S)
            assert isinstance(delta, ev.ResponseOutputAudioDelta)
            response_id = delta.response_id
            await first.drop()  # no close frame: the transport just fails
            state = first.resume_state
            assert state is not None
            before = list(first.history)
        runner = host.session(state.session_id)
        assert runner is not None
        # the reply finishes while nobody is attached: its events wait in the journal
        await _eventually(
            "the detached session's reply to finish",
            lambda: any(isinstance(e, ev.ResponseDone) for e in _resumption(runner).journal.kept()),
        )
        assert _resumption(runner).attachment.state is AttachmentState.DETACHED
        async with DuplexClient.connect(url, resume=state) as second:
            await second.wait_for("response.done", timeout=HANG_GUARD_S)
            after = list(second.history)
            resumed = after[0]
            assert isinstance(resumed, ev.SessionResumed)
            assert resumed.replay_from_seq == state.last_server_event_seq + 1
        numbered = [e for e in before + after if e.server_event_seq is not None]
        seqs = [e.server_event_seq for e in numbered]
        assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
        ids = [e.event_id for e in before + after]
        assert len(ids) == len(set(ids))
        assert _audio_of(before, response_id) and _audio_of(after, response_id)
        assert _audio_of(before + after, response_id) == whole

    _run(test)


def test_b27_a_wrong_a_rotated_or_an_unknown_resume_is_refused_with_its_code(
    server: LiveServer,
) -> None:
    async def test() -> None:
        url = _duplex_url(server)
        async with DuplexClient.connect(url) as first:
            await first.wait_for("session.created")
            state = first.resume_state
            assert state is not None
            await first.drop()
        old_token = state.resume_token
        wrong = ResumeState(state.session_id, "not-the-token", state.last_server_event_seq)
        with pytest.raises(ServerError) as info:
            async with DuplexClient.connect(url, resume=wrong):
                pass
        assert info.value.code == "invalid_resume_token"
        async with DuplexClient.connect(url, resume=state) as second:
            assert second.resume_state is not None
            assert second.resume_state.resume_token != old_token  # rotated
            await second.drop()
        stale = ResumeState(state.session_id, old_token, 0)
        with pytest.raises(ServerError) as info:
            async with DuplexClient.connect(url, resume=stale):
                pass
        assert info.value.code == "invalid_resume_token"
        with pytest.raises(ServerError) as info:
            async with DuplexClient.connect(url, resume=ResumeState("sess_nope", "t")):
                pass
        assert info.value.code == "unknown_session"
        async with websockets.connect(url + "?resume=1") as ws:
            await ws.send(json.dumps({"type": "session.heartbeat"}))
            refusal = json.loads(await ws.recv())
        assert refusal["error"]["code"] == "resume_expected"

    _run(test)


def test_b27_a_resume_while_the_old_socket_is_attached_replaces_it(server: LiveServer) -> None:
    async def test() -> None:
        url = _duplex_url(server)
        async with DuplexClient.connect(url) as first:
            await first.wait_for("session.created")
            state = first.resume_state
            assert state is not None
            async with DuplexClient.connect(url, resume=state) as second:
                replaced = await first.wait_for("session.replaced", timeout=HANG_GUARD_S)
                assert isinstance(replaced, ev.SessionReplaced)
                assert replaced.attachment_generation == 2
                await second.send(ev.SessionHeartbeat())
                await second.wait_for("session.heartbeat_ack", timeout=HANG_GUARD_S)

    _run(test)


def test_b27_a_resume_from_before_an_overflowed_journal_gets_resync_required() -> None:
    live, stop = _server(resume_grace_s=60.0, max_resume_journal_bytes=2048)
    try:

        async def test() -> None:
            url = _duplex_url(live)
            async with DuplexClient.connect(url) as first:
                await _ask(first)
                await first.collect_response(timeout=HANG_GUARD_S)
                state = first.resume_state
                assert state is not None
                await first.drop()
            early = ResumeState(state.session_id, state.resume_token, 1)
            async with DuplexClient.connect(url, resume=early) as second:
                resync = await second.wait_for("session.resync_required")
                assert isinstance(resync, ev.SessionResyncRequired)
                assert resync.reason == "journal_overflow"
                await second.send(ev.SessionHeartbeat())
                await second.wait_for("session.heartbeat_ack", timeout=HANG_GUARD_S)

        _run(test)
    finally:
        stop()


def test_b27_without_a_resume_the_grace_expires_and_the_slot_is_freed() -> None:
    live, stop = _server(resume_grace_s=0.2, max_sessions=1)
    host = live.app.state.host
    try:

        async def test() -> None:
            url = _duplex_url(live)
            async with DuplexClient.connect(url) as first:
                await first.wait_for("session.created")
                state = first.resume_state
                assert state is not None
                await first.drop()
            await _eventually("the grace to expire", lambda: host.sessions == 0)
            assert host.metrics.value("joyduplex_session_resume_total", event="expired") == 1
            with pytest.raises(ServerError) as info:
                async with DuplexClient.connect(url, resume=state):
                    pass
            assert info.value.code == "unknown_session"
            async with DuplexClient.connect(url) as again:  # the one slot is free again
                await again.wait_for("session.created")

        _run(test)
    finally:
        stop()


def test_b27_a_ga_client_that_did_not_opt_in_sees_no_resume_fields() -> None:
    live, stop = _server(resume_grace_s=60.0)
    host = live.app.state.host
    try:

        async def test() -> None:
            async with websockets.connect(live.ws_url) as ws:
                created = json.loads(await ws.recv())
                await ws.send(json.dumps({"type": "session.heartbeat"}))
                ack = json.loads(await ws.recv())
                ws.transport.abort()  # a drop: without resume the session ends with it
            assert created["type"] == "session.created"
            for frame in (created, ack):
                assert "server_event_seq" not in frame
                assert "resume_token" not in frame and "attachment_generation" not in frame
            await _eventually("the session to end with its socket", lambda: host.sessions == 0)
            assert host.metrics.value("joyduplex_session_resume_total", event="detached") == 0
            async with DuplexClient.connect(live.ws_url + "?resumable=1") as opted:
                created_event = await opted.wait_for("session.created")
                assert created_event.server_event_seq == 1
                assert opted.resume_state is not None

        _run(test)
    finally:
        stop()


def test_b27_a_normal_close_ends_a_resumable_session_at_once(server: LiveServer) -> None:
    host = server.app.state.host

    async def test() -> None:
        async with DuplexClient.connect(_duplex_url(server)) as client:
            await client.wait_for("session.created")
            assert host.sessions == 1
        # the client closed with 1000: a goodbye, not a failure, so nothing waits for it
        await _eventually("the session to end", lambda: host.sessions == 0)
        assert host.metrics.value("joyduplex_session_resume_total", event="detached") == 0

    _run(test)


def test_b38_a_connection_dropped_during_a_calls_arguments_resumes_with_the_whole_call(
    server: LiveServer,
) -> None:
    host = server.app.state.host
    arguments = json.dumps({"city": "Paris", "unit": "celsius"})
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    server.script.call("get_weather", arguments, chunk=2).reply("It is sunny.")

    async def test() -> None:
        url = _duplex_url(server)
        server.script.latency["vlm"] = 0.05  # slow the arguments so the drop lands inside
        async with DuplexClient.connect(url) as first:
            await first.update_session(tools=[weather])
            await _ask(first)
            await first.wait_for("response.function_call_arguments.delta", timeout=HANG_GUARD_S)
            await first.drop()
            state = first.resume_state
            assert state is not None
            before = list(first.history)
        runner = host.session(state.session_id)
        assert runner is not None
        await _eventually(
            "the detached session's call to finish",
            lambda: any(isinstance(e, ev.ResponseDone) for e in _resumption(runner).journal.kept()),
        )
        server.script.latency["vlm"] = 0.01
        async with DuplexClient.connect(url, resume=state) as second:
            done = await second.wait_for("response.done", timeout=HANG_GUARD_S)
            assert isinstance(done, ev.ResponseDone)
            [call] = done.response.output
            assert (call.type, call.arguments) == ("function_call", arguments)
            # the deltas before the drop and the replayed ones make the arguments, once each
            streamed = "".join(
                e.delta
                for e in before + list(second.history)
                if isinstance(e, ev.ResponseFunctionCallArgumentsDelta)
            )
            assert streamed == arguments
            # the call is answered over the new connection, and the follow-up speaks
            await second.send(
                ev.ConversationItemCreate(
                    item=ev.ConversationItem(
                        type="function_call_output", call_id=call.call_id, output="sunny"
                    )
                )
            )
            await second.create_response()
            reply = await second.collect_response(timeout=HANG_GUARD_S)
            assert reply.transcript == "It is sunny."

    _run(test)
