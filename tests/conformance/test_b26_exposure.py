"""B26 exposure: who may open a session and read the probes, decided before the upgrade
(`transport/access_policy.py`); the HTTP side is proven in tests/transport/test_exposure*.py."""

from __future__ import annotations

import pytest

from spec.errors import ErrorCode
from transport.access_policy import handshake_refusal, probe_refusal
from transport.log_redaction import redact

KEY = "k-3f9a"
HOST = "joy.example:8000"


def refusal(
    *,
    origin: str | None = None,
    allowed: tuple[str, ...] = (),
    api_key: str | None = None,
    bearer: str | None = None,
    subprotocols: tuple[str, ...] = (),
    query: dict[str, str] | None = None,
) -> tuple[int, str] | None:
    headers = {"host": HOST}
    if origin is not None:
        headers["origin"] = origin
    if bearer is not None:
        headers["authorization"] = f"Bearer {bearer}"
    found = handshake_refusal(
        api_key=api_key,
        allowed_origins=allowed,
        headers=headers,
        subprotocols=subprotocols,
        query=query or {},
    )
    return None if found is None else (found.status, found.code.value)


def test_b26_a_missing_or_wrong_key_is_401_unauthorized_and_any_of_the_three_carriers_works() -> (
    None
):
    assert refusal(api_key=KEY) == (401, "unauthorized")
    assert refusal(api_key=KEY, bearer="wrong") == (401, "unauthorized")
    assert refusal(api_key=KEY, query={"token": "wrong"}) == (401, "unauthorized")
    assert refusal(api_key=KEY, bearer=KEY) is None
    assert refusal(api_key=KEY, subprotocols=("realtime", f"openai-insecure-api-key.{KEY}")) is None
    assert refusal(api_key=KEY, query={"token": KEY}) is None
    assert refusal() is None  # no key configured: none asked


def test_b26_the_refusal_body_is_the_error_object_of_the_wire() -> None:
    found = handshake_refusal(
        api_key=KEY, allowed_origins=(), headers={}, subprotocols=(), query={}
    )
    assert found is not None
    assert found.body() == {
        "error": {
            "type": "invalid_request_error",
            "code": ErrorCode.UNAUTHORIZED.value,
            "message": "missing or wrong API key",
        }
    }
    assert found.headers() == {"WWW-Authenticate": "Bearer"}


@pytest.mark.parametrize(
    "origin",
    [
        None,  # not a browser
        f"http://{HOST}",  # the server's own page
        "http://localhost:5173",
        "https://localhost",
        "http://127.0.0.1:3000",
        "http://[::1]:8080",
    ],
)
def test_b26_the_default_policy_allows_no_origin_the_own_origin_and_loopback(
    origin: str | None,
) -> None:
    assert refusal(origin=origin) is None


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "http://joy.example:8001",  # the server's host, another port
        "https://joy.example:8000.evil.example",
        "http://localhost.evil.example",
        "null",  # a file:// page or a sandboxed frame
    ],
)
def test_b26_the_default_policy_refuses_every_other_origin_with_403(origin: str) -> None:
    assert refusal(origin=origin) == (403, "origin_not_allowed")
    # checked before the key: a foreign page learns nothing about it
    assert refusal(origin=origin, api_key=KEY) == (403, "origin_not_allowed")


def test_b26_a_star_allows_any_origin_and_a_list_exactly_its_own() -> None:
    assert refusal(origin="http://evil.example", allowed=("*",)) is None
    allowed = ("https://app.example",)
    assert refusal(origin="https://app.example", allowed=allowed) is None
    assert refusal(origin="https://APP.example:443", allowed=allowed) is None
    assert refusal(origin="http://localhost:5173", allowed=allowed) == (403, "origin_not_allowed")
    assert refusal(origin=None, allowed=allowed) is None


def test_b26_protected_probes_need_the_bearer_key() -> None:
    def probe(protect: bool, headers: dict[str, str]) -> int | None:
        found = probe_refusal(api_key=KEY, protect_probes=protect, headers=headers)
        return None if found is None else found.status

    assert probe(False, {}) is None
    assert probe(True, {}) == 401
    assert probe(True, {"authorization": "Bearer wrong"}) == 401
    assert probe(True, {"authorization": f"Bearer {KEY}"}) is None


@pytest.mark.parametrize(
    "line",
    [
        f'127.0.0.1:5 - "WebSocket /v1/realtime?token={KEY}" [accepted]',
        f'"GET /metrics?model=x&api_key={KEY} HTTP/1.1" 200',
        f"< Authorization: Bearer {KEY}",
        f"< Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.{KEY}",
    ],
)
def test_b26_a_logged_line_never_holds_the_key(line: str) -> None:
    masked = redact(line)
    assert KEY not in masked
    assert "[redacted]" in masked
