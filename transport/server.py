"""uvicorn with a graceful shutdown that speaks the protocol, and a bounded HTTP layer.

uvicorn closes open websockets with 1012 as soon as it starts shutting down, before the
application's lifespan ends. `RealtimeServer` first closes every session itself
(`session.closed` with reason `shutdown`, close 1001), then lets uvicorn finish.

`http_options(limits)` are the uvicorn options every server uses (`joyduplex serve`, each
worker, the tests): HTTP/1.1 by h11 (never httptools, whose header size is unbounded) with
request heads of at most `limits.max_header_bytes` (a larger one is answered 400), through
`BoundedH11Protocol`, which closes a connection whose first request head is not complete
within `limits.header_timeout_s` (a slowloris holds no socket for longer); websockets by
`DenialWebSocketsProtocol` (uvicorn's default, minus a false error log after a refusal).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from spec.limits import Limits
from transport.log_redaction import install_on_root

if TYPE_CHECKING:
    import asyncio
    import socket

    from starlette.applications import Starlette

__all__ = [
    "BoundedH11Protocol",
    "DenialWebSocketsProtocol",
    "RealtimeServer",
    "configure_logging",
    "http_options",
]

log = logging.getLogger("joyduplex.transport")


def http_options(limits: Limits) -> dict[str, Any]:
    """The uvicorn.Config options that bound the HTTP layer (see the module docstring)."""
    return {
        "http": BoundedH11Protocol,
        "ws": DenialWebSocketsProtocol,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


class DenialWebSocketsProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets protocol, where an HTTP answer instead of the upgrade (the ASGI
    denial response: our 401 / 403) completes the handshake.

    uvicorn (0.54 and earlier) marks the handshake complete only on an accept or a close,
    so after a denial response it logged "ASGI callable returned without completing
    handshake." at error level for every refused request (the 500 it then tries to send
    is skipped).
    """

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            self.handshake_complete = True


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for the first request head."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        settings = _find_state(config.loaded_app, "settings")
        limits = getattr(settings, "limits", None) or Limits()
        self._header_timeout_s: float = limits.header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._header_timeout_s:
            self._header_timer = self.loop.call_later(self._header_timeout_s, self._header_deadline)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _header_deadline(self) -> None:
        """No complete request head yet (still IDLE, no request cycle, not upgraded)."""
        self._header_timer = None
        if (
            self.transport.get_protocol() is self
            and self.cycle is None
            and self.conn.their_state is h11.IDLE
            and not self.transport.is_closing()
        ):
            log.info("closing %s: no request head within %g s", self.client, self._header_timeout_s)
            self.transport.close()


class RealtimeServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app: Starlette | Any = self.config.loaded_app
        host = _find_host(app)
        if host is not None:
            await host.close_sessions()
        await super().shutdown(sockets)


def _find_host(app: Any) -> Any:
    """Unwrap uvicorn's middleware layers down to the Starlette app holding the host."""
    return _find_state(app, "host")


def _find_state(app: Any, name: str) -> Any:
    """`app.state.<name>` of the Starlette app under uvicorn's middleware layers."""
    for _ in range(8):
        state = getattr(app, "state", None)
        if state is not None and hasattr(state, name):
            return getattr(state, name)
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def configure_logging(level: str, *, worker: int | None = None) -> None:
    """The server's log format (credentials masked: transport/log_redaction.py); a worker
    process of several names itself in each line. uvicorn's own loggers get the same mask
    from `uvicorn_log_config()`."""
    who = "" if worker is None else f" worker {worker} [%(process)d]"
    logging.basicConfig(
        level=level.upper(), format=f"%(asctime)s %(levelname)s{who} %(name)s: %(message)s"
    )
    install_on_root()
    logging.getLogger("transitions").setLevel(logging.WARNING)  # one line per transition
