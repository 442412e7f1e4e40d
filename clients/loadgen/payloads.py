"""What the sessions send, encoded once before the run: quiet noise appends, the probe
speech clip cut into appends (and where its voice is), and the camera frame.

The probe speech is a pcm16 WAV, or `piper`: a sentence spoken by the cpu backend's TTS
stage, reached by name through the backend registry (`runtime.speech_clip`), as the
server reaches its backend.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from clients.cli import InputFileError, read_wav_mono
from clients.loadgen.options import RATE_HZ, BenchUsageError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "FRAME_JPEG_BASE64",
    "NOISE_DBFS",
    "PIPER_TEXT",
    "Speech",
    "append_json",
    "load_speech",
    "noise_chunks",
    "noise_payloads",
    "speech_payloads",
    "voiced_span",
]

NOISE_DBFS = -60.0
NOISE_POOL = 8  # distinct noise chunks, so the noise is not a 1/append_ms periodic tone
PIPER_TEXT = "Hello there. What can you see on the camera right now?"

#: a 32x24 JPEG camera frame (a flat grey-blue picture), 643 bytes
FRAME_JPEG_BASE64 = (
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERX"
    "RTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
    "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAYACADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA"
    "AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk"
    "M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT"
    "lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA"
    "HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh"
    "cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp"
    "anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk"
    "5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwCGiiiuw5wooooAKKKKACiiigD/2Q=="
)


@dataclass(frozen=True, slots=True)
class Speech:
    """The probe clip as pre-encoded appends, and where its voice is (chunk indices)."""

    chunks: list[bytes]
    #: the same chunks as raw 24 kHz pcm16 (what a WebRTC microphone track sends)
    pcm_chunks: list[bytes]
    voiced_first: int | None
    voiced_last: int | None
    seconds: float
    source: str


def append_json(pcm16: bytes) -> bytes:
    audio = base64.b64encode(pcm16)
    return b'{"type":"input_audio_buffer.append","audio":"' + audio + b'"}'


def noise_chunks(append_ms: int, count: int = NOISE_POOL) -> list[bytes]:
    """`count` distinct chunks of quiet noise (raw 24 kHz pcm16), `append_ms` each."""
    samples = RATE_HZ * append_ms // 1000
    sigma = 32768.0 * 10 ** (NOISE_DBFS / 20)
    rng = np.random.default_rng(12)
    chunks = np.clip(np.round(rng.normal(0.0, sigma, (count, samples))), -32768, 32767)
    return [chunk.astype("<i2").tobytes() for chunk in chunks]


def noise_payloads(append_ms: int, count: int = NOISE_POOL) -> list[bytes]:
    return [append_json(chunk) for chunk in noise_chunks(append_ms, count)]


def voiced_span(pcm: npt.NDArray[np.int16]) -> tuple[int, int] | None:
    """First and last voiced sample: 10 ms frames within 35 dB of the loudest frame and
    above -50 dBFS."""
    frame = RATE_HZ // 100
    count = len(pcm) // frame
    if count == 0:
        return None
    frames = pcm[: count * frame].astype(np.float64).reshape(count, frame) / 32768.0
    rms = np.sqrt(np.mean(np.square(frames), axis=1))
    with np.errstate(divide="ignore"):
        db = 20 * np.log10(np.maximum(rms, 1e-10))
    voiced = np.flatnonzero(db >= max(float(db.max()) - 35.0, -50.0))
    if voiced.size == 0 or float(db.max()) < -50.0:
        return None
    return int(voiced[0]) * frame, (int(voiced[-1]) + 1) * frame - 1


def speech_payloads(pcm16: bytes, append_ms: int, source: str) -> Speech:
    """The clip (24 kHz pcm16) cut into appends; the last is padded with noise."""
    samples = RATE_HZ * append_ms // 1000
    pcm = np.frombuffer(pcm16, dtype="<i2")
    if pcm.size == 0:
        raise BenchUsageError(f"the speech `{source}` is empty")
    pad = (-pcm.size) % samples
    sigma = 32768.0 * 10 ** (NOISE_DBFS / 20)
    noise = np.round(np.random.default_rng(13).normal(0.0, sigma, pad)).astype("<i2")
    padded = np.concatenate([pcm, noise])
    pcm_chunks = [padded[i : i + samples].tobytes() for i in range(0, padded.size, samples)]
    span = voiced_span(pcm)
    first, last = (span[0] // samples, span[1] // samples) if span else (None, None)
    return Speech(
        [append_json(c) for c in pcm_chunks],
        pcm_chunks,
        first,
        last,
        round(pcm.size / RATE_HZ, 3),
        source,
    )


async def load_speech(speech: str, append_ms: int) -> Speech:
    """`speech` (a WAV path or "piper") as probe payloads.

    Raises:
        BenchUsageError: the file cannot be used, or Piper is not installed.
    """
    if speech == "piper":
        return speech_payloads(await _piper_speech(), append_ms, "piper")
    try:
        pcm16 = read_wav_mono(Path(speech), RATE_HZ)
    except InputFileError as exc:
        raise BenchUsageError(str(exc)) from exc
    return speech_payloads(pcm16, append_ms, speech)


async def _piper_speech() -> bytes:
    # imported here: only `--speech piper` needs the backend registry
    from runtime.speech_clip import SpeechUnavailable, synthesize_clip

    try:
        # Piper by name: the probe speech stays the clip the bench's figures were taken
        # with, whatever the cpu backend's default voice is
        return await synthesize_clip(
            PIPER_TEXT, backend="cpu", sample_rate_hz=RATE_HZ, tts="piper", tts_deterministic=True
        )
    except SpeechUnavailable as exc:
        raise BenchUsageError(f"`--speech piper` needs the cpu and piper extras: {exc}") from exc
