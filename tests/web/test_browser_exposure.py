"""B26 in the browser: a handshake the server refuses (HTTP 401 before the upgrade, which a
page only sees as a socket closed before it opened) is the notice `connection_refused`;
the page offers the key from its fragment (`/#key=...`) as the key subprotocol. Over
WebRTC (B36) the refusal is the call's HTTP answer: the notice carries the server's own
error code and message, and the fragment's key goes as `Authorization: Bearer`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.system_tools import chromium_binary
from tests.transport.conftest import LiveServer, start_server
from tools.fake_browser import WEBRTC_FLAGS
from transport.settings import ServerSettings

pytestmark = [pytest.mark.browser, pytest.mark.slow]

KEY = "k-3f9a"


@pytest.fixture
def keyed_server() -> Iterator[LiveServer]:
    live, stop = start_server(ServerSettings(api_key=KEY))
    yield live
    stop()


@pytest.fixture
def page() -> Iterator[Any]:
    """Headless Chromium with Chromium's own fake microphone and camera."""
    chromium = chromium_binary()
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    flags = [
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        "--autoplay-policy=no-user-gesture-required",
        *WEBRTC_FLAGS,
    ]
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=flags)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def _notice_codes(page: Any) -> list[str]:
    return [n["code"] for n in page.evaluate("window.joyduplex.metrics.notices")]


def test_b26_the_web_ui_names_a_refused_connection_and_connects_with_the_fragment_key(
    keyed_server: LiveServer, page: Any
) -> None:
    page.goto(f"{keyed_server.url}/?transport=websocket")
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#connect")
    page.wait_for_function(
        "window.joyduplex.metrics.notices.some(n => n.code === 'connection_refused')",
        timeout=30_000,
    )
    assert "socket_error" not in _notice_codes(page)
    page.goto(f"{keyed_server.url}/?transport=websocket#key={KEY}")
    page.reload()
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#connect")
    page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
    assert "connection_refused" not in _notice_codes(page)


def test_b36_a_refused_call_shows_the_servers_error_and_the_fragment_key_places_it(
    keyed_server: LiveServer, page: Any
) -> None:
    page.goto(f"{keyed_server.url}/")  # WebRTC is the default transport
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#connect")
    page.wait_for_function(
        "window.joyduplex.metrics.notices.some(n => n.code === 'unauthorized')", timeout=30_000
    )
    notices = page.evaluate("window.joyduplex.metrics.notices")
    refusal = next(n for n in notices if n["code"] == "unauthorized")
    assert refusal["level"] == "error" and "key" in refusal["message"], refusal
    page.wait_for_selector("body[data-connection=closed]", timeout=30_000)
    page.goto(f"{keyed_server.url}/#key={KEY}")
    page.reload()
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#connect")
    page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
    assert page.locator("#transport-state").get_attribute("data-transport") == "webrtc"
    assert "unauthorized" not in _notice_codes(page)
