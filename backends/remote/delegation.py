"""`RemoteDelegate`: the background model that answers delegated questions (B31).

Any OpenAI-compatible chat server (`vllm serve <model>`): `POST /v1/chat/completions`
with `stream: false`, `{"model", "messages", "max_tokens"}` -> the answer is
`choices[0].message.content`. The messages are a system prompt (`instructions` of the
`[delegation]` table, else `DEFAULT_INSTRUCTIONS`) and one user turn: the conversation so
far as labelled lines, the user's own words when there were any, and the question. The
answer is spoken, so a reasoning block (`<think>...</think>`) is cut off before it goes to TTS.

It is a `RemoteStage` like the others (pooled client, replicas, health probes, the one
failure boundary); unlike them it never takes the backend out of service: the VLM was
answering without it, so a background model that is down fails only the answers it owes
(`delegation_failed`). Cancellation closes the request, and vLLM aborts it.
"""

from __future__ import annotations

import json
import re
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Final

from backends.base import BackendUnavailable, DelegationRequest, StageFailed
from backends.remote.client import RemoteStage
from backends.remote.config import RemoteConfigError, StageConfig, parse_delegation_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    import httpx

__all__ = ["DEFAULT_INSTRUCTIONS", "RemoteDelegate", "create_delegate"]

DEFAULT_INSTRUCTIONS: Final = (
    "You are the background expert of a realtime voice assistant that sees through a"
    " camera. The assistant handed you a question it could not answer reliably itself."
    " Answer it correctly and briefly, in one to three plain spoken sentences: your answer"
    " is read aloud, so no markdown, lists or code."
)
_SPEAKERS: Final = {"user": "User", "assistant": "Assistant", "system": "Note"}
_REASONING: Final = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


class RemoteDelegate(RemoteStage):
    """The background model on a fleet of OpenAI-compatible chat servers."""

    name = "delegation"

    def messages(self, request: DelegationRequest) -> list[dict[str, str]]:
        """The chat the background model is asked: the system prompt, then one user turn
        with the conversation so far as labelled lines and the question (one turn, so any
        chat template takes it: some refuse two user turns in a row or a late system turn)."""
        lines = [
            f"{_SPEAKERS.get(turn.role, 'Note')}: {turn.text.strip()}"
            for turn in request.history
            if turn.text.strip()
        ]
        parts = [f"Conversation so far:\n{chr(10).join(lines)}"] if lines else []
        if request.transcript and request.transcript.strip():
            parts.append(f"The user just said: {request.transcript.strip()}")
        parts.append(f"Question: {request.question.strip()}")
        system = self.config.instructions or DEFAULT_INSTRUCTIONS
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    async def answer(self, request: DelegationRequest) -> str:
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": self.messages(request),
            "max_tokens": self.config.max_tokens,
            "stream": False,
        }
        answers = self.stream(
            request.request_id, "/v1/chat/completions", _read_answer, json=payload
        )
        async with aclosing(answers):
            async for text in answers:
                answer = _REASONING.sub("", text).strip()
                if answer.startswith("<think>"):  # cut off while still reasoning
                    raise StageFailed(
                        "delegation: the answer is unfinished reasoning; raise"
                        " delegation.max_tokens or turn the model's thinking off",
                        stage=self.name,
                    )
                return answer
        raise StageFailed("delegation: the server sent no answer", stage=self.name)


async def _read_answer(response: httpx.Response) -> AsyncIterator[str]:
    body = await response.aread()
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise StageFailed(
            f"delegation: not a chat completion ({type(exc).__name__})", stage="delegation"
        ) from exc
    yield content if isinstance(content, str) else ""


def create_delegate(
    delegation: Mapping[str, Any] | StageConfig,
    *,
    connect_timeout_s: float = 2.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> RemoteDelegate:
    """Build (not connect) the background model client from the `[delegation]` table.

    Raises:
        BackendUnavailable: a bad `[delegation]` table (naming the key).
    """
    try:
        config = (
            delegation
            if isinstance(delegation, StageConfig)
            else parse_delegation_config(delegation)
        )
    except RemoteConfigError as exc:
        raise BackendUnavailable(f"delegation: {exc}") from exc
    return RemoteDelegate(config, connect_timeout_s=connect_timeout_s, transport=transport)
