"""The URL of the client's resume connection (docs/deploy.md "Resume behind a load
balancer"): `DuplexClient.connect(url, resume=state)` asks for `resume=1` and names the
session in `session_id=<id>`, URL-encoded, so that a balancer can route the resume by it;
a first connection names no session. A fake server on 127.0.0.1 records each handshake's
request path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request
from websockets.http11 import Response as HttpResponse

from clients.duplex_client import DuplexClient, ResumeState
from spec.events import SessionResumed
from tests.transport.test_client_fake_server import FakeRealtimeServer, Frame

#: a hang guard only, never a speed bound
HANG_GUARD_S = 30.0


def _resumed(event: dict[str, Any]) -> list[Frame]:
    return [
        SessionResumed(
            session_id=event["session_id"],
            resume_token="rotated",
            attachment_generation=2,
            replay_from_seq=event["last_received_server_event_seq"] + 1,
            last_server_event_seq=event["last_received_server_event_seq"],
        )
    ]


@dataclass
class PathRecordingServer(FakeRealtimeServer):
    """The fake server, also recording the request path (with its query) of every
    handshake; it answers `session.resume` with `session.resumed`."""

    paths: list[str] = field(default_factory=list)

    def _check_token(self, connection: ServerConnection, request: Request) -> HttpResponse | None:
        self.paths.append(request.path)
        return super()._check_token(connection, request)


def _query(path: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(path).query, keep_blank_values=True)


def _run(test: Any) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(HANG_GUARD_S):
            await test()

    asyncio.run(guarded())


def test_a_resume_connection_names_its_session_id_in_the_url_for_a_balancer() -> None:
    fake = PathRecordingServer(greeting=[], answers={"session.resume": _resumed})

    async def test() -> None:
        async with fake.running():
            state = ResumeState("sess_0a1b2c3d0007", "token-1", 5)
            async with DuplexClient.connect(fake.url, resume=state) as client:
                assert client.resume_state is not None
                assert client.resume_state.resume_token == "rotated"

    _run(test)
    (path,) = fake.paths
    assert urlsplit(path).path == "/v1/realtime"
    assert _query(path) == {"resume": ["1"], "session_id": ["sess_0a1b2c3d0007"]}
    (resume,) = fake.received_of("session.resume")
    assert resume["session_id"] == "sess_0a1b2c3d0007"  # the same id as in the URL


def test_a_resume_url_keeps_the_callers_query_and_url_encodes_an_odd_session_id() -> None:
    fake = PathRecordingServer(greeting=[], answers={"session.resume": _resumed})
    odd = "sess a&b=c/?#%"

    async def test() -> None:
        async with fake.running():
            url = fake.url.replace("/v1/realtime", "/v1/duplex") + "?model=m&token=k"
            async with DuplexClient.connect(url, resume=ResumeState(odd, "token-1")):
                pass

    _run(test)
    (path,) = fake.paths
    assert urlsplit(path).path == "/v1/duplex"
    assert _query(path) == {
        "model": ["m"],
        "token": ["k"],
        "resume": ["1"],
        "session_id": [odd],  # decoded back to exactly the id: nothing leaked into the URL
    }


def test_a_first_connection_names_no_session_and_asks_for_no_resume() -> None:
    fake = PathRecordingServer()

    async def test() -> None:
        async with fake.running(), DuplexClient.connect(fake.url) as client:
            await client.wait_for("session.created", timeout=HANG_GUARD_S)

    _run(test)
    (path,) = fake.paths
    assert _query(path) == {}
