"""Who may open a session and read the probes: the API key and the Origin policy.

Pure decisions over a request's headers, offered subprotocols and query (no I/O), made
before the websocket upgrade; `transport/websocket.py` answers a refusal with an HTTP
response instead of accepting the socket, `transport/app.py` guards the probes with it.

Credentials: `Authorization: Bearer <key>`, the browser subprotocol
`openai-insecure-api-key.<key>`, or `?token=<key>` (browsers cannot set headers on a
websocket). A wrong or missing key is 401 `unauthorized`.

Origins (checked first, so a foreign page learns nothing about the key): with
`allowed_origins` empty (the default) a request without an `Origin` header (not a
browser), the server's own origin (its host and port equal the `Host` header) and the
loopback origins (`http(s)://localhost`, `127.0.0.0/8`, `[::1]`, any port) are allowed,
any other origin is 403 `origin_not_allowed`. A configured list allows exactly its
origins (and requests without an `Origin`); `"*"` in it allows every origin.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from spec.errors import ERROR_TYPE, ErrorCode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "ANY_ORIGIN",
    "CREDENTIAL_PARAMS",
    "KEY_SUBPROTOCOL",
    "Refusal",
    "bearer_key",
    "check_origin_setting",
    "handshake_refusal",
    "offered_key",
    "origin_allowed",
    "probe_refusal",
]

#: the browser subprotocol that carries a key (OpenAI's name for it)
KEY_SUBPROTOCOL = "openai-insecure-api-key."
#: query parameters whose values are credentials (never logged, see log_redaction)
CREDENTIAL_PARAMS = frozenset({"token", "api_key", "apikey", "key", "access_token"})
#: the `allowed_origins` entry that allows every origin
ANY_ORIGIN = "*"

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP answer instead of the upgrade (or the probe): status and wire error code."""

    status: int
    code: ErrorCode
    message: str

    def body(self) -> dict[str, Any]:
        """The JSON body: the `error` object of the wire's `error` event."""
        return {
            "error": {
                "type": ERROR_TYPE[self.code].value,
                "code": self.code.value,
                "message": self.message,
            }
        }

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}


_UNAUTHORIZED = Refusal(401, ErrorCode.UNAUTHORIZED, "missing or wrong API key")


def bearer_key(headers: Mapping[str, str]) -> str | None:
    """The key of an `Authorization: Bearer <key>` header, if there is one."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return None


def offered_key(
    headers: Mapping[str, str], subprotocols: Sequence[str], query: Mapping[str, str]
) -> str | None:
    """The key a websocket request offers: the header, else the subprotocol, else `?token=`."""
    key = bearer_key(headers)
    if key is not None:
        return key
    for protocol in subprotocols:
        if protocol.startswith(KEY_SUBPROTOCOL):
            return protocol[len(KEY_SUBPROTOCOL) :]
    return query.get("token")


def _key_matches(offered: str | None, api_key: str) -> bool:
    return hmac.compare_digest((offered or "").encode(), api_key.encode())


def _origin_parts(origin: str, default_scheme: str | None = None) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin (`scheme://host[:port]`), None when it is not one."""
    try:
        parts = urlsplit(origin)
        scheme = parts.scheme.lower() or (default_scheme or "")
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return None
    if not host or scheme not in _DEFAULT_PORTS or parts.path not in ("", "/"):
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _same_host(origin: tuple[str, str, int], host_header: str | None) -> bool:
    """Whether the `Host` header names the origin's host and port (its scheme's default
    port when the header has none)."""
    if not host_header:
        return False
    own = _origin_parts(f"{origin[0]}://{host_header.strip()}")
    return own is not None and own[1:] == origin[1:]


def check_origin_setting(origin: str) -> None:
    """Raises ValueError when an `allowed_origins` entry is neither `*` nor an origin."""
    if origin != ANY_ORIGIN and _origin_parts(origin) is None:
        raise ValueError(
            f"allowed_origins: `{origin}` is not an origin (scheme://host[:port], or `*`)"
        )


def origin_allowed(origin: str | None, host_header: str | None, allowed: Sequence[str]) -> bool:
    """The Origin policy (see the module docstring)."""
    if origin is None:
        return True  # not a browser: the key is what protects the server
    if ANY_ORIGIN in allowed:
        return True
    parts = _origin_parts(origin)
    if parts is None:  # `null` (a file:// page, a sandboxed frame) or garbage
        return False
    if allowed:
        return any(_origin_parts(entry) == parts for entry in allowed)
    # AMBIGUITY (docs/session-semantics.md, decision D26): with no list, a browser page
    # may connect from the server's own origin or from loopback, and from nowhere else
    return _is_loopback(parts[1]) or _same_host(parts, host_header)


def handshake_refusal(
    *,
    api_key: str | None,
    allowed_origins: Sequence[str],
    headers: Mapping[str, str],
    subprotocols: Sequence[str],
    query: Mapping[str, str],
) -> Refusal | None:
    """Why a websocket request may not be upgraded (origin first, then the key), or None."""
    origin = headers.get("origin")
    if not origin_allowed(origin, headers.get("host"), allowed_origins):
        return Refusal(403, ErrorCode.ORIGIN_NOT_ALLOWED, f"origin `{origin}` is not allowed")
    if api_key and not _key_matches(offered_key(headers, subprotocols, query), api_key):
        return _UNAUTHORIZED
    return None


def probe_refusal(
    *, api_key: str | None, protect_probes: bool, headers: Mapping[str, str]
) -> Refusal | None:
    """Why `/readyz` or `/metrics` may not be read: protected probes need the key as
    `Authorization: Bearer` (a scraper or a balancer sets a header, never a query)."""
    if not protect_probes or not api_key:
        return None
    if _key_matches(bearer_key(headers), api_key):
        return None
    return _UNAUTHORIZED
