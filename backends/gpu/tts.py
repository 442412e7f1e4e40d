"""The voice stage: Qwen3-TTS-12Hz-1.7B-CustomVoice (Talker + Code2Wav), text -> pcm16.

Runtime (see README "Why the TTS runtime is not vLLM"): neither vLLM nor the installed
transformers (5.24) implements Qwen3-TTS; vLLM-Omni's plugin pins vllm 0.30 and a
transformers range that the vLLM we use excludes. So the Talker and Code2Wav run in
this process with torch, from the `qwen_tts` modeling code (PyPI `qwen-tts-hf`, the
transformers-5 build of the official package), on the placement's device:

- `CudaGraphSynthesizer` (default): `faster-qwen3-tts` captures the Talker decode step
  and the multi-codebook predictor as `torch.cuda.CUDAGraph`s at warm-up (static KV
  cache of `max_model_len` positions) and streams codec chunks through the 12 Hz
  tokenizer's decoder (Code2Wav) with a left context, so audio starts after the first
  chunk instead of after the whole utterance;
- `EagerSynthesizer` (`enforce_eager = true`, or no CUDA): `qwen_tts.Qwen3TTSModel`
  in eager mode, whole utterance then chunked; for debugging.

Both produce float32 mono at 24 kHz; the stage converts to pcm16 at the requested rate
and runs one utterance at a time per device (the graphs are captured for batch 1).
Speaker defaults to "Vivian", language to "Auto", as upstream's JoyAI -> TTS bridge.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

import anyio
import numpy as np
import numpy.typing as npt

from backends.base import StageFailed, TtsChunk, TtsRequest
from backends.gpu.errors import map_engine_errors

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from types import TracebackType

    from backends.gpu.placement import StagePlacement

__all__ = [
    "TTS_SAMPLE_RATE_HZ",
    "CudaGraphSynthesizer",
    "EagerSynthesizer",
    "SpeechSynthesizer",
    "TtsStage",
    "make_synthesizer",
    "to_pcm16",
]

TTS_SAMPLE_RATE_HZ: Final = 24_000
#: codec frames per streamed chunk: 12 frames at 12.5 Hz is about 1 s of audio; the first
#: chunk is what "time to first audio" waits for
DEFAULT_CHUNK_FRAMES: Final = 8
_EAGER_CHUNK_S: Final = 0.2

Float32Array = npt.NDArray[np.float32]


class SpeechSynthesizer(Protocol):
    """A loaded Qwen3-TTS runtime; blocking calls, run in a worker thread by the stage."""

    sample_rate_hz: int

    def load(self) -> None: ...

    def warmup(self) -> None: ...

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        """Yield float32 mono chunks until done or until `stop` is set."""
        ...

    def close(self) -> None: ...


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, "bfloat16" if name == "auto" else name)


class CudaGraphSynthesizer:
    """faster-qwen3-tts: Talker + predictor as CUDA Graphs, streaming Code2Wav."""

    def __init__(
        self,
        model_path: str,
        *,
        device: str,
        dtype: str = "bfloat16",
        max_seq_len: int = 4096,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
    ) -> None:
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.max_seq_len = max_seq_len
        self.chunk_frames = chunk_frames
        self.sample_rate_hz = TTS_SAMPLE_RATE_HZ
        self._model: Any = None

    def load(self) -> None:
        from faster_qwen3_tts import FasterQwen3TTS

        self._model = FasterQwen3TTS.from_pretrained(
            self.model_path,
            device=self.device,
            dtype=_torch_dtype(self.dtype),
            max_seq_len=self.max_seq_len,
            local_files_only=True,
        )

    def warmup(self) -> None:
        self._model.warmup(prefill_len=100)  # captures both graphs

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        chunks = self._model.generate_custom_voice_streaming(
            text=text, speaker=speaker, language=language, chunk_size=self.chunk_frames
        )
        try:
            for audio, rate, _timing in chunks:
                if stop.is_set():
                    return
                self.sample_rate_hz = int(rate)
                yield np.asarray(audio, dtype=np.float32).reshape(-1)
        finally:
            chunks.close()

    def close(self) -> None:
        self._model = None


class EagerSynthesizer:
    """qwen_tts eager (no graphs): the whole utterance, then fixed-size chunks."""

    def __init__(self, model_path: str, *, device: str, dtype: str = "bfloat16") -> None:
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.sample_rate_hz = TTS_SAMPLE_RATE_HZ
        self._model: Any = None

    def load(self) -> None:
        from qwen_tts import Qwen3TTSModel

        self._model = Qwen3TTSModel.from_pretrained(
            self.model_path, device_map=self.device, dtype=_torch_dtype(self.dtype)
        )

    def warmup(self) -> None:
        for _ in self.stream("Hello.", speaker="Vivian", language="Auto", stop=threading.Event()):
            pass

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        wavs, rate = self._model.generate_custom_voice(
            text=text, speaker=speaker, language=language
        )
        self.sample_rate_hz = int(rate)
        audio = np.asarray(wavs[0], dtype=np.float32).reshape(-1)
        step = max(1, int(rate * _EAGER_CHUNK_S))
        for start in range(0, audio.size, step):
            if stop.is_set():
                return
            yield audio[start : start + step]

    def close(self) -> None:
        self._model = None


def make_synthesizer(placement: StagePlacement) -> SpeechSynthesizer:
    """CUDA Graphs unless the placement says `enforce_eager`."""
    device = f"cuda:{placement.device}"
    if placement.enforce_eager:
        return EagerSynthesizer(placement.model, device=device, dtype=placement.dtype)
    return CudaGraphSynthesizer(
        placement.model, device=device, dtype=placement.dtype, max_seq_len=placement.max_model_len
    )


def to_pcm16(audio: Float32Array, source_hz: int, target_hz: int) -> bytes:
    """Float32 [-1, 1] mono -> pcm16 little-endian at `target_hz` (linear resampling)."""
    samples = np.asarray(audio, dtype=np.float32).reshape(-1)
    if source_hz != target_hz and samples.size:
        n_out = max(1, round(samples.size * target_hz / source_hz))
        positions = np.arange(n_out, dtype=np.float64) * (source_hz / target_hz)
        samples = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
    clipped = np.clip(samples, -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


class TtsStage:
    """Qwen3-TTS behind a `SpeechSynthesizer`, one utterance at a time."""

    name = "tts"
    output_sample_rate_hz = TTS_SAMPLE_RATE_HZ

    def __init__(self, synthesizer: SpeechSynthesizer, placement: StagePlacement) -> None:
        self.synthesizer = synthesizer
        self.placement = placement
        self._lock = anyio.Lock()
        self._stops: dict[str, threading.Event] = {}

    async def __aenter__(self) -> Self:
        with map_engine_errors(self.name):
            await anyio.to_thread.run_sync(self.synthesizer.load)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for stop in self._stops.values():
            stop.set()
        with map_engine_errors(self.name):
            self.synthesizer.close()

    async def warmup(self) -> None:
        with map_engine_errors(self.name):
            await anyio.to_thread.run_sync(self.synthesizer.warmup)

    async def abort(self, request_id: str) -> None:
        stop = self._stops.get(request_id)
        if stop is not None:
            stop.set()

    async def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsChunk]:
        text = " ".join(request.text.split())
        if not text:
            return
        if request.request_id in self._stops:
            raise StageFailed(f"tts: request {request.request_id} is already running", stage="tts")
        stop = threading.Event()
        self._stops[request.request_id] = stop
        end = object()
        try:
            async with self._lock:
                with map_engine_errors(self.name):
                    chunks = self.synthesizer.stream(
                        text,
                        speaker=request.voice or self.placement.speaker,
                        language=self.placement.language,
                        stop=stop,
                    )
                first = True
                try:
                    while not stop.is_set():
                        with map_engine_errors(self.name):
                            audio = await anyio.to_thread.run_sync(next, chunks, end)
                        if audio is end:
                            break
                        assert isinstance(audio, np.ndarray)
                        pcm = to_pcm16(
                            audio, self.synthesizer.sample_rate_hz, request.sample_rate_hz
                        )
                        if pcm:
                            yield TtsChunk(pcm, text=text if first else "")
                            first = False
                finally:
                    stop.set()
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(_close_iterator, chunks)
        finally:
            self._stops.pop(request.request_id, None)


def _close_iterator(iterator: Iterator[Any]) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
