"""What `DuplexClient` raises on purpose: `ServerError` (an `error` event answered a
request), `ConnectionLost` (the socket closed or failed), `HandshakeRefused` (an HTTP
status instead of the websocket upgrade) and `SessionLost` (a resume gave up).
`clients.duplex_client` re-exports the first three."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from spec.events import ErrorDetail
from transport.log_redaction import redact

if TYPE_CHECKING:
    from websockets.exceptions import ConnectionClosed

__all__ = [
    "ConnectionLost",
    "DuplexClientError",
    "HandshakeRefused",
    "ServerError",
    "SessionLost",
    "connection_lost",
]


class DuplexClientError(Exception):
    """Anything the client raises on purpose (besides `TimeoutError`)."""


class ServerError(DuplexClientError):
    """The server answered with an `error` event."""

    def __init__(self, detail: ErrorDetail) -> None:
        super().__init__(f"{detail.code}: {detail.message}")
        self.detail = detail
        self.code = detail.code
        self.message = detail.message
        self.param = detail.param
        self.event_id = detail.event_id


class SessionLost(DuplexClientError):
    """A dropped session could not be resumed (B42): the server refused (its grace
    expired: `unknown_session`, ...) or the attempts ran out. A new session starts over."""


class ConnectionLost(DuplexClientError):
    """The socket closed (or failed) while the client was sending or waiting."""

    def __init__(self, message: str, *, code: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class HandshakeRefused(ConnectionLost):
    """The server answered the websocket handshake with an HTTP status instead of the
    upgrade. `status` is that status; `error_code` the wire code of its JSON body
    (`unauthorized` for 401, `origin_not_allowed` for 403) when it has one; `detail` the
    whole `error` object."""

    def __init__(self, url: str, status: int, body: bytes) -> None:
        detail = _error_body(body)
        self.status = status
        self.detail = detail
        self.error_code = detail.code if detail is not None else None
        why = f"{detail.code}: {detail.message}" if detail is not None else "no reason given"
        super().__init__(
            f"the server at {redact(url)} refused the connection (HTTP {status}, {why})"
        )


def connection_lost(exc: ConnectionClosed) -> ConnectionLost:
    """The websockets close `exc` as a `ConnectionLost` carrying its close code and
    reason."""
    frame = exc.rcvd or exc.sent
    code = frame.code if frame is not None else None
    reason = frame.reason if frame is not None else ""
    return ConnectionLost(f"connection closed: {exc}", code=code, reason=reason)


def _error_body(body: bytes) -> ErrorDetail | None:
    """The `error` object of a refusal's JSON body, if it carries one."""
    try:
        return msgspec.json.decode(body, type=_RefusalBody).error
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class _RefusalBody(msgspec.Struct):
    error: ErrorDetail
