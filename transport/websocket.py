"""The `/v1/realtime` websocket endpoint (alias `/v1/duplex`) and its channel adapter.

Order of a connection: check the origin and the credentials, accept (with the `realtime`
subprotocol when the client offers it, as browsers do), refuse with an `error` event and
a close code when the host cannot take the session (1008 auth/origin, 1013 overloaded or
not ready), else hand the connection to the host until the session ends.

Credentials are accepted as `Authorization: Bearer <key>`, as the browser subprotocol
`openai-insecure-api-key.<key>`, or as `?token=<key>`.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from typing import TYPE_CHECKING

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from runtime.channel import ChannelClosed
from spec.errors import CloseCode, ErrorCode, InvalidEvent, ProtocolError, RemoteProtocolError
from spec.session_config import validate_session
from transport.codec import decode_client_event, encode_server_event, error_event

if TYPE_CHECKING:
    from runtime.host import SessionHost
    from spec.events import ClientEvent, ServerEvent
    from transport.settings import ServerSettings

__all__ = ["WebSocketChannel", "realtime_endpoint"]

log = logging.getLogger("joyduplex.transport")

_KEY_PROTOCOL = "openai-insecure-api-key."


class WebSocketChannel:
    """A Starlette websocket as a typed runtime channel."""

    def __init__(self, websocket: WebSocket, max_bytes: int) -> None:
        self.ws = websocket
        self.max_bytes = max_bytes

    async def receive(self) -> ClientEvent | ProtocolError | None:
        try:
            message = await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
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
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await self.ws.close(code, reason[:120])


def _offered_key(websocket: WebSocket) -> str | None:
    auth = websocket.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    protocols: list[str] = websocket.scope.get("subprotocols", [])
    for protocol in protocols:
        if protocol.startswith(_KEY_PROTOCOL):
            return protocol[len(_KEY_PROTOCOL) :]
    return websocket.query_params.get("token")


def _authorized(websocket: WebSocket, settings: ServerSettings) -> bool:
    if not settings.api_key:
        return True
    offered = _offered_key(websocket) or ""
    return hmac.compare_digest(offered.encode(), settings.api_key.encode())


async def _refuse(websocket: WebSocket, exc: ProtocolError, code: CloseCode) -> None:
    event = error_event(exc, event_id="event_0")
    try:
        await websocket.send_text(encode_server_event(event).decode())
        await websocket.close(int(code), exc.message[:120])
    except (RuntimeError, WebSocketDisconnect):
        pass


async def realtime_endpoint(websocket: WebSocket) -> None:
    host: SessionHost = websocket.app.state.host
    settings: ServerSettings = websocket.app.state.settings
    offered = websocket.scope.get("subprotocols", [])
    await websocket.accept(subprotocol="realtime" if "realtime" in offered else None)
    origin = websocket.headers.get("origin")
    if settings.allowed_origins and origin is not None and origin not in settings.allowed_origins:
        host.metrics.session_refused()
        exc = RemoteProtocolError(
            f"origin `{origin}` is not allowed", code=ErrorCode.ORIGIN_NOT_ALLOWED
        )
        await _refuse(websocket, exc, CloseCode.POLICY_VIOLATION)
        return
    if not _authorized(websocket, settings):
        host.metrics.session_refused()
        exc = RemoteProtocolError("missing or wrong API key", code=ErrorCode.UNAUTHORIZED)
        await _refuse(websocket, exc, CloseCode.POLICY_VIOLATION)
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
        await host.serve(channel, config=config)
    except Exception:
        log.exception("session crashed")
        await channel.close(int(CloseCode.INTERNAL_ERROR), "internal error")
