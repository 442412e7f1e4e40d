"""The oracle's media helpers, naive and sample by sample: decoding input audio to
16 kHz PCM16, telling images from other bytes, and cutting reply text into sentences
(docs/session-semantics.md sections 2.1 and 3).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from spec.tables.response import FIRST_CLAUSE_MIN_CHARS

_SAMPLE_BYTES = {"pcm16": 2, "pcm_f32le": 4, "g711_ulaw": 1, "g711_alaw": 1}
_G711 = ("g711_ulaw", "g711_alaw")
_JPEG = b"\xff\xd8"
_PNG = b"\x89PNG"
#: closing quotes and brackets that may follow a sentence end (section 3)
_CLOSERS = "\"')]}\u201d\u2019\u00bb"

# --- audio helpers (naive, sample by sample) -------------------------------------------


def _ulaw(byte: int) -> float:
    u = ~byte & 0xFF
    magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)
    value = magnitude - 0x84
    return (-value if u & 0x80 else value) / 32768.0


def _alaw(byte: int) -> float:
    a = byte ^ 0x55
    exponent = (a >> 4) & 0x07
    mantissa = a & 0x0F
    magnitude = (
        (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
    )
    return (magnitude if a & 0x80 else -magnitude) / 32768.0


def _decode(audio: bytes, fmt: str) -> list[float]:
    """Samples on the float scale [-1, 1]."""
    if fmt == "pcm16":
        return [s / 32768.0 for s in struct.unpack(f"<{len(audio) // 2}h", audio)]
    if fmt == "pcm_f32le":
        out: list[float] = []
        for (s,) in struct.iter_unpack("<f", audio):
            out.append(0.0 if math.isnan(s) else max(-1.0, min(1.0, s)))
        return out
    if fmt == "g711_ulaw":
        return [_ulaw(b) for b in audio]
    return [_alaw(b) for b in audio]


def _to_pcm16_16k(audio: bytes, fmt: str, rate: int) -> tuple[bytes, float]:
    """Convert to 16 kHz mono pcm16: `floor(samples * 16000 / rate)` samples, linear
    interpolation (section 2.1); also return the RMS of the converted audio on the float
    scale."""
    samples = _decode(audio, fmt)
    if fmt == "pcm16" and rate == 16_000:
        rms = math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0
        return audio, rms
    if rate != 16_000:
        n_out = len(samples) * 16_000 // rate  # may be 0
        resampled: list[float] = []
        for i in range(n_out):
            pos = i * rate / 16_000
            lo = min(int(pos), len(samples) - 1)
            hi = min(lo + 1, len(samples) - 1)
            frac = pos - int(pos)
            resampled.append(samples[lo] * (1.0 - frac) + samples[hi] * frac)
        samples = resampled
    ints = [max(-32768, min(32767, round(s * 32767))) for s in samples]
    pcm = struct.pack(f"<{len(ints)}h", *ints)
    rms = math.sqrt(sum((i / 32768.0) ** 2 for i in ints) / len(ints)) if ints else 0.0
    return pcm, rms


def _ms(pcm16: bytes) -> float:
    """Duration of 16 kHz pcm16 audio (`audio_ms` = samples / 16)."""
    return (len(pcm16) // 2) / 16.0


def _is_image(frame: bytes) -> bool:
    return frame.startswith(_JPEG) or frame.startswith(_PNG)


def _data_url_image(url: str | None) -> bytes | None:
    """Decode a `data:` URL holding a JPEG or PNG; None when it is not one."""
    if not url or not url.startswith("data:") or "," not in url:
        return None
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        return None
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if raw and _is_image(raw) else None


def _sentences(text: str, *, first: bool = False) -> tuple[list[str], str]:
    """Split off every completed sentence: `.`, `!` or `?`, optionally followed by closing
    quotes or brackets, then whitespace (section 3). `first`: nothing of the reply was
    spoken yet, so its first piece also ends at a clause end (`,` `;` `:` with closers, or
    a dash between spaces, then whitespace) once it holds `FIRST_CLAUSE_MIN_CHARS`."""
    done: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        j = -1
        if text[i] in ".!?" or (first and not done and text[i] in ",;:"):
            j = i + 1
            while j < len(text) and text[j] in _CLOSERS:
                j += 1
            spaced = j < len(text) and text[j].isspace()
            short = text[i] in ",;:" and len(text[start:j].strip()) < FIRST_CLAUSE_MIN_CHARS
            if not spaced or short:
                j = -1
        elif (
            first
            and not done
            and text[i] in "-\u2013\u2014"
            and 0 < i < len(text) - 1
            and text[i - 1].isspace()
            and text[i + 1].isspace()
            and len(text[start : i + 1].strip()) >= FIRST_CLAUSE_MIN_CHARS
        ):
            j = i + 1
        if j >= 0:
            piece = text[start:j].strip()
            if piece:
                done.append(piece)
            start = j
            i = j
            continue
        i += 1
    return done, text[start:]
