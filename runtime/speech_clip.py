"""`synthesize_clip`: one spoken clip from a backend's TTS stage, outside any session.

Tools that need real speech without a server (the probe speech of `joyduplex bench
--speech piper`) get it here, so that they reach a concrete backend the way the host
does: by name, through `backends.registry.load_backend`. Only the TTS stage is entered;
the backend's other stages are built (cheap, nothing loaded) and never touched.
"""

from __future__ import annotations

from typing import Any

from backends.base import BackendError, TtsRequest
from backends.registry import load_backend

__all__ = ["SpeechUnavailable", "synthesize_clip"]


class SpeechUnavailable(Exception):
    """The backend cannot speak: unknown, its extra missing, or its TTS failed (the
    message says which)."""


async def synthesize_clip(
    text: str, *, backend: str = "cpu", sample_rate_hz: int = 24_000, **options: Any
) -> bytes:
    """`text` spoken by the TTS stage of the backend named `backend` (built with
    `options`, as `load_backend` takes them), as mono pcm16 at `sample_rate_hz`.

    Raises:
        SpeechUnavailable: the backend could not be built, or its TTS stage could not be
            loaded or failed to speak.
    """
    try:
        tts = load_backend(backend, **options).tts
        async with tts:
            request = TtsRequest("speech_clip", text, sample_rate_hz=sample_rate_hz)
            return b"".join([chunk.pcm16 async for chunk in tts.synthesize(request)])
    except BackendError as exc:
        raise SpeechUnavailable(str(exc)) from exc
