"""Audio on the wire: utterances to WAV for upload, streamed PCM16 to the session's rate.

`PcmStream` takes the raw PCM16 bytes of a speech stream as the HTTP chunks deliver them
(a chunk may end in the middle of a sample) and returns whole samples at the session's
output rate. Resampling is linear and continuous across chunks: the position of the next
output sample and the last input sample carry over, so the audio is resampled once, as
one signal, wherever the chunk boundaries fall (no clicks, no drift: n input samples give
round(n * target / source) output samples, within one).
"""

from __future__ import annotations

import io
import wave

import numpy as np
import numpy.typing as npt

__all__ = ["PcmStream", "wav_bytes"]


def wav_bytes(pcm: npt.NDArray[np.float32], sample_rate_hz: int) -> bytes:
    """Float32 [-1, 1] mono -> a 16-bit PCM WAV file."""
    samples = np.clip(np.asarray(pcm, dtype=np.float32).reshape(-1), -1.0, 1.0)
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate_hz)
        wav.writeframes((samples * 32767.0).round().astype("<i2").tobytes())
    return out.getvalue()


class PcmStream:
    """Streamed PCM16 at `source_hz` -> PCM16 at `target_hz`, chunk by chunk.

    Output sample k lies at input position k * source_hz / target_hz, computed in whole
    numbers from the counts of samples taken and given so far, so the result does not
    depend on where the chunks were cut."""

    __slots__ = ("_consumed", "_last", "_odd", "_produced", "source_hz", "target_hz")

    def __init__(self, source_hz: int, target_hz: int) -> None:
        self.source_hz = source_hz
        self.target_hz = target_hz
        self._odd = b""  # a trailing half sample of the last chunk
        self._last: npt.NDArray[np.float64] | None = None  # the last input sample seen
        self._consumed = 0  # input samples taken
        self._produced = 0  # output samples given

    def feed(self, data: bytes) -> bytes:
        """Add raw bytes; return the whole output samples they complete."""
        data = self._odd + data
        whole = len(data) - len(data) % 2
        self._odd = data[whole:]
        if whole == 0:
            return b""
        if self.source_hz == self.target_hz:
            return data[:whole]
        new = np.frombuffer(data[:whole], dtype="<i2").astype(np.float64)
        first = self._consumed - (0 if self._last is None else 1)  # index of samples[0]
        samples = new if self._last is None else np.concatenate([self._last, new])
        self._consumed += new.size
        self._last = samples[-1:]
        # every output sample whose position is at or before the last input sample
        end = (self._consumed - 1) * self.target_hz // self.source_hz + 1
        k = np.arange(self._produced, end, dtype=np.int64)
        self._produced = max(self._produced, end)
        if k.size == 0:
            return b""
        position = k * self.source_hz
        index = position // self.target_hz - first
        frac = (position % self.target_hz) / self.target_hz
        following = np.minimum(index + 1, samples.size - 1)
        out = samples[index] * (1.0 - frac) + samples[following] * frac
        pcm: bytes = np.clip(np.round(out), -32768, 32767).astype("<i2").tobytes()
        return pcm
