"""The web UI shows a function call and its output in the transcript (B38, B39), in
headless Chromium against a real server with the scripted backend: a push-to-talk turn
whose reply calls `get_weather` (the operator's `[session]` declares the tool), an
answer through `window.joyduplex.answerCall` (an embedder with functions), and the
follow-up reply spoken from it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from spec.session_config import validate_session
from tests.transport.conftest import start_server
from tests.web.test_browser_e2e import wait_until
from transport.settings import ServerSettings

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def function_lines(page: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = page.evaluate(
        """[...document.querySelectorAll('#transcript li.function')].map(li => ({
            text: li.querySelector('.text').textContent,
            output: li.querySelector('.output')?.textContent ?? null,
            status: li.dataset.status,
        }))"""
    )
    return result


def test_b39_the_page_shows_a_call_then_its_output_and_plays_the_follow_up(
    browser_page: Any,
) -> None:
    settings = ServerSettings(backend="scripted")
    settings = replace(settings, session_defaults=validate_session({"tools": [WEATHER]}))
    live, stop = start_server(settings)
    live.script.call("get_weather", json.dumps({"city": "Paris"}), chunk=4).reply(
        "It is sunny in Paris."
    )
    page = browser_page
    try:
        page.goto(f"{live.url}/?mode=ptt&transport=websocket")
        page.wait_for_selector("body[data-loaded=true]")
        page.click("#connect")
        page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
        page.locator("#talk").hover()
        page.mouse.down()
        wait_until(
            page,
            "audio uploaded in the hold",
            lambda: (
                page.evaluate("window.joyduplex.snapshot().holds.at(-1).uploaded_samples") > 8000
            ),
        )
        page.mouse.up()
        [line] = wait_until(page, "the call's transcript line", lambda: function_lines(page))
        assert line == {
            "text": 'get_weather({"city": "Paris"})',
            "output": None,
            "status": "completed",
        }
        call_id = page.evaluate(
            "document.querySelector('#transcript li.function').dataset.key.split(':')[1]"
        )
        page.evaluate(f"window.joyduplex.answerCall({json.dumps(call_id)}, 'sunny, 21 C')")
        wait_until(
            page, "the output on the line", lambda: function_lines(page)[0]["output"] is not None
        )
        assert function_lines(page)[0]["output"] == " -> sunny, 21 C"
        wait_until(
            page,
            "the follow-up reply",
            lambda: any(
                "sunny in paris" in t.lower()
                for t in page.locator("#transcript li.assistant .text").all_inner_texts()
            ),
        )
        sent = page.evaluate("window.joyduplex.metrics.sent.map(e => e.type)")
        answered = sent.index("conversation.item.create")
        assert sent[answered + 1] == "response.create"  # the follow-up, asked once
        assert sent.count("response.create") == 1
        assert not page.errors, page.errors
    finally:
        stop()
