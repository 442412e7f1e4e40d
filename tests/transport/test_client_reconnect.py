"""B42 from Python: `resume_after_drop` brings `DuplexClient` back into its session on the
same resume link as the browser (backoff, bounds, refusals), and a replay is applied once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from clients.duplex_client import DuplexClient, ResumeState
from clients.errors import SessionLost
from clients.reconnect import resume_after_drop
from spec import events as ev
from spec.tables.client_constants import RESUME_GIVE_UP_MS, RESUME_MAX_ATTEMPTS
from tests.transport.conftest import LiveServer
from tests.transport.test_resume import HANG_GUARD_S, _ask, _audio_of, _server


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live, stop = _server(resume_grace_s=60.0)
    yield live
    stop()


def _url(live: LiveServer) -> str:
    return live.url.replace("http://", "ws://") + "/v1/realtime?resumable=1"


def test_b42_python_client_resumes_a_drop_mid_reply_and_gets_every_event_once(
    server: LiveServer,
) -> None:
    async def test() -> None:
        server.script.latency["tts"] = 0.05  # the drop lands inside the reply
        async with DuplexClient.connect(_url(server)) as first:
            await _ask(first)
            delta = await first.wait_for("response.output_audio.delta", timeout=HANG_GUARD_S)
            assert isinstance(delta, ev.ResponseOutputAudioDelta)
            await first.drop()
            state = first.resume_state
            assert state is not None
            before = list(first.history)
        async with resume_after_drop(_url(server), state) as second:
            await second.wait_for("response.done", timeout=HANG_GUARD_S)
            after = list(second.history)
            assert second.resume_state is not None
            assert second.resume_state.session_id == state.session_id
        seqs = [e.server_event_seq for e in before + after if e.server_event_seq is not None]
        assert seqs == list(range(1, len(seqs) + 1))  # each event once, in order
        assert _audio_of(before, delta.response_id) and _audio_of(after, delta.response_id)

    asyncio.run(test())


def test_b42_python_client_loses_a_session_the_server_no_longer_holds() -> None:
    live, stop = _server(resume_grace_s=0.1)
    try:

        async def test() -> None:
            async with DuplexClient.connect(_url(live)) as first:
                await first.wait_for("session.created")
                state = first.resume_state
                assert state is not None
                await first.drop()
            await asyncio.sleep(0.5)  # past the grace
            with pytest.raises(SessionLost, match="unknown_session"):
                async with resume_after_drop(_url(live), state):
                    pass

        asyncio.run(test())
    finally:
        stop()


def test_b42_python_client_gives_up_when_the_network_never_returns() -> None:
    with socket.socket() as closed:  # a port nobody listens on: every attempt is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    clock = [0.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds * 1000)
        clock[0] += seconds * 1000

    async def test() -> None:
        state = ResumeState("sess_gone", "tok", 7)
        with pytest.raises(SessionLost, match="did not come back"):
            async with resume_after_drop(
                f"ws://127.0.0.1:{port}/v1/realtime",
                state,
                jitter=lambda: 0.5,
                clock=lambda: clock[0],
                sleep=sleep,
            ):
                pass

    asyncio.run(test())
    # refused at once, the attempts run out before the time does: the 20th failure is
    # the end
    assert len(waits) == RESUME_MAX_ATTEMPTS
    assert waits[1] == 2 * waits[0]  # the link's backoff doubles
    assert clock[0] < RESUME_GIVE_UP_MS
