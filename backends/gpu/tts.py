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
- `EagerSynthesizer` (`enforce_eager = true` or
  `device = "cpu"`): `qwen_tts.Qwen3TTSModel` in eager mode, whole utterance then
  chunked; for debugging, and the CPU route the tests run with a tiny random checkpoint
  (`tools/gpu_tiny_models.py`).

Both cut their audio by `chunk_schedule`: a first chunk of `first_chunk_frames` codec
frames (2 by default: 160 ms of audio, so first audio waits for 2 Talker steps, not 8),
then chunks doubling what was sent until `chunk_frames`, then `chunk_frames` each. The
audio is that of fixed chunks of `chunk_frames`, bit for bit once an utterance has that
many frames (`chunk_schedule`, `_decode_chunks`).

Both load `qwen_tts` through `import_qwen_tts()`, which works around two problems of
`qwen-tts-hf` 0.1.1.post1 (see README "TTS on CPU"): its package imports the 25 Hz
tokenizer (torchaudio, sox, onnxruntime) even for 12 Hz checkpoints, and its RoPE
registry patch reads `config.rope_theta`, which transformers 5 configs (Mimi) no longer
have.

Both produce float32 mono at 24 kHz; the stage converts to pcm16 at the requested rate
and runs one utterance at a time per device (the graphs are captured for batch 1), unless
the placement's `batch_streams` picks `batched_tts.BatchedSynthesizer` (many at once).
Speaker defaults to "Vivian", language to "Auto", as upstream's JoyAI -> TTS bridge.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import numpy as np

from backends.base import StageFailed, StageLifecycle, TtsAudio, TtsRequest
from backends.gpu.codec_chunks import (
    _DECODE_CONTEXT_FRAMES,
    DEFAULT_CHUNK_FRAMES,
    DEFAULT_FIRST_CHUNK_FRAMES,
    Float32Array,
    _decode_chunks,
    _regroup,
    chunk_schedule,
)
from backends.gpu.device_audit import device_audit
from backends.gpu.errors import map_engine_errors
from backends.gpu.qwen_tts_import import _torch_dtype, import_qwen_tts

if TYPE_CHECKING:
    from collections.abc import (
        AsyncIterator,
        Callable,
        Generator,
        Iterator,
        Sequence,
    )

    from backends.gpu.placement import StagePlacement

__all__ = [
    "CODEC_FRAME_RATE_HZ",
    "DEFAULT_CHUNK_FRAMES",
    "DEFAULT_FIRST_CHUNK_FRAMES",
    "TTS_SAMPLE_RATE_HZ",
    "CudaGraphSynthesizer",
    "EagerSynthesizer",
    "SpeechSynthesizer",
    "TtsStage",
    "chunk_schedule",
    "import_qwen_tts",
    "make_synthesizer",
    "to_pcm16",
]

TTS_SAMPLE_RATE_HZ: Final = 24_000
#: the 12 Hz tokenizer's codec frames per second: a frame is 80 ms, 1920 samples at 24 kHz
CODEC_FRAME_RATE_HZ: Final = 12.5
logger = logging.getLogger(__name__)


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
        first_chunk_frames: int = DEFAULT_FIRST_CHUNK_FRAMES,
        max_new_tokens: int | None = None,
    ) -> None:
        next(chunk_schedule(first_chunk_frames, chunk_frames))  # refuses sizes < 1 now
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.max_seq_len = max_seq_len
        self.chunk_frames = chunk_frames
        self.first_chunk_frames = first_chunk_frames
        self.max_new_tokens = max_new_tokens  # codec frames per utterance (12.5 per second)
        self.sample_rate_hz = TTS_SAMPLE_RATE_HZ
        self._model: Any = None
        self._per_frame = False

    def load(self) -> None:
        import_qwen_tts()
        from faster_qwen3_tts import FasterQwen3TTS

        self._model = FasterQwen3TTS.from_pretrained(
            self.model_path,
            device=self.device,
            dtype=_torch_dtype(self.dtype),
            max_seq_len=self.max_seq_len,
            local_files_only=True,
        )
        # `generate_custom_voice_streaming` takes one chunk size for the whole utterance;
        # the generator under it, asked for 1 frame at a time, lets `chunk_schedule` cut
        self._per_frame = hasattr(self._model, "_prepare_generation_custom") and hasattr(
            importlib.import_module("faster_qwen3_tts.streaming"), "fast_generate_streaming"
        )
        if not self._per_frame:
            logger.warning(
                "faster-qwen3-tts has no per-frame generator here: TTS chunks are all %d"
                " frames, the first included",
                self.chunk_frames,
            )

    def warmup(self) -> None:
        self._model.warmup(prefill_len=100)  # captures both graphs

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        if not self._per_frame:
            yield from self._stream_fixed(text, speaker=speaker, language=language, stop=stop)
            return
        frames = self._codec_frames(text, speaker=speaker, language=language)
        try:
            chunks = _regroup(
                frames, chunk_schedule(self.first_chunk_frames, self.chunk_frames), stop
            )
            yield from _decode_chunks(
                chunks,
                self._decode,
                calibrate_frames=max(_DECODE_CONTEXT_FRAMES, self.chunk_frames),
                pad_frames=self.chunk_frames,
            )
        finally:
            frames.close()

    def _codec_frames(
        self, text: str, *, speaker: str, language: str
    ) -> Generator[Any, None, None]:
        """The utterance's codec frames (one row of ids per Talker step) from the generator
        and preparation `generate_custom_voice_streaming` uses, with its sampling defaults."""
        from faster_qwen3_tts.streaming import fast_generate_streaming

        model = self._model
        base = model.model  # qwen_tts.Qwen3TTSModel
        if base.model.tts_model_type != "custom_voice":
            raise ValueError("the TTS checkpoint is not a CustomVoice model")
        base._validate_languages([language])
        base._validate_speakers([speaker])
        # non_streaming_mode=True: that method's default for CustomVoice (whole text prefilled)
        _, talker, config, embeds, mask, trailing, pad = model._prepare_generation_custom(
            text=text, language=language, speaker=speaker, instruct=None, non_streaming_mode=True
        )
        extra: dict[str, Any] = {}
        if self.max_new_tokens is not None:
            extra["max_new_tokens"] = self.max_new_tokens
        steps = fast_generate_streaming(
            talker=talker,
            talker_input_embeds=embeds,
            attention_mask=mask,
            trailing_text_hiddens=trailing,
            tts_pad_embed=pad,
            config=config,
            predictor_graph=model.predictor_graph,
            talker_graph=model.talker_graph,
            chunk_size=1,
            **extra,
        )
        try:
            for codes, _timing in steps:
                yield from codes
        finally:
            steps.close()

    def _decode(self, frames: Sequence[Any], length: int) -> Float32Array:
        import torch

        with torch.inference_mode():
            codes = torch.stack(list(frames))
            if length > codes.shape[0]:
                # -1 is qwen_tts's batch padding: decoded as code 0, its samples cut off
                pad = codes.new_full((length - codes.shape[0], codes.shape[1]), -1)
                codes = torch.cat([codes, pad])
            wavs, rate = self._model.speech_tokenizer.decode({"audio_codes": codes.unsqueeze(0)})
        self.sample_rate_hz = int(rate)
        return np.asarray(wavs[0], dtype=np.float32).reshape(-1)

    def _stream_fixed(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        extra: dict[str, Any] = {}
        if self.max_new_tokens is not None:
            extra["max_new_tokens"] = self.max_new_tokens
        chunks = self._model.generate_custom_voice_streaming(
            text=text, speaker=speaker, language=language, chunk_size=self.chunk_frames, **extra
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
    """qwen_tts eager (no graphs): the whole utterance, then cut by `chunk_schedule` as
    the graphs' stream is, so that the CPU tests see the chunks a GPU sends.

    Runs on CUDA (`enforce_eager`, debugging) or on the CPU (`device = "cpu"`, tests).
    """

    def __init__(
        self,
        model_path: str,
        *,
        device: str,
        dtype: str = "bfloat16",
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        first_chunk_frames: int = DEFAULT_FIRST_CHUNK_FRAMES,
        max_new_tokens: int | None = None,
    ) -> None:
        next(chunk_schedule(first_chunk_frames, chunk_frames))  # refuses sizes < 1 now
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.chunk_frames = chunk_frames
        self.first_chunk_frames = first_chunk_frames
        self.max_new_tokens = max_new_tokens
        self.sample_rate_hz = TTS_SAMPLE_RATE_HZ
        self._model: Any = None

    def load(self) -> None:
        qwen_tts = import_qwen_tts()
        kwargs: dict[str, Any] = {"dtype": _torch_dtype(self.dtype, self.device)}
        if self.device != "cpu":
            kwargs["device_map"] = self.device  # needs accelerate; the CPU needs no map
        self._model = qwen_tts.Qwen3TTSModel.from_pretrained(self.model_path, **kwargs)

    def warmup(self) -> None:
        for _ in self.stream("Hello.", speaker="Vivian", language="Auto", stop=threading.Event()):
            pass

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Float32Array]:
        if stop.is_set():
            return
        extra: dict[str, Any] = {}
        if self.max_new_tokens is not None:
            extra["max_new_tokens"] = self.max_new_tokens
        wavs, rate = self._model.generate_custom_voice(
            text=text, speaker=speaker, language=language, **extra
        )
        self.sample_rate_hz = int(rate)
        audio = np.asarray(wavs[0], dtype=np.float32).reshape(-1)
        frame = round(rate / CODEC_FRAME_RATE_HZ)
        start = 0
        for frames in chunk_schedule(self.first_chunk_frames, self.chunk_frames):
            if stop.is_set() or start >= audio.size:
                return
            yield audio[start : start + frames * frame]
            start += frames * frame

    def close(self) -> None:
        self._model = None


def make_synthesizer(placement: StagePlacement) -> SpeechSynthesizer:
    """The batched streams when the placement sets `batch_streams`; else CUDA Graphs,
    unless the placement says `enforce_eager` or the CPU: then eager `qwen_tts`. The
    placement's runtime does not matter: vLLM never runs the TTS."""
    device = placement.torch_device
    if placement.batch_streams > 0:
        from backends.gpu.batched_tts import BatchedSynthesizer  # it imports this module

        return BatchedSynthesizer(
            placement.model,
            device=device,
            dtype=placement.dtype,
            slots=placement.batch_streams,
            max_len=placement.max_model_len,
            max_new_tokens=placement.max_tokens,
            graphs=placement.cuda_graphs,
            device_audit=placement.device_audit,
        )
    if placement.enforce_eager or device == "cpu":
        return EagerSynthesizer(
            placement.model,
            device=device,
            dtype=placement.dtype,
            max_new_tokens=placement.max_tokens,
        )
    return CudaGraphSynthesizer(
        placement.model,
        device=device,
        dtype=placement.dtype,
        max_seq_len=placement.max_model_len,
        max_new_tokens=placement.max_tokens,
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


def speakers_of(model: object) -> frozenset[str] | None:
    """The speaker names a Qwen3-TTS CustomVoice model knows, wherever it keeps them."""
    if model is None:
        return None
    listing = getattr(model, "get_supported_speakers", None)
    if callable(listing):
        try:
            names = listing()
        except Exception:  # a listing that fails validates nothing
            names = None
        if names:
            return frozenset(str(n) for n in names)
    for path in (("config", "talker_config"), ("model", "config", "talker_config")):
        node: object = model
        for attr in path:
            node = getattr(node, attr, None)
        table = getattr(node, "spk_id", None)
        if isinstance(table, dict) and table:
            return frozenset(str(n) for n in table)
    return None


class TtsStage(StageLifecycle):
    """Qwen3-TTS behind a `SpeechSynthesizer`, one utterance at a time (or as many as a
    concurrent one, the batched streams, serves)."""

    name = "tts"
    output_sample_rate_hz = TTS_SAMPLE_RATE_HZ

    def __init__(self, synthesizer: SpeechSynthesizer, placement: StagePlacement) -> None:
        self.synthesizer = synthesizer
        self.placement = placement
        self._lock = anyio.Lock()
        self._stops: dict[str, threading.Event] = {}
        # a concurrent synthesizer's streams each wait in a worker thread for their next
        # chunk: their own threads, so 32 talking sessions never take the default
        # limiter's (40) from the other stages' host work
        slots = int(getattr(synthesizer, "slots", 0)) if self._concurrent else 0
        self._waits = anyio.CapacityLimiter(slots + 1) if slots else None

    @property
    def _concurrent(self) -> bool:
        return bool(getattr(self.synthesizer, "concurrent", False))

    async def load(self) -> None:
        with map_engine_errors(self.name):
            await anyio.to_thread.run_sync(self.synthesizer.load)

    def observe_timing(self, sink: Callable[[str, float], None]) -> None:
        """Where the synthesizer times its streams (the batched one), `sink(stage,
        seconds)` hears it: the server's stage latency histograms."""
        if hasattr(self.synthesizer, "on_timing"):
            self.synthesizer.on_timing = sink

    @property
    def voices(self) -> frozenset[str] | None:
        """The CustomVoice speakers of the loaded checkpoint (None before loading or when
        the model does not list them): `session.update` refuses any other voice, as
        vLLM-Omni's JoyAI TTS bridge checks the Talker's speaker table."""
        return speakers_of(getattr(self.synthesizer, "_model", None))

    async def release(self) -> None:
        for stop in self._stops.values():
            stop.set()
        with map_engine_errors(self.name):
            self.synthesizer.close()

    async def warmup(self) -> None:
        with map_engine_errors(self.name):
            await anyio.to_thread.run_sync(self._in_audit, self.synthesizer.warmup)

    def _in_audit(self, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` under the placement's device audit (device_audit.py), in the
        worker thread that runs it; loading is not audited (meta-device init)."""
        placement = self.placement
        with device_audit(self.name, placement.torch_device, enabled=placement.device_audit):
            return work(*args)

    async def abort(self, request_id: str) -> None:
        stop = self._stops.get(request_id)
        if stop is not None:
            stop.set()

    async def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsAudio]:
        text = " ".join(request.text.split())
        if not text:
            return
        if request.request_id in self._stops:
            raise StageFailed(f"tts: request {request.request_id} is already running", stage="tts")
        stop = threading.Event()
        self._stops[request.request_id] = stop
        end = object()
        try:
            # a batched synthesizer serves many streams at once; the others one at a time
            async with contextlib.nullcontext() if self._concurrent else self._lock:
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
                            audio = await anyio.to_thread.run_sync(
                                self._in_audit, next, chunks, end, limiter=self._waits
                            )
                        if audio is end:
                            break
                        assert isinstance(audio, np.ndarray)
                        pcm = to_pcm16(
                            audio, self.synthesizer.sample_rate_hz, request.sample_rate_hz
                        )
                        if pcm:
                            yield TtsAudio(request.request_id, pcm, text if first else "")
                            first = False
                finally:
                    stop.set()
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(self._in_audit, _close_iterator, chunks)
        finally:
            self._stops.pop(request.request_id, None)


def _close_iterator(iterator: Iterator[Any]) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
