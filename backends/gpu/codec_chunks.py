"""Cutting a TTS stream's codec frames into audio chunks: the growing chunk schedule
(2, 2, 4, 8, 8, ... frames) and the Code2Wav windows that give every chunk the audio
fixed chunks would (see `chunk_schedule` and `_decode_chunks`). Shared by the
one-stream synthesizers (`tts.py`) and the batched streams (`batched_tts.py`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = [
    "DEFAULT_CHUNK_FRAMES",
    "DEFAULT_FIRST_CHUNK_FRAMES",
    "ChunkCutter",
    "Float32Array",
    "chunk_schedule",
]

#: codec frames per streamed chunk once streaming is under way: 8 frames at 12.5 Hz are
#: 640 ms of audio, few Code2Wav calls per utterance
DEFAULT_CHUNK_FRAMES: Final = 8
#: codec frames of the first chunk, the one "time to first audio" waits for: 2 frames
#: (160 ms of audio) are 2 Talker steps where a full chunk is 8
DEFAULT_FIRST_CHUNK_FRAMES: Final = 2
#: faster-qwen3-tts's Code2Wav window: each chunk after the first `max(25, chunk_size)`
#: frames is decoded with 25 frames before it (its `generate_*_streaming` methods)
_DECODE_CONTEXT_FRAMES: Final = 25

Float32Array = npt.NDArray[np.float32]


def chunk_schedule(first_frames: int, chunk_frames: int) -> Iterator[int]:
    """Codec frames per streamed chunk: `first_frames`, then as many as were sent before
    (doubling the audio out) until `chunk_frames` have gone, then `chunk_frames` each:
    2, 2, 4, 8, 8, ... for (2, 8); `first_frames >= chunk_frames` is fixed chunking.

    Doubling keeps generation ahead of playback: each chunk is no longer than the audio
    already sent. Stopping at `chunk_frames` puts every later boundary where fixed chunks
    of `chunk_frames` put theirs, so every Code2Wav window is the fixed one and the audio
    is the same; the chunks before it are cut from decodes of the first `chunk_frames`
    frames (`_decode_chunks`).
    """
    if first_frames < 1 or chunk_frames < 1:
        raise ValueError(f"chunk sizes must be >= 1 frame, got {first_frames}, {chunk_frames}")
    sent = 0
    while sent < chunk_frames:
        size = min(max(first_frames, sent), chunk_frames - sent)
        yield size
        sent += size
    yield from itertools.repeat(chunk_frames)


def _regroup(
    frames: Iterable[Any], sizes: Iterator[int], stop: threading.Event
) -> Iterator[tuple[list[Any], bool]]:
    """`frames` in lists of `sizes`, each with whether it is whole (the last may be
    short); nothing more once `stop` is set."""
    chunk: list[Any] = []
    size = next(sizes)
    for frame in frames:
        if stop.is_set():
            return
        chunk.append(frame)
        if len(chunk) == size:
            yield chunk, True
            chunk, size = [], next(sizes)
    if chunk and not stop.is_set():
        yield chunk, False


def _decode_chunks(
    chunks: Iterable[tuple[list[Any], bool]],
    decode: Callable[[Sequence[Any], int], Float32Array],
    *,
    calibrate_frames: int,
    pad_frames: int,
    context_frames: int = _DECODE_CONTEXT_FRAMES,
) -> Iterator[Float32Array]:
    """The audio of each codec chunk, decoded as faster-qwen3-tts's streaming methods do
    for fixed chunks of `pad_frames`; `decode(frames, n)` decodes `frames` as the first
    of `n >= len(frames)` frames and returns the samples of `frames` only.

    Until `calibrate_frames` frames have come, every frame so far is decoded and the new
    samples are the ones past the previous decode; from then on each chunk is decoded
    with `context_frames` frames before it, whose samples (at the samples per frame
    measured at calibration) are cut off. A decode costs at most context + chunk frames.

    Code2Wav is causal (causal convolutions and attention), so frames decoded as the
    start of a longer run give the same samples. Whole chunks of fewer than `pad_frames`
    are decoded padded to `pad_frames`, the shape fixed chunks decode first, which keeps
    even the rounding the same (bit for bit on the CPU, float32 and bfloat16; unpadded,
    up to 1 bfloat16 step in a few samples of those chunks). A short last chunk is the
    end of the utterance: decoded as it is, as fixed chunks decode it.
    """
    cutter = ChunkCutter(
        calibrate_frames=calibrate_frames, pad_frames=pad_frames, context_frames=context_frames
    )
    for chunk, whole in chunks:
        window, length = cutter.window(chunk, whole)
        yield cutter.cut(decode(window, length))


class ChunkCutter:
    """`_decode_chunks` for a caller that decodes for itself (the batched streams decode
    many streams' windows in one Code2Wav call): `window(chunk, whole)` adds a chunk and
    says which frames to decode as the first of how many, `cut(audio)` takes that
    decode's samples and returns the chunk's. One `cut` follows each `window`."""

    def __init__(
        self,
        *,
        calibrate_frames: int,
        pad_frames: int,
        context_frames: int = _DECODE_CONTEXT_FRAMES,
    ) -> None:
        self.calibrate_frames = calibrate_frames
        self.pad_frames = pad_frames
        self.context_frames = context_frames
        self._frames: list[Any] = []
        self._emitted = 0  # samples sent, while calibrating
        self._samples_per_frame: float | None = None
        self._context = 0  # frames before the chunk in the window given out

    def window(self, chunk: list[Any], whole: bool) -> tuple[list[Any], int]:
        frames = self._frames
        frames.extend(chunk)
        if self._samples_per_frame is None:
            return list(frames), max(len(frames), self.pad_frames if whole else 0)
        start = max(0, len(frames) - len(chunk) - self.context_frames)
        self._context = len(frames) - len(chunk) - start
        window = frames[start:]
        del frames[: max(0, len(frames) - self.context_frames)]  # the next window's context
        return window, len(window)

    def cut(self, audio: Float32Array) -> Float32Array:
        if self._samples_per_frame is None:
            new = audio[self._emitted :]
            self._emitted = audio.size
            if len(self._frames) >= self.calibrate_frames:
                self._samples_per_frame = audio.size / len(self._frames)
            return new
        if self._context > 0:
            return audio[round(self._context * self._samples_per_frame) :]
        return audio
