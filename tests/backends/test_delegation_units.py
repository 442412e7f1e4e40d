"""The background model of B31: the `[delegation]` table, the server settings that carry
it to any backend, and the chat client (over an httpx mock transport)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from backends.base import (
    BackendUnavailable,
    DelegationRequest,
    HistoryTurn,
    StageFailed,
)
from backends.registry import load_backend
from backends.remote.config import RemoteConfigError, parse_delegation_config
from backends.remote.delegation import DEFAULT_INSTRUCTIONS, RemoteDelegate, create_delegate
from transport.settings import load_settings


def test_delegation_table_parses_with_url_or_urls_and_defaults() -> None:
    config = parse_delegation_config({"url": "http://llm:8000/", "model": "qwen"})
    assert (config.urls, config.model, config.timeout_s) == (("http://llm:8000",), "qwen", 30.0)
    assert (config.max_tokens, config.instructions, config.api_key) == (256, None, None)
    config = parse_delegation_config(
        {
            "urls": ["http://a:1", "http://b:1"],
            "model": "m",
            "timeout_s": 5,
            "max_tokens": 64,
            "instructions": "Be terse.",
            "api_key": "k",
        }
    )
    assert (len(config.urls), config.timeout_s, config.max_tokens) == (2, 5.0, 64)
    assert (config.instructions, config.api_key) == ("Be terse.", "k")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"model": "m"}, "`delegation.urls` is required"),
        ({"url": "http://a:1"}, "`delegation.model` is required"),
        ({"url": "http://a:1", "urls": ["http://b:1"], "model": "m"}, "url or urls, not both"),
        ({"url": "ftp://a", "model": "m"}, "delegation.urls"),
        ({"url": "http://a:1/v1", "model": "m"}, "without /v1"),
        ({"url": "http://a:1", "model": "m", "voice": "x"}, "unknown key `delegation.voice`"),
        ({"url": "http://a:1", "model": "m", "timeout_s": 0}, "delegation.timeout_s"),
        ({"url": "http://a:1", "model": "m", "api_key_env": "JOYDUPLEX_NO_SUCH_VAR"}, "not set"),
        ("http://a:1", "must be a table"),
    ],
)
def test_delegation_table_errors_name_the_key(raw: Any, message: str) -> None:
    with pytest.raises(RemoteConfigError, match=message):
        parse_delegation_config(raw)


def test_server_settings_take_a_delegation_table_for_any_backend(tmp_path: Path) -> None:
    path = tmp_path / "joyduplex.toml"
    path.write_text('[server]\nbackend = "scripted"\n[delegation]\nurl = "http://llm:8000"\n')
    with pytest.raises(ValueError, match=r"`delegation.model` is required"):
        load_settings(path)
    path.write_text(
        '[server]\nbackend = "scripted"\n[delegation]\nurl = "http://llm:8000"\nmodel = "m"\n'
    )
    settings = load_settings(path)
    assert settings.backend_options["delegation"] == {"url": "http://llm:8000", "model": "m"}
    backend = load_backend("scripted", **settings.backend_options)
    assert isinstance(backend.delegate, RemoteDelegate)
    assert backend.delegate in backend.stages()  # entered, warmed and released with the rest
    assert load_backend("scripted").delegate is None  # no table: questions are dropped


def test_create_delegate_refuses_a_bad_table() -> None:
    with pytest.raises(BackendUnavailable, match="delegation: unknown key"):
        create_delegate({"url": "http://a:1", "model": "m", "nope": 1})


def _answer(handler: Any, request: DelegationRequest, **table: Any) -> str:
    delegate = create_delegate(
        {"url": "http://llm:8000", "model": "bg", **table},
        transport=httpx.MockTransport(handler),
    )

    async def main() -> str:
        async with delegate:
            return await delegate.answer(request)

    return anyio.run(main)


def _completion(content: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})


def test_the_background_model_is_asked_the_question_with_the_conversation() -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer k"
        sent.append(json.loads(request.content))
        return _completion("<think>hmm</think> About 384,000 km.")

    request = DelegationRequest(
        "s/resp_1:delegation:1",
        "How far is the moon?",
        history=(
            HistoryTurn("user", "hi"),
            HistoryTurn("assistant", "Hello."),
            HistoryTurn("user", ""),
        ),
        transcript="how far is it",
    )
    assert _answer(handler, request, api_key="k", max_tokens=64) == "About 384,000 km."
    [body] = sent
    assert (body["model"], body["max_tokens"], body["stream"]) == ("bg", 64, False)
    assert body["messages"] == [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        {
            "role": "user",
            "content": "Conversation so far:\nUser: hi\nAssistant: Hello.\n\n"
            "The user just said: how far is it\n\nQuestion: How far is the moon?",
        },
    ]


def test_instructions_of_the_table_replace_the_default_system_prompt() -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return _completion("Yes.")

    assert _answer(handler, DelegationRequest("r", "Q?"), instructions="Be terse.") == "Yes."
    assert sent[0]["messages"][0] == {"role": "system", "content": "Be terse."}
    assert sent[0]["messages"][-1] == {"role": "user", "content": "Question: Q?"}


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500, text="boom"),
        httpx.Response(200, json={"choices": []}),
        httpx.Response(200, text="not json"),
    ],
    ids=["5xx", "no-choices", "not-json"],
)
def test_a_failed_or_unreadable_answer_is_a_backend_error(response: httpx.Response) -> None:
    with pytest.raises(StageFailed):
        _answer(lambda request: response, DelegationRequest("r", "Q?"))


def test_an_answer_cut_off_while_reasoning_is_a_backend_error_not_speech() -> None:
    with pytest.raises(StageFailed, match="unfinished reasoning"):
        _answer(lambda request: _completion("<think>so the moon is"), DelegationRequest("r", "Q?"))
