"""The `/v1/realtime` websocket endpoint (alias `/v1/duplex`) and its channel adapter.

Order of a connection: check the origin and the credentials before the upgrade
(`transport/access_policy.py`) and answer a refusal with an HTTP response, 403
`origin_not_allowed` or 401 `unauthorized`, whose JSON body is the wire's `error` object
(where the server lacks the ASGI denial-response extension: a close before the accept,
which the server answers 403). Then accept (with the `realtime` subprotocol when the
client offers it, as browsers do), refuse with an `error` event and close 1013 when the
host cannot take the session (overloaded or not ready: clients read the event), else
hand the connection to the host until the session ends.

Resume (docs/session-semantics.md D27): sessions of `/v1/duplex`, and of `/v1/realtime`
when the client asks with `?resumable=1`, survive a dropped connection for the grace
period; a connection opened with `?resume=1` creates no session: its first event must be
`session.resume`, and it carries the resumed session (or is refused with the typed error
and close 1008).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from runtime.channel import ChannelClosed
from spec.errors import CloseCode, InvalidEvent, ProtocolError, ResumeExpected, ResumeRefused
from spec.events import SessionResume
from spec.session_config import validate_session
from transport.access_policy import Refusal, handshake_refusal
from transport.codec import decode_client_event, encode_server_event, error_event

if TYPE_CHECKING:
    from runtime.host import SessionHost
    from spec.events import ClientEvent, ServerEvent
    from transport.settings import ServerSettings

__all__ = ["WebSocketChannel", "realtime_endpoint"]

log = logging.getLogger("joyduplex.transport")

#: the ASGI extension that lets an application answer a websocket request with HTTP
_DENIAL_RESPONSE = "websocket.http.response"


class WebSocketChannel:
    """A Starlette websocket as a typed runtime channel."""

    def __init__(self, websocket: WebSocket, max_bytes: int) -> None:
        self.ws = websocket
        self.max_bytes = max_bytes
        self.peer_close_code: int | None = None

    async def receive(self) -> ClientEvent | ProtocolError | None:
        try:
            message = await self.ws.receive()
        except WebSocketDisconnect as exc:
            self.peer_close_code = exc.code
            return None
        except RuntimeError:
            return None
        if message["type"] == "websocket.disconnect":
            self.peer_close_code = message.get("code")
            return None
        # AMBIGUITY (docs/session-semantics.md, decision D29): a text frame that is not
        # UTF-8 never gets here: the websocket layer fails the connection with 1007
        data = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        try:
            return decode_client_event(data, max_bytes=self.max_bytes)
        except InvalidEvent as exc:
            return exc

    async def send(self, event: ServerEvent) -> None:
        text = encode_server_event(event).decode()  # type: ignore[arg-type]  # a failure: a bug
        try:
            await self.ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:  # the peer went away
            raise ChannelClosed from exc

    async def close(self, code: int, reason: str = "") -> None:
        if self.ws.application_state is WebSocketState.CONNECTED:
            # a peer that is gone already (a dropped resumable session's connection)
            with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):
                await self.ws.close(code, reason[:120])


async def _deny(websocket: WebSocket, refusal: Refusal) -> None:
    """Answer the upgrade request with `refusal` as HTTP, never upgrading it."""
    client = websocket.client
    log.info(
        "refused a session before the upgrade from %s: %d %s",
        f"{client.host}:{client.port}" if client else "?",
        refusal.status,
        refusal.code.value,
    )
    with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):  # the peer left
        if _DENIAL_RESPONSE in websocket.scope.get("extensions", {}):
            response = JSONResponse(
                refusal.body(), status_code=refusal.status, headers=refusal.headers()
            )
            await websocket.send_denial_response(response)
        else:  # a close before the accept: the server answers 403 without a body
            await websocket.close(int(CloseCode.POLICY_VIOLATION), refusal.message)


async def _refuse(websocket: WebSocket, exc: ProtocolError, code: CloseCode) -> None:
    event = error_event(exc, event_id="event_0")
    try:
        await websocket.send_text(encode_server_event(event).decode())
        await websocket.close(int(code), exc.message[:120])
    except (RuntimeError, WebSocketDisconnect):
        pass


_YES = ("1", "true", "on", "yes")


def _resumable(websocket: WebSocket) -> bool:
    """D27: the duplex endpoint's sessions are resumable; a GA client opts in."""
    if websocket.url.path.rstrip("/").endswith("/v1/duplex"):
        return True
    return websocket.query_params.get("resumable", "").lower() in _YES


def _resume_only(websocket: WebSocket) -> bool:
    return websocket.query_params.get("resume", "").lower() in _YES


async def _serve_resume(websocket: WebSocket, host: SessionHost, max_bytes: int) -> None:
    """A resume-only connection: its first event must be `session.resume`; then it
    carries that session until the session leaves it."""
    channel = WebSocketChannel(websocket, max_bytes)
    first = await channel.receive()
    if first is None:
        return
    try:
        if not isinstance(first, SessionResume):
            raise ResumeExpected(
                "a resume connection (`?resume=1`) must begin with session.resume",
                param="type",
                event_id=getattr(first, "event_id", None),
            )
        await host.resume(channel, first)
    except ResumeRefused as exc:
        exc.event_id = exc.event_id or first.event_id
        await _refuse(websocket, exc, CloseCode.POLICY_VIOLATION)


async def realtime_endpoint(websocket: WebSocket) -> None:
    host: SessionHost = websocket.app.state.host
    settings: ServerSettings = websocket.app.state.settings
    offered: list[str] = websocket.scope.get("subprotocols", [])
    denial = handshake_refusal(
        api_key=settings.api_key,
        allowed_origins=settings.allowed_origins,
        headers=websocket.headers,
        subprotocols=offered,
        query=websocket.query_params,
    )
    if denial is not None:
        host.metrics.session_refused()
        await _deny(websocket, denial)
        return
    await websocket.accept(subprotocol="realtime" if "realtime" in offered else None)
    if _resume_only(websocket):
        await _serve_resume(websocket, host, settings.limits.max_event_bytes)
        return
    refusal = host.refusal()
    if refusal is not None:
        host.metrics.session_refused()
        await _refuse(websocket, refusal, CloseCode.TRY_AGAIN_LATER)
        return
    config = settings.session_defaults
    model = websocket.query_params.get("model")
    if model:
        config = validate_session({"model": model}, config)
    channel = WebSocketChannel(websocket, settings.limits.max_event_bytes)
    try:
        await host.serve(channel, config=config, resumable=_resumable(websocket))
    except Exception:
        log.exception("session crashed")
        await channel.close(int(CloseCode.INTERNAL_ERROR), "internal error")
