"""B26 over HTTP: a refused key or origin is answered 401 / 403 before the upgrade, the
probes can ask for the key, and every client names the refusal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from clients.cli import run_client, write_wav_mono
from clients.duplex_client import DuplexClient, HandshakeRefused
from tests.transport.conftest import LiveServer, start_server
from transport.app import create_app
from transport.cli import main
from transport.settings import ServerSettings, load_settings

KEY = "k-3f9a"


@pytest.fixture
def keyed_server() -> Iterator[LiveServer]:
    live, stop = start_server(ServerSettings(api_key=KEY))
    yield live
    stop()


@pytest.fixture
def default_server() -> Iterator[LiveServer]:
    live, stop = start_server()
    yield live
    stop()


async def _handshake(url: str, **kw: Any) -> tuple[int, dict[str, Any] | str]:
    """(101, first event type) for an upgrade, else (HTTP status, JSON body)."""
    try:
        async with websockets.connect(url, **kw) as ws:
            return 101, json.loads(await ws.recv())["type"]
    except websockets.InvalidStatus as exc:
        response = exc.response
        assert response.headers["content-type"] == "application/json"
        return response.status_code, json.loads(bytes(response.body or b""))


def _sessions_total(live: LiveServer) -> str:
    metrics = httpx.get(live.url + "/metrics").text
    return next(
        line for line in metrics.splitlines() if line.startswith("joyduplex_sessions_total")
    )


def test_b26_a_wrong_or_missing_key_gets_http_401_before_any_upgrade(
    keyed_server: LiveServer,
) -> None:
    live = keyed_server
    before = _sessions_total(live)

    async def run() -> list[tuple[int, Any]]:
        return [
            await _handshake(live.ws_url),
            await _handshake(live.ws_url, additional_headers={"Authorization": "Bearer wrong"}),
            await _handshake(live.ws_url + "?token=wrong"),
            await _handshake(live.ws_url, subprotocols=["openai-insecure-api-key.wrong"]),  # type: ignore[list-item]
        ]

    unauthorized = {
        "error": {
            "type": "invalid_request_error",
            "code": "unauthorized",
            "message": "missing or wrong API key",
        }
    }
    assert asyncio.run(run()) == [(401, unauthorized)] * 4
    assert _sessions_total(live) == before  # no session was opened for any of them


def test_b26_the_right_key_by_header_subprotocol_or_query_is_upgraded(
    keyed_server: LiveServer,
) -> None:
    live = keyed_server

    async def run() -> list[tuple[int, Any]]:
        return [
            await _handshake(live.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}),
            await _handshake(
                live.ws_url,
                subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"],  # type: ignore[list-item]
            ),
            await _handshake(live.ws_url + f"?token={KEY}"),
        ]

    assert asyncio.run(run()) == [(101, "session.created")] * 3


def test_b26_a_foreign_origin_gets_403_under_the_default_policy(
    default_server: LiveServer,
) -> None:
    status, body = asyncio.run(_handshake(default_server.ws_url, origin="http://evil.example"))
    assert status == 403
    assert isinstance(body, dict)
    assert body["error"]["code"] == "origin_not_allowed"
    assert body["error"]["type"] == "invalid_request_error"


def test_b26_loopback_and_own_origins_are_accepted_by_default(
    default_server: LiveServer,
) -> None:
    own = default_server.url  # http://127.0.0.1:PORT, the Host the client sends

    async def run() -> list[tuple[int, Any]]:
        return [
            await _handshake(default_server.ws_url, origin=own),  # type: ignore[arg-type]
            await _handshake(default_server.ws_url, origin="http://localhost:5173"),  # type: ignore[arg-type]
            await _handshake(default_server.ws_url, origin="http://[::1]:3000"),  # type: ignore[arg-type]
            await _handshake(default_server.ws_url),  # no Origin: not a browser
        ]

    assert asyncio.run(run()) == [(101, "session.created")] * 4


def test_b26_the_own_origin_is_the_host_header_whatever_the_name(
    default_server: LiveServer,
) -> None:
    """A server reached by a public name accepts the page it served from that name (the
    connection goes to 127.0.0.1; the URL, thus the Host header, names joy.example)."""
    port = int(default_server.url.rsplit(":", 1)[1])
    url = "ws://joy.example:8443/v1/realtime"

    async def run() -> list[int]:
        return [
            (await _handshake(url, origin=origin, host="127.0.0.1", port=port))[0]
            for origin in ("http://joy.example:8443", "http://joy.example", "http://evil.example")
        ]

    assert asyncio.run(run()) == [101, 403, 403]


def test_b26_a_star_allows_any_origin() -> None:
    live, stop = start_server(ServerSettings(allowed_origins=("*",)))
    try:
        result = asyncio.run(_handshake(live.ws_url, origin="http://evil.example"))
        assert result == (101, "session.created")
    finally:
        stop()


def test_b26_a_configured_list_allows_exactly_its_origins() -> None:
    live, stop = start_server(ServerSettings(allowed_origins=("https://app.example",)))
    try:

        async def run() -> list[int]:
            return [
                (await _handshake(live.ws_url, origin=origin))[0]  # type: ignore[arg-type]
                for origin in ("https://app.example", "http://localhost:5173", live.url)
            ]

        assert asyncio.run(run()) == [101, 403, 403]
    finally:
        stop()


def test_b26_protected_probes_answer_401_without_the_key_and_200_with_it() -> None:
    live, stop = start_server(ServerSettings(api_key=KEY, protect_probes=True))
    try:
        auth = {"Authorization": f"Bearer {KEY}"}
        for probe in ("/readyz", "/metrics"):
            refused = httpx.get(live.url + probe)
            assert refused.status_code == 401, probe
            assert refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["error"]["code"] == "unauthorized"
            assert (
                httpx.get(live.url + probe, headers={"Authorization": "Bearer no"}).status_code
                == 401
            )
            assert httpx.get(live.url + probe, params={"token": KEY}).status_code == 401
            assert httpx.get(live.url + probe, headers=auth).status_code == 200, probe
        assert httpx.get(live.url + "/healthz").status_code == 200  # always open
    finally:
        stop()


def test_b26_probes_are_open_by_default_even_with_a_key(keyed_server: LiveServer) -> None:
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(keyed_server.url + probe).status_code == 200, probe


def test_b26_the_python_client_raises_handshake_refused_naming_the_code(
    keyed_server: LiveServer,
) -> None:
    async def attempt(token: str | None, origin: str | None = None) -> HandshakeRefused:
        headers = {"Origin": origin} if origin else None
        with pytest.raises(HandshakeRefused) as info:
            async with DuplexClient.connect(keyed_server.ws_url, token=token, headers=headers):
                pass
        return info.value

    async def run() -> list[HandshakeRefused]:
        return [await attempt(None), await attempt("wrong"), await attempt(KEY, "http://x.example")]

    missing, wrong, foreign = asyncio.run(run())
    assert (missing.status, missing.error_code) == (401, "unauthorized")
    assert (wrong.status, wrong.error_code) == (401, "unauthorized")
    assert (foreign.status, foreign.error_code) == (403, "origin_not_allowed")
    assert "unauthorized" in str(missing)
    assert "origin_not_allowed" in str(foreign)


def test_b26_without_the_denial_extension_the_refusal_is_a_close_before_the_accept() -> None:
    """A server that cannot answer a websocket request with HTTP gets a close before the
    accept (which it turns into a 403): never an accepted socket."""
    app = create_app(ServerSettings(backend="scripted", api_key=KEY))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": "/v1/realtime",
        "raw_path": b"/v1/realtime",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "subprotocols": [],
        "extensions": {},  # no websocket.http.response
        "state": {},
        "app": app,
    }
    asyncio.run(app.router(scope, receive, send))  # the router: no lifespan needed
    assert [m["type"] for m in sent] == ["websocket.close"]
    assert sent[0]["code"] == 1008


def test_b26_joyduplex_client_names_a_refused_key_and_what_to_do(
    keyed_server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = tmp_path / "in.wav"
    write_wav_mono(wav, b"\0\0" * 1600, 16_000)
    status = asyncio.run(run_client(keyed_server.ws_url, wav, None, tmp_path / "out.wav", "no"))
    err = capsys.readouterr().err
    assert status == 1
    assert "HTTP 401, unauthorized" in err
    assert "--token" in err


def test_b26_the_bench_counts_refusals_by_code_and_says_what_to_do(
    keyed_server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", keyed_server.ws_url, "--sessions", "2", "--duration", "0.2", "--quiet"]
    assert main([*argv, "--api-key", "wrong"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["sessions"]["connect_failed_by_reason"] == {"http_401_unauthorized": 2}
    assert "refused the API key" in captured.err
    assert "wrong" not in report["command"]  # the key is masked in the report


def test_b26_protect_probes_needs_an_api_key_and_origins_must_be_origins(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text("[server]\nprotect_probes = true\n")
    with pytest.raises(ValueError, match="protect_probes needs an api_key"):
        load_settings(config)
    assert load_settings(config, api_key="k").protect_probes is True
    assert load_settings(api_key="k", protect_probes=True).protect_probes is True
    assert load_settings().protect_probes is False  # off by default
    for bad in ('"http://a.example"', '["localhost:3000"]', '["http://a.example/path"]'):
        config.write_text(f"[server]\nallowed_origins = {bad}\n")
        with pytest.raises(ValueError, match="allowed_origins"):
            load_settings(config)
    config.write_text('[server]\nallowed_origins = ["*", "https://app.example:8443"]\n')
    assert load_settings(config).allowed_origins == ("*", "https://app.example:8443")
