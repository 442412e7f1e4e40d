"""Audio arithmetic the session needs: conversion of client audio to 16 kHz pcm16,
duration, and energy. Pure functions over bytes (numpy), no I/O."""

from __future__ import annotations

import numpy as np

__all__ = [
    "BYTES_PER_MS_16K",
    "SAMPLE_WIDTH",
    "AudioClock",
    "is_loud",
    "to_pcm16_16k",
]

#: bytes per sample of each canonical input format
SAMPLE_WIDTH = {"pcm16": 2, "pcm_f32le": 4, "g711_ulaw": 1, "g711_alaw": 1}
#: 16 kHz mono pcm16: 16 samples * 2 bytes per millisecond
BYTES_PER_MS_16K = 32
_SAMPLES_PER_MS = 16
_BYTES_PER_SAMPLE = 2


class AudioClock:
    """A session's audio clock: the 16 kHz mono pcm16 it has received (`bytes`), and the
    conversions between the three units positions on it are written in."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0

    @property
    def samples(self) -> int:
        return self.bytes // _BYTES_PER_SAMPLE

    @staticmethod
    def samples_of_bytes(n: int) -> int:
        return n // _BYTES_PER_SAMPLE

    @staticmethod
    def bytes_of_samples(n: int) -> int:
        return n * _BYTES_PER_SAMPLE

    @staticmethod
    def samples_of_ms(ms: int) -> int:
        return ms * _SAMPLES_PER_MS

    @staticmethod
    def bytes_of_ms(ms: int) -> int:
        return ms * BYTES_PER_MS_16K


def _ulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    sign, exponent, mantissa = u & 0x80, (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    sign, exponent, mantissa = a & 0x80, (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(
        exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
    )
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


_ULAW = _ulaw_table()
_ALAW = _alaw_table()


def to_pcm16_16k(audio: bytes, fmt: str, rate_hz: int) -> bytes:
    """Convert one chunk to 16 kHz mono pcm16 (linear interpolation between rates).

    `len(audio)` must be a multiple of the format's sample width. No audio (a camera-only
    append) converts to no audio at every rate.
    """
    if not audio or (fmt == "pcm16" and rate_hz == 16_000):
        return audio  # the hot path (or nothing to convert)
    if fmt == "pcm16" and rate_hz == 24_000:
        return _pcm16_24k_to_16k(audio)
    if fmt == "pcm16":
        samples = np.frombuffer(audio, dtype="<i2").astype(np.float32)
    elif fmt == "pcm_f32le":
        floats = np.nan_to_num(np.frombuffer(audio, dtype="<f4"), nan=0.0, posinf=1.0, neginf=-1.0)
        samples = np.clip(floats, -1.0, 1.0) * 32767.0
    elif fmt == "g711_ulaw":
        samples = _ULAW[np.frombuffer(audio, dtype=np.uint8)].astype(np.float32)
    elif fmt == "g711_alaw":
        samples = _ALAW[np.frombuffer(audio, dtype=np.uint8)].astype(np.float32)
    else:  # pragma: no cover - formats are validated before conversion
        raise ValueError(f"unsupported format {fmt}")
    if rate_hz != 16_000:
        n_out = samples.size * 16_000 // rate_hz
        positions = np.arange(n_out, dtype=np.float64) * (rate_hz / 16_000)
        samples = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
    return bytes(np.clip(np.rint(samples), -32768, 32767).astype("<i2").tobytes())


def _pcm16_24k_to_16k(audio: bytes) -> bytes:
    """`to_pcm16_16k` of 24 kHz pcm16 (the GA default input), the same bytes in a third of
    the time: at a 3:2 ratio the interpolation points fall on every third sample and
    halfway between the two after it, so there is nothing to search or weigh."""
    x = np.frombuffer(audio, dtype="<i2")
    whole = x.size // 3
    out = np.empty(x.size * 2 // 3, dtype=np.float32)
    triples = x[: 3 * whole].reshape(whole, 3).astype(np.float32)
    out[0 : 2 * whole : 2] = triples[:, 0]
    out[1 : 2 * whole : 2] = (triples[:, 1] + triples[:, 2]) * 0.5  # exact: both are int16
    if out.size > 2 * whole:  # two samples left over: the first is the point
        out[2 * whole] = x[3 * whole]
    # a half rounds to even, as the general path's np.rint does; nothing can overflow
    return np.rint(out).astype("<i2").tobytes()


def is_loud(pcm16: bytes, floor: float) -> bool:
    """Whether the RMS of `pcm16` (full scale = 1.0) reaches `floor`, without the square root
    or the mean (the append hot path)."""
    x = np.frombuffer(pcm16, dtype="<i2", count=len(pcm16) // 2).astype(np.float32)
    return bool(x.size) and float(x @ x) >= (floor * 32768.0) ** 2 * x.size
