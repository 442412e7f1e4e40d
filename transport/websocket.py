"""The `/v1/realtime` websocket endpoint (alias `/v1/duplex`) and its channel adapter.

Order of a connection: check the origin and the credentials before the upgrade
(`transport/access_policy.py`) and answer a refusal with an HTTP response, 403
`origin_not_allowed` or 401 `unauthorized`, whose JSON body is the wire's `error` object
(where the server lacks the ASGI denial-response extension: a close before the accept,
which the server answers 403). Then accept (with the `realtime` subprotocol when the
client offers it, as browsers do), refuse with an `error` event and close 1013 when the
host cannot take the session (overloaded or not ready: clients read the event), else
hand the connection to the host until the session ends.

Resume (docs/session-semantics.md D27): the sessions of the duplex dialect survive a
dropped connection for the grace period. The dialect is where upstream selects it:
`/v1/duplex`, `/v1/realtime?duplex=1` (or `true`, `on`), and every connection of a server
configured as a duplex deployment (`[server] duplex = true`); a GA client opts in with
`?resumable=1`. A connection opened with `?resume=1` creates no session: its first event
must be `session.resume`, and it carries the resumed session (or is refused with the
typed error and close 1008). With several worker processes, a resume whose session lives
in another worker is relayed to that worker (D39, `transport/worker_relay.py`).

Autostart (D37): `?autostart=0` makes the server wait for the client's first event
before it creates a session, as upstream: a `session.resume` resumes (as on `?resume=1`),
anything else creates the session, whose `session.created` comes first, and is then
handled in it. Without it the session starts at the upgrade, as before.

Rate limits and fairness (D38): every frame is charged to its connection's budget
(`core/connection_budget.py`, `[limits]` `max_events_per_s`, `max_bytes_per_s`) as it
arrives, before it is decoded; a frame over budget is never decoded but returned as a
`rate_limit_exceeded` refusal carrying its `event_id` (read by a bounded search, not a
decode), which the session answers with an `error` event. A connection refused
`max_rate_refusals` times within `rate_refusal_window_s` is closed 1008 "rate limit",
and its session ends or, if resumable, is detached, as for any connection that went away.
The channel yields to the event loop before each frame: uvicorn queues every frame of a
socket read and hands them over without suspending, so without it one connection's frames
would be decoded and handled back to back while every other session waited.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from core.connection_budget import ConnectionBudget
from runtime.channel import ChannelClosed
from spec.errors import CloseCode, InvalidEvent, ProtocolError, ResumeExpected, ResumeRefused
from spec.events import SessionResume
from spec.session_config import validate_session
from transport.access_policy import Refusal, handshake_refusal
from transport.call_sideband import attach_sideband
from transport.codec import (
    decode_client_event,
    encode_server_event,
    error_event,
    refused_event_id,
)
from transport.worker_relay import carry_resume, open_relay, relay_socket_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from runtime.host import SessionHost
    from spec.events import ClientEvent, ServerEvent
    from spec.limits import Limits
    from transport.settings import ServerSettings

__all__ = ["RATE_LIMIT_CLOSE", "WebSocketChannel", "realtime_endpoint"]

log = logging.getLogger("joyduplex.transport")

#: the ASGI extension that lets an application answer a websocket request with HTTP
_DENIAL_RESPONSE = "websocket.http.response"
#: the close reason of a connection that kept sending over its budget (with 1008)
RATE_LIMIT_CLOSE = "rate limit"


class WebSocketChannel:
    """A Starlette websocket as a typed runtime channel, each frame charged to `budget`
    (None: no rate limits) before it is decoded."""

    def __init__(
        self,
        websocket: WebSocket,
        max_bytes: int,
        budget: ConnectionBudget | None = None,
        on_rate_limit_close: Callable[[], None] | None = None,
    ) -> None:
        self.ws = websocket
        self.max_bytes = max_bytes
        self.budget = budget if budget is not None and budget.enabled else None
        self._on_rate_limit_close = on_rate_limit_close
        self.peer_close_code: int | None = None
        self._unread: ClientEvent | ProtocolError | None = None

    def unread(self, event: ClientEvent | ProtocolError) -> None:
        """Give back an event read before the session existed (`autostart=0`): the
        next `receive` returns it."""
        self._unread = event

    async def receive(self) -> ClientEvent | ProtocolError | None:
        if self._unread is not None:
            event, self._unread = self._unread, None
            return event
        # fairness: a frame uvicorn already queued is handed over without suspending, so
        # a flooding connection would otherwise run frame after frame while others wait
        await anyio.lowlevel.checkpoint()
        budget = self.budget
        if budget is not None and budget.abusive:
            await self._close_abusive(budget)
            return None
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
        if budget is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D38): a frame over its
            # connection's budget is refused before it is decoded, malformed or not
            refusal = budget.refusal(len(data), anyio.current_time())
            if refusal is not None:
                refusal.event_id = refused_event_id(data)
                return refusal
        try:
            return decode_client_event(data, max_bytes=self.max_bytes)
        except InvalidEvent as exc:
            return exc

    async def _close_abusive(self, budget: ConnectionBudget) -> None:
        """Close a connection that kept sending over its budget (once: it then ends)."""
        client = self.ws.client
        log.warning(
            "closing %s with 1008 rate limit: %d frames refused within %g s",
            f"{client.host}:{client.port}" if client else "?",
            budget.max_refusals,
            budget.refusal_window_s,
        )
        if self._on_rate_limit_close is not None:
            self._on_rate_limit_close()
        await self.close(int(CloseCode.POLICY_VIOLATION), RATE_LIMIT_CLOSE)

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


def _channel(websocket: WebSocket, host: SessionHost, limits: Limits) -> WebSocketChannel:
    """The channel of an accepted connection, with its budget full."""
    budget = ConnectionBudget.from_limits(limits, anyio.current_time())
    return WebSocketChannel(
        websocket, limits.max_event_bytes, budget, host.metrics.rate_limit_close
    )


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


def _duplex(websocket: WebSocket, settings: ServerSettings) -> bool:
    """The duplex dialect, where upstream selects it: its endpoint, `?duplex=1`, or a
    server deployed as duplex."""
    if settings.duplex or websocket.url.path.rstrip("/").endswith("/v1/duplex"):
        return True
    return websocket.query_params.get("duplex", "").lower() in _YES


def _resumable(websocket: WebSocket, settings: ServerSettings) -> bool:
    """D27: the duplex dialect's sessions are resumable; a GA client opts in."""
    if _duplex(websocket, settings):
        return True
    return websocket.query_params.get("resumable", "").lower() in _YES


def _autostart(websocket: WebSocket) -> bool:
    """D37: a session starts at the upgrade unless the client says `autostart=0`."""
    value = websocket.query_params.get("autostart")
    return value is None or value.lower() in _YES


def _resume_only(websocket: WebSocket) -> bool:
    return websocket.query_params.get("resume", "").lower() in _YES


async def _first_event(
    channel: WebSocketChannel, timeout_s: float
) -> ClientEvent | ProtocolError | None:
    """The first event of a connection without a session; None when the peer left, or
    sent nothing within `timeout_s` (then it is closed 1008: it holds no session, and a
    connection that never speaks must not hold a socket)."""
    with anyio.move_on_after(timeout_s or math.inf):
        return await channel.receive()
    log.info("closing a connection that sent no first event within %g s", timeout_s)
    await channel.close(int(CloseCode.POLICY_VIOLATION), "no first event")
    return None


async def _serve_resume(websocket: WebSocket, host: SessionHost, limits: Limits) -> None:
    """A resume-only connection: its first event must be `session.resume`; then it
    carries that session until the session leaves it."""
    channel = _channel(websocket, host, limits)
    first = await _first_event(channel, limits.first_event_timeout_s)
    if first is None:
        return
    if not isinstance(first, SessionResume):
        exc = ResumeExpected(
            "a resume connection (`?resume=1`) must begin with session.resume",
            param="type",
            event_id=getattr(first, "event_id", None),
        )
        await _refuse(websocket, exc, CloseCode.POLICY_VIOLATION)
        return
    await _resume(websocket, host, channel, first)


async def _resume(
    websocket: WebSocket, host: SessionHost, channel: WebSocketChannel, first: SessionResume
) -> None:
    try:
        # AMBIGUITY (docs/session-semantics.md, decision D39): a resume that reaches a
        # worker that does not hold the session is relayed to the worker that does
        owner = host.owner_elsewhere(first.session_id)
        run_dir = getattr(websocket.app.state, "run_dir", None)
        if owner is None or run_dir is None:
            await host.resume(channel, first)  # counts its own refusals
            return
        path = relay_socket_path(run_dir, owner)
        try:
            owner_ws = await open_relay(websocket, path, owner, first, channel.max_bytes)
        except ResumeRefused:
            host.metrics.resume_event("refused")
            raise
        host.metrics.resume_event("relayed")
        await carry_resume(websocket, owner_ws, first)
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
    limits = settings.limits
    call_id = websocket.query_params.get("call_id")
    if call_id:
        await attach_sideband(websocket, call_id)
        return
    if _resume_only(websocket):
        await _serve_resume(websocket, host, limits)
        return
    channel = _channel(websocket, host, limits)
    if not _autostart(websocket):
        # AMBIGUITY (docs/session-semantics.md, decision D37): with autostart=0 no session
        # exists before the client's first event, which may be a resume
        first = await _first_event(channel, limits.first_event_timeout_s)
        if first is None:
            return
        if isinstance(first, SessionResume):
            await _resume(websocket, host, channel, first)
            return
        channel.unread(first)
    refusal = host.refusal()
    if refusal is not None:
        host.metrics.session_refused()
        await _refuse(websocket, refusal, CloseCode.TRY_AGAIN_LATER)
        return
    config = settings.session_defaults
    model = websocket.query_params.get("model")
    if model:
        config = validate_session({"model": model}, config)
    try:
        await host.serve(channel, config=config, resumable=_resumable(websocket, settings))
    except Exception:
        log.exception("session crashed")
        await channel.close(int(CloseCode.INTERNAL_ERROR), "internal error")
