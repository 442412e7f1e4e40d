"""The three remote stages: ASR, VLM and TTS as clients of OpenAI-compatible servers.

ASR: `POST /v1/audio/transcriptions` (multipart: a 16 kHz 16-bit WAV, `model`,
    `language`, `response_format=json`, `max_completion_tokens`) -> `{"text": ...}`.
    This is what vLLM serves for Qwen3-ASR: its model class implements vLLM's
    `SupportsTranscription`, so `vllm serve Qwen/Qwen3-ASR-1.7B` answers the
    transcription API with the same prompt the in-process stage builds (Qwen3-ASR ChatML
    with one audio placeholder; a language the session set is prefilled as
    `language English<asr_text>`, else the model detects it) and strips the `language X`
    prefix from the output itself. Chat completions with an audio part would work too, but
    would make this client rebuild that prompt and clean the raw output: the transcription
    API keeps the model's prompt format on the server, where the model is.

VLM: `POST /v1/chat/completions` with `stream: true` (server-sent events). The prompt is
    assembled by `backends.joyai.prompt.build_prompt` (system, bounded history, the
    `[User Query ...]` turn, frames: the oldest history dropped to fit the budget) and
    sent as chat messages whose current user turn carries the frames as `image_url`
    parts with `data:` URLs, in order, after its text. Tokens are estimated here (the
    server holds the tokenizer): one per three ASCII bytes, one per other character,
    rounded up, plus `image_tokens` per frame (256: a 448x448 frame is 196 Qwen3-VL
    tokens; the server bounds frames with its processor's `max_pixels`), which
    overestimates BPE counts, and the
    server's own length check (400) maps to `InvalidPromptContext`. The sampling is
    JoyAI's (`backends.joyai.sampling`); `skip_special_tokens: false` keeps the action
    markers (`</silence>`, `</response>`, `</delegation>`) in the text, and the shared
    `stream_actions` turns the stream into deltas and one decision. With
    `summary_memory` on, the turns the budget drops are summarised in the background
    by the same servers (`backends.joyai.memory`, one text-only chat completion per
    batch) and the session's summary opens its later prompts.
    A session's turns stay on one replica while it is not overloaded (the pool's
    session affinity), where the previous prompt, which the next one extends, is cached.

TTS: `POST /v1/audio/speech` as vLLM-Omni serves it for Qwen3-TTS: `{"model", "input",
    "voice", "response_format": "pcm", "stream": true}` (plus `language` when set) ->
    a chunked body of raw little-endian PCM16 mono at the model's rate (24 kHz for
    Qwen3-TTS-12Hz; `sample_rate_hz`), resampled once, as one stream, to the session's
    output rate (`audio.PcmStream`).
"""

from __future__ import annotations

import base64
import json
import math
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from backends.base import (
    AsrRequest,
    AsrTranscript,
    InvalidPromptContext,
    StageFailed,
    TtsAudio,
    TtsRequest,
    VlmRequest,
)
from backends.joyai.memory import SummaryMemory, session_of
from backends.joyai.prompt import IMAGE_PLACEHOLDER
from backends.joyai.sampling import JOYAI_SAMPLING_PARAMS
from backends.joyai.turn import JoyAITurn, summary_settings
from backends.remote.audio import PcmStream, wav_bytes
from backends.remote.client import RemoteStage

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    import httpx

    from backends.joyai.prompt import BuiltPrompt, ChatMessage
    from backends.remote.config import StageConfig

__all__ = ["RemoteAsr", "RemoteTts", "RemoteVlm", "estimate_tokens"]

ASR_SAMPLE_RATE_HZ: Final = 16_000


def estimate_tokens(text: str) -> int:
    """An upper estimate of a BPE token count: ASCII bytes / 3 plus one per other char."""
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)


def _image_mime(frame: bytes, index: int) -> str:
    if frame.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if frame.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    raise InvalidPromptContext(
        f"prompt context `frames[{index}]` is not a JPEG/PNG image", stage="vlm"
    )


def chat_messages(built: BuiltPrompt) -> list[dict[str, Any]]:
    """The built prompt as chat-completions messages, frames as `data:` URL parts."""
    frames = iter(enumerate(built.images))
    messages: list[dict[str, Any]] = []
    for message in built.messages:
        messages.append(_chat_message(message, frames))
    return messages


def _chat_message(message: ChatMessage, frames: Any) -> dict[str, Any]:
    text = (
        message.text.replace(IMAGE_PLACEHOLDER, "").rstrip("\n") if message.images else message.text
    )
    if not message.images:
        return {"role": message.role, "content": text}
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for _ in range(message.images):
        index, frame = next(frames)
        url = f"data:{_image_mime(frame, index)};base64,{base64.b64encode(frame).decode('ascii')}"
        content.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": message.role, "content": content}


async def _sse_text(response: httpx.Response) -> AsyncIterator[str]:
    """The `delta.content` pieces of a chat-completions event stream, until `[DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        event = json.loads(payload)
        if "error" in event:
            error = event["error"]
            detail = error.get("message", error) if isinstance(error, dict) else error
            raise StageFailed(f"vlm: the server failed mid-stream: {detail}", stage="vlm")
        for choice in event.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                yield piece


async def _json_text(response: httpx.Response) -> AsyncIterator[str]:
    body = json.loads(await response.aread())
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str):
        raise StageFailed(f"asr: the transcription has no text: {str(body)[:200]}", stage="asr")
    yield text


async def _raw_bytes(response: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_bytes():
        if chunk:
            yield chunk


class RemoteAsr(RemoteStage):
    """Qwen3-ASR behind vLLM's transcription API."""

    name = "asr"
    #: one request per committed utterance; vLLM's transcription API is not asked for
    #: live partials, and its text is not read as a sentence-end cue
    live_transcripts = False
    punctuates = False

    @property
    def languages(self) -> tuple[str, ...] | None:
        """The configured `language` (its primary subtag), which every request is forced
        to: it wins over the session's. None without one: Qwen3-ASR detects it."""
        if not self.config.language:
            return None
        return (self.config.language.replace("_", "-").split("-")[0].lower(),)

    async def transcribe(self, request: AsrRequest) -> AsrTranscript:
        pcm = np.ascontiguousarray(request.pcm, dtype=np.float32).reshape(-1)
        if pcm.size == 0:
            return AsrTranscript(request.request_id, "")
        data = {
            "model": self.config.model,
            "response_format": "json",
            "temperature": "0",
            "max_completion_tokens": str(self.config.max_tokens),
        }
        language = self.config.language or request.language
        if language:
            data["language"] = language
        files = {"file": ("utterance.wav", wav_bytes(pcm, ASR_SAMPLE_RATE_HZ), "audio/wav")}
        texts = self.stream(
            request.request_id, "/v1/audio/transcriptions", _json_text, data=data, files=files
        )
        async with aclosing(texts):
            parts = [text async for text in texts]
        return AsrTranscript(request.request_id, " ".join(" ".join(parts).split()))


class RemoteVlm(JoyAITurn, RemoteStage):
    """JoyAI behind vLLM's chat-completions API, streamed."""

    name = "vlm"
    session_affinity = True  # each turn's prompt extends the last one: its prefix is cached

    def __init__(self, config: StageConfig, **options: Any) -> None:
        super().__init__(config, **options)
        self.memory = SummaryMemory(summary_settings(config), self._summarize)
        self.image_tokens = config.image_tokens

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    @property
    def budget_tokens(self) -> int:
        return self.config.budget_tokens

    @property
    def max_images(self) -> int:
        return self.config.max_images

    @property
    def reply_cap(self) -> int:
        return self.config.max_tokens

    async def _summarize(
        self, messages: list[tuple[str, str]], max_tokens: int, job_id: str
    ) -> str:
        """One summary job of the memory: a text-only chat completion, streamed."""
        body = {
            "model": self.config.model,
            "messages": [{"role": role, "content": text} for role, text in messages],
            "stream": True,
            **JOYAI_SAMPLING_PARAMS,
            "max_tokens": max_tokens,
        }
        pieces = self.stream(job_id, "/v1/chat/completions", _sse_text, json=body)
        async with aclosing(pieces):
            return "".join([piece async for piece in pieces])

    def body(self, request: VlmRequest, built: BuiltPrompt | None = None) -> dict[str, Any]:
        """The chat-completions request of one turn (of `built`, else built here)."""
        built = built if built is not None else self.build(request)
        return {
            **self.config.extra_body,  # only keys the stage does not set (checked at parse)
            "model": self.config.model,
            "messages": chat_messages(built),
            "stream": True,
            "skip_special_tokens": False,
            **JOYAI_SAMPLING_PARAMS,
            "max_tokens": self.max_tokens(request),
        }

    def pieces(
        self, request: VlmRequest, built: BuiltPrompt, max_tokens: int
    ) -> AsyncGenerator[str, None]:
        body = self.body(request, built)
        # turns only: a summary job's prompt shares no prefix with them, and would move
        # the session off the replica that caches its turns
        session = session_of(request.request_id)
        return self.stream(
            request.request_id, "/v1/chat/completions", _sse_text, session=session, json=body
        )


class RemoteTts(RemoteStage):
    """Qwen3-TTS behind vLLM-Omni's speech API, streamed as raw PCM16."""

    name = "tts"
    voices: frozenset[str] | None = None  # the server's own voices are not listed

    def __init__(self, config: StageConfig, **options: Any) -> None:
        super().__init__(config, **options)
        self.output_sample_rate_hz = config.sample_rate_hz

    async def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsAudio]:
        text = " ".join(request.text.split())
        if not text:
            return
        body: dict[str, Any] = {
            "model": self.config.model,
            "input": text,
            "response_format": "pcm",
            "stream": True,
        }
        voice = request.voice or self.config.voice
        if voice:
            body["voice"] = voice
        if self.config.language:
            body["language"] = self.config.language
        pcm = PcmStream(self.config.sample_rate_hz, request.sample_rate_hz)
        first = True
        chunks = self.stream(request.request_id, "/v1/audio/speech", _raw_bytes, json=body)
        async with aclosing(chunks):
            async for chunk in chunks:
                out = pcm.feed(chunk)
                if out:
                    yield TtsAudio(request.request_id, out, text if first else "")
                    first = False
