"""The unchanged openai SDK pointed at a server on loopback: the tests that prove our wire
is the OpenAI Realtime API's build their client here, one way."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openai


def sdk_client(http_url: str) -> openai.AsyncOpenAI:
    """An `AsyncOpenAI` whose REST and realtime websocket calls go to `http_url`'s /v1
    (a local key: the servers under test are started without one or with `sk-local`)."""
    import openai

    return openai.AsyncOpenAI(
        api_key="sk-local",
        base_url=http_url + "/v1",
        websocket_base_url=http_url.replace("http://", "ws://") + "/v1",
    )
