"""Stand-in model servers for the remote backend's default tests: real HTTP on loopback.

`FakeReplica` is a Starlette app served by uvicorn in a thread on 127.0.0.1, speaking
the API shapes the remote backend uses, as vLLM and vLLM-Omni document them:

- `GET /health`: 200 while healthy, else 503;
- `POST /v1/audio/transcriptions` (vLLM, multipart): `{"text": ...}`;
- `POST /v1/chat/completions` with `stream: true` (vLLM): server-sent events,
  `data: {"choices": [{"delta": {"content": ...}}]}` per piece, then `data: [DONE]`;
- `POST /v1/audio/speech` with `stream: true`, `response_format: "pcm"` (vLLM-Omni's
  speech API for Qwen3-TTS): a chunked body of raw PCM16 mono at 24 kHz.

It records every request, and for every stream whether it ran to its end or the client
went away first (`disconnected`): the server side of a cancellation. `die_after` drops
the connection mid-stream after that many pieces and takes the whole server down (the
port then refuses connections), as a crashed replica; `start()` brings it back.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import default
from typing import Any

import anyio
import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeReplica", "Seen", "free_port", "speech_pcm"]

TTS_RATE_HZ = 24_000


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """name -> bytes of a multipart/form-data body (stdlib: no python-multipart here)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=default).parsebytes(head + body)
    assert message.is_multipart(), content_type
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = part.get_payload(decode=True)
    return fields


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def speech_pcm(seconds: float, rate_hz: int = TTS_RATE_HZ) -> bytes:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()


@dataclass
class Seen:
    """One request as the server received it."""

    path: str
    body: dict[str, Any]
    auth: str | None
    started: float = field(default_factory=time.monotonic)
    pieces_sent: int = 0
    finished: bool = False  # the stream ran to its end
    disconnected: bool = False  # the client went away first


class FakeReplica:
    """One stand-in server (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        vlm_pieces: tuple[str, ...] = ("</response>", " Hello", " there.", " I see", " a cat."),
        piece_delay_s: float = 0.0,
        asr_text: str = "what do you see",
        asr_delay_s: float = 0.0,
        tts_seconds: float = 0.5,
        tts_chunk_bytes: int = 4801,  # odd: chunks split samples, as HTTP may
        tts_delay_s: float = 0.0,
        port: int | None = None,
    ) -> None:
        self.name = name
        self.vlm_pieces = vlm_pieces
        self.piece_delay_s = piece_delay_s
        self.asr_text = asr_text
        self.asr_delay_s = asr_delay_s
        self.tts_seconds = tts_seconds
        self.tts_chunk_bytes = tts_chunk_bytes
        self.tts_delay_s = tts_delay_s
        self.port = port or free_port()
        self.healthy = True
        self.status: int | None = None  # answer every model request with this status
        self.die_after: int | None = None  # pieces of a stream before the replica dies
        self.seen: list[Seen] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeReplica:
        if self._thread is not None:  # a killed server: wait until it let go of the port
            self._thread.join(timeout=10)
        app = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/audio/speech", self._speech, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name=self.name)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, f"{self.name} did not start"
            assert self._thread.is_alive(), f"{self.name} failed to start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Shut the server down (the port refuses connections afterwards)."""
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def _die(self) -> None:
        assert self._server is not None
        self._server.should_exit = True
        self._server.force_exit = True

    # --- endpoints --------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200 if self.healthy else 503)

    def _record(self, request: Request, body: dict[str, Any]) -> Seen:
        seen = Seen(request.url.path, body, request.headers.get("authorization"))
        self.seen.append(seen)
        return seen

    async def _transcribe(self, request: Request) -> Response:
        form = _multipart(request.headers["content-type"], await request.body())
        audio = form.pop("file")
        body: dict[str, Any] = {k: v.decode() for k, v in form.items()}
        body["file_bytes"] = len(audio)
        body["file_head"] = audio[:4].decode("latin-1")
        seen = self._record(request, body)
        if self.status is not None:
            return JSONResponse({"error": {"message": "down"}}, status_code=self.status)
        await asyncio.sleep(self.asr_delay_s)
        seen.finished = True
        return JSONResponse({"text": self.asr_text})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        seen = self._record(request, body)
        if self.status is not None:
            return JSONResponse({"error": {"message": "down"}}, status_code=self.status)

        async def events() -> Any:
            try:
                for i, piece in enumerate(self.vlm_pieces):
                    if self.die_after is not None and i >= self.die_after:
                        self._die()
                        raise ConnectionAbortedError(f"{self.name} killed mid-stream")
                    await asyncio.sleep(self.piece_delay_s)
                    chunk = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "model": body.get("model"),
                        "choices": [
                            {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                        ],
                    }
                    yield f"data: {json.dumps(chunk)}\n\n"
                    seen.pieces_sent += 1
                yield "data: [DONE]\n\n"
                seen.finished = True
            except (asyncio.CancelledError, GeneratorExit):
                seen.disconnected = True
                raise

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _speech(self, request: Request) -> Response:
        body = await request.json()
        seen = self._record(request, body)
        if self.status is not None:
            return JSONResponse({"error": {"message": "down"}}, status_code=self.status)
        pcm = speech_pcm(self.tts_seconds)

        async def audio() -> Any:
            try:
                for at in range(0, len(pcm), self.tts_chunk_bytes):
                    await asyncio.sleep(self.tts_delay_s)
                    yield pcm[at : at + self.tts_chunk_bytes]
                    seen.pieces_sent += 1
                seen.finished = True
            except (asyncio.CancelledError, GeneratorExit):
                seen.disconnected = True
                raise

        return StreamingResponse(audio(), media_type="audio/pcm")


@dataclass
class TurnOverhead:
    """One spoken turn, commit to first audio, split into the stage servers' own time
    (as the remote stages timed their requests) and what is left: the server overhead."""

    total_s: float
    asr_s: float  # transcription request, sent -> answer
    vlm_s: float  # chat request sent -> the piece that completed the first sentence
    tts_s: float  # first speech request sent -> its first audio bytes

    @property
    def servers_s(self) -> float:
        return self.asr_s + self.vlm_s + self.tts_s

    @property
    def overhead_s(self) -> float:
        return self.total_s - self.servers_s

    @property
    def overhead_share(self) -> float:
        return self.overhead_s / self.total_s


def turn_overhead(backend: Any, commit_at: float, first_audio_at: float) -> TurnOverhead:
    """Split one turn whose stage timings are the only ones in the stages' `timings`
    (clear them before the turn); times on the anyio clock of the serving process."""
    [asr] = list(backend.asr.timings)
    [vlm] = [t for t in backend.vlm.timings if t.ok or t.items]
    tts = min(backend.tts.timings, key=lambda t: t.sent)
    sentence_at = max(t for t in vlm.items if t <= tts.sent)
    return TurnOverhead(
        total_s=first_audio_at - commit_at,
        asr_s=asr.end - asr.sent,
        vlm_s=sentence_at - vlm.sent,
        tts_s=tts.first_item - tts.sent,
    )


async def measure_turns(
    client: Any, backend: Any, audio: bytes, frame: bytes, turns: int = 5
) -> list[TurnOverhead]:
    """`turns` spoken turns with a frame on one session (a `tests.runtime.conftest.Client`),
    each split into the servers' own time and what the session tier adds."""
    from spec import events as ev

    measured = []
    for _ in range(turns):
        for stage in backend.stages():
            stage.timings.clear()
        await client.send(ev.InputAudioBufferAppend(audio=audio, video_frames=[frame]))
        await client.send(ev.InputAudioBufferCommit(create_response=True))
        committed = anyio.current_time()
        events = await client.until("response.output_audio.delta")
        first_audio = anyio.current_time()
        await client.until("response.done", events)
        measured.append(turn_overhead(backend, committed, first_audio))
    return measured
