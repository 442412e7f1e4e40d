"""What the page says, in headless Chromium against the real CPU server: the note on
spoken languages is what `session.created` says the server's ASR knows (Whisper tiny.en:
English), and the indicators show plain words while keeping the machines' state names in
`data-state`."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


#: the camera caption of a push-to-talk call that is not holding, per transport
CAMERA_CAPTIONS = {
    "websocket": "camera on — sending a frame every second",  # frames go alone (B22)
    "webrtc": "camera on — streaming on the call's video track",
}
TRANSPORT_NAMES = {"websocket": "websocket", "webrtc": "WebRTC"}


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
def test_the_page_names_the_languages_the_server_recognises(
    browser_page: Any, cpu_server: str, transport: str
) -> None:
    page = browser_page
    page.goto(f"{cpu_server}/?mode=ptt&transport={transport}")
    page.wait_for_selector("body[data-loaded=true]")
    name = TRANSPORT_NAMES[transport]
    indicator = page.locator("#transport-state")
    assert indicator.inner_text() == f"will connect over {name}"
    note = page.locator("#languages")
    assert "any language" not in note.inner_text()  # nothing is claimed before connecting
    assert page.locator("#connection").inner_text() == "disconnected"
    page.click("#camera")
    assert page.locator("#camera-state").inner_text() == "camera on once you connect"
    page.click("#connect")
    page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
    page.wait_for_selector("#languages[data-languages=en]", timeout=30_000)
    assert note.inner_text().startswith("Speech recognition: English only")
    created = page.evaluate(
        "window.joyduplex.metrics.received.filter(e => e.type === 'session.created').length"
    )
    assert created == 1
    connection = page.locator("#connection")
    assert (connection.get_attribute("data-state"), connection.inner_text()) == (
        "ready",
        "connected",
    )
    assert (indicator.get_attribute("data-transport"), indicator.inner_text()) == (
        transport,
        f"connected over {name}",
    )
    # push-to-talk, not holding: the camera is standalone (B22)
    page.wait_for_selector("#camera-state[data-state=standalone]", timeout=30_000)
    assert page.locator("#camera-state").inner_text() == CAMERA_CAPTIONS[transport]
    assert page.locator("#speaking").inner_text() == "hold to talk"
    page.click("#connect")  # hang up
    page.wait_for_selector("body[data-connection=closed]", timeout=30_000)
    assert page.locator("#connection").inner_text() == "disconnected"
    assert page.errors == []
