"""transformers engines: the same stages without vLLM (one GPU, a check, the CPU in tests).

`HfVlmEngine` (Qwen3-VL, `AutoModelForImageTextToText`) and `HfAsrEngine` (Qwen3-ASR)
implement `GenerationEngine`: the model's own forward prefills the prompt (vision,
audio, M-RoPE), then `StaticDecoder` decodes token by token on a static KV cache, the
step captured as a CUDA Graph on a CUDA device unless the placement says
`enforce_eager` (`static_decode.py`). Text leaves the worker thread through a
`PieceQueue`, taken in batches: one thread hop per batch, not per token (the first piece
at once, later ones gathered for up to 20 ms). Preprocessing (tokenizing, image and audio
features) runs in a worker thread too, off the event loop. `abort()` stops a generation
at the next token. `device` is "cpu"
(tests) or "cuda:N". They take the very `EnginePrompt` the vLLM engines take, so the
prompt building, compensation, streaming and action parsing above them are the code
that runs in production. One request at a time per engine (no batching): the route
for one GPU, debugging and the GPU check, not for serving many sessions.

`load_format = "dummy"` builds the architecture from its config directly on the device
with random weights (seconds, nothing read but config and tokenizer files), as vLLM's
dummy loader does. Its output rows for ids the tokenizer cannot decode, for added and
special tokens and for whitespace are zeroed, so random weights still produce words
for the full requested length (the GPU check measures fixed token counts, and its
whole turn needs a transcript and a reply to speak).

Qwen3-VL's processor class needs torchvision, which does not import beside the CPU
torch wheel, so the image processor is run directly and each `<|image_pad|>` is
expanded to `grid_thw.prod() // merge_size**2` copies, with `mm_token_type_ids` marking
them (transformers 5 requires it whenever `image_grid_thw` is given).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from backends.base import StageFailed
from backends.gpu.errors import map_engine_errors
from backends.gpu.static_decode import StaticDecoder

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from backends.gpu.engine_api import EnginePrompt, Sampling

__all__ = ["DecodeTiming", "HfAsrEngine", "HfVlmEngine", "PieceQueue"]

IMAGE_PAD = "<|image_pad|>"


class PieceQueue:
    """Text pieces from a generation thread to the event loop, taken in batches.

    The consumer's `take` runs in a worker thread (one hop per call) and returns every
    piece that arrived, joined: the first at once, since it starts the reply, later ones
    after waiting up to `window_s` for `batch` pieces, so a decode of a token per 10-20 ms
    reaches the loop a few tokens per hop instead of one. None once closed and drained.
    """

    def __init__(self, *, window_s: float = 0.02, batch: int = 8) -> None:
        self._ready = threading.Condition()
        self._pieces: list[str] = []
        self._closed = False
        self._first = True
        self.window_s = window_s
        self.batch = batch

    def put(self, text: str) -> None:
        with self._ready:
            self._pieces.append(text)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()

    def take(self) -> str | None:
        with self._ready:
            while not self._pieces and not self._closed:
                self._ready.wait()
            if not self._first:
                deadline = time.monotonic() + self.window_s
                while len(self._pieces) < self.batch and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._ready.wait(remaining)
            self._first = False
            if not self._pieces:
                return None
            text = "".join(self._pieces)
            self._pieces.clear()
            return text


class _ThreadStream:
    """Deltas of one `generate()` running in a worker thread."""

    def __init__(
        self, pieces: PieceQueue, thread: threading.Thread, errors: list[BaseException]
    ) -> None:
        self._pieces = pieces
        self._thread = thread
        self._errors = errors

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            text = await anyio.to_thread.run_sync(self._pieces.take, abandon_on_cancel=True)
            if text is None:
                break
            yield text
        await anyio.to_thread.run_sync(self._thread.join)
        if self._errors:
            raise self._errors[0]


def _queue_streamer(tokenizer: Any, pieces: PieceQueue, *, skip_special_tokens: bool) -> Any:
    """transformers' incremental decoding (`TextStreamer`: whole words, multi-byte
    characters) writing its text into `pieces` instead of a per-token queue."""
    from transformers import TextStreamer

    class QueueStreamer(TextStreamer):  # type: ignore[misc]
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                pieces.put(text)
            if stream_end:
                pieces.close()

    return QueueStreamer(tokenizer, skip_prompt=False, skip_special_tokens=skip_special_tokens)


@dataclass(slots=True)
class DecodeTiming:
    """Where one request's time went (the GPU check reads the engine's last one)."""

    prompt_tokens: int = 0
    prefill_ms: float = 0.0  # prompt forward and the first token's logits
    tokens: int = 0
    decode_ms: float = 0.0  # every token after the first
    graphs: bool = False
    token_ids: tuple[int, ...] = ()


def _sample(logits: Any, sampling: Sampling, generated: list[int], generator: Any) -> int:
    import torch

    scores = logits[0].float()
    if sampling.repetition_penalty != 1.0 and generated:
        seen = torch.tensor(sorted(set(generated)), device=scores.device)
        picked = scores[seen]
        scores[seen] = torch.where(
            picked > 0, picked / sampling.repetition_penalty, picked * sampling.repetition_penalty
        )
    if sampling.temperature <= 0:
        return int(torch.argmax(scores))
    scores = scores / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(scores, min(sampling.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        drop = torch.cumsum(ordered, dim=-1) - ordered > sampling.top_p
        probs = probs.scatter(0, order, ordered.masked_fill(drop, 0.0))
    return int(torch.multinomial(probs, 1, generator=generator))


class _HfEngine:
    """Shared plumbing: load, count tokens, prefill + static decode in a thread, abort."""

    mrope = False

    def __init__(
        self,
        name: str,
        model_path: str,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        load_format: str = "auto",
        max_len: int = 4096,
        cuda_graphs: bool = True,
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.dtype = dtype
        self.device = device
        self.load_format = load_format
        self.max_len = max_len
        self.cuda_graphs = cuda_graphs
        self.model: Any = None
        self.tokenizer: Any = None
        self.decoder: StaticDecoder | None = None
        self.last_timing = DecodeTiming()
        self._never: Any = None  # ids whose logits are suppressed (generation_config)
        self._eos: frozenset[int] = frozenset()
        self._stops: dict[str, threading.Event] = {}
        self._busy = threading.Lock()  # one request at a time on the decoder's buffers

    def _load(self) -> None:
        raise NotImplementedError

    def _build(self, model_class: Any, config: Any) -> Any:
        """The model on `self.device`: from the checkpoint, or random (`dummy`)."""
        import torch

        dtype = getattr(torch, self.dtype)
        if self.load_format == "dummy":
            # Auto classes build with `from_config`, model classes with `_from_config`
            build = getattr(model_class, "from_config", None) or model_class._from_config
            with torch.device(self.device):
                model = build(config, dtype=dtype)
            self._quiet_undecodable_rows(model)
        else:
            model = model_class.from_pretrained(self.model_path, config=config, dtype=dtype)
            model = model.to(self.device)
        return model.eval()

    def _quiet_undecodable_rows(self, model: Any) -> None:
        """Random weights decode greedily into a loop of one token; keep that token a
        word: ids past the tokenizer, added tokens (markup, specials) and tokens that
        decode to whitespace alone get zero logits, below any ordinary token's best."""
        import torch

        head = model.get_output_embeddings().weight
        tokenizer = self.tokenizer
        size = min(len(tokenizer), head.shape[0])
        quiet = set(tokenizer.added_tokens_decoder) | set(tokenizer.all_special_ids)
        quiet |= {i for i in range(size) if not tokenizer.decode([i]).strip()}
        with torch.no_grad():
            head[size:] = 0.0
            head[sorted(i for i in quiet if i < size)] = 0.0

    def _prepare_decoding(self) -> None:
        import torch

        generation = getattr(self.model, "generation_config", None)
        eos = getattr(generation, "eos_token_id", None)
        self._eos = frozenset([eos] if isinstance(eos, int) else (eos or []))
        never = list(getattr(generation, "suppress_tokens", None) or [])
        self._never = torch.tensor(never, device=self.device) if never else None
        text_config = self.model.config.get_text_config(decoder=True)
        self.decoder = StaticDecoder(
            self.model.model.language_model,
            self.model.lm_head,
            text_config,
            max_len=self.max_len,
            device=self.device,
            dtype=getattr(torch, self.dtype),
            mrope=self.mrope,
            graphs=self.cuda_graphs,
        )

    async def start(self) -> None:
        if self.model is None:
            with map_engine_errors(self.name):
                await anyio.to_thread.run_sync(self._load)
                await anyio.to_thread.run_sync(self._prepare_decoding)

    async def close(self) -> None:
        for stop in self._stops.values():
            stop.set()
        self.model = None
        self.decoder = None

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _inputs(self, prompt: EnginePrompt) -> dict[str, Any]:
        raise NotImplementedError

    def _on_device(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Tensors on the engine's device; floating ones (audio features, pixels) in
        the model's dtype, since a bf16 model's convolutions refuse float32 input."""
        import torch

        dtype = getattr(torch, self.dtype)
        moved = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                value = value.to(self.device, dtype=dtype if value.is_floating_point() else None)
            moved[key] = value
        return moved

    def _rope_delta(self) -> int:
        return 0

    def _before_prefill(self) -> None:
        """Forget what the previous request left on the model (Qwen3-VL's rope deltas)."""

    def _generate(
        self, inputs: dict[str, Any], sampling: Sampling, stop: threading.Event, streamer: Any
    ) -> None:
        import torch

        decoder = self.decoder
        if decoder is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        length = int(inputs["input_ids"].shape[1])
        timing = DecodeTiming(prompt_tokens=length, graphs=decoder.graphs)
        generated: list[int] = []
        with self._busy, torch.inference_mode():
            started = time.perf_counter()
            self._before_prefill()
            out = self.model(**inputs, use_cache=True, logits_to_keep=1)
            decoder.load_prompt(out.past_key_values, length, self._rope_delta())
            logits = out.logits[:, -1, :]
            del out
            for index in range(sampling.max_tokens):
                if self._never is not None:
                    logits = logits.index_fill(-1, self._never, float("-inf"))
                token = _sample(logits, sampling, generated, generator)
                if index == 0:
                    timing.prefill_ms = (time.perf_counter() - started) * 1000
                    started = time.perf_counter()
                if token in self._eos or stop.is_set():
                    break
                generated.append(token)
                streamer.put(torch.tensor([token]))
                if length + index >= decoder.max_len or index + 1 == sampling.max_tokens:
                    break
                logits = decoder.step(token, length + index)
            if self.device.startswith("cuda"):
                torch.cuda.synchronize(self.device)
            timing.tokens = len(generated)
            timing.token_ids = tuple(generated)
            timing.decode_ms = (time.perf_counter() - started) * 1000 if generated else 0.0
        self.last_timing = timing

    async def submit(
        self, request_id: str, prompt: EnginePrompt, sampling: Sampling
    ) -> _ThreadStream:
        if self.model is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        # tokenizing and image/audio features are CPU work: off the event loop
        inputs = await anyio.to_thread.run_sync(self._prepared, prompt)
        stop = threading.Event()
        self._stops[request_id] = stop
        pieces = PieceQueue()
        streamer = _queue_streamer(
            self.tokenizer, pieces, skip_special_tokens=sampling.skip_special_tokens
        )
        errors: list[BaseException] = []

        def run() -> None:
            try:
                self._generate(inputs, sampling, stop, streamer)
            except BaseException as exc:  # surfaced by the stream
                errors.append(exc)
            finally:
                try:
                    streamer.end()
                finally:
                    pieces.close()
                    self._stops.pop(request_id, None)

        thread = threading.Thread(target=run, name=f"hf-{self.name}-{request_id}", daemon=True)
        thread.start()
        return _ThreadStream(pieces, thread, errors)

    def _prepared(self, prompt: EnginePrompt) -> dict[str, Any]:
        return self._on_device(self._inputs(prompt))

    async def abort(self, request_id: str) -> None:
        stop = self._stops.get(request_id)
        if stop is not None:
            stop.set()


class HfVlmEngine(_HfEngine):
    """Qwen3-VL / JoyAI through transformers."""

    mrope = True

    def __init__(self, model_path: str, **options: Any) -> None:
        super().__init__("vlm", model_path, **options)
        self.image_processor: Any = None

    def _load(self) -> None:
        from transformers import (
            AutoConfig,
            AutoImageProcessor,
            AutoModelForImageTextToText,
            AutoTokenizer,
        )

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.image_processor = AutoImageProcessor.from_pretrained(self.model_path)
        config = AutoConfig.from_pretrained(self.model_path)
        self.model = self._build(AutoModelForImageTextToText, config)

    def _before_prefill(self) -> None:
        self.model.model.rope_deltas = None

    def _rope_delta(self) -> int:
        delta = self.model.model.rope_deltas
        return 0 if delta is None else int(delta.reshape(-1)[0])

    def _inputs(self, prompt: EnginePrompt) -> dict[str, Any]:
        import torch

        text = prompt.text
        extra: dict[str, Any] = {}
        if prompt.images:
            if text.count(IMAGE_PAD) != len(prompt.images):
                raise StageFailed(
                    "vlm: image placeholders and images differ in number", stage="vlm"
                )
            vision = self.image_processor(images=list(prompt.images), return_tensors="pt")
            merge = int(getattr(self.image_processor, "merge_size", 2))
            pieces = text.split(IMAGE_PAD)
            counts = [int(grid.prod()) // merge**2 for grid in vision["image_grid_thw"]]
            text = pieces[0] + "".join(
                IMAGE_PAD * n + rest for n, rest in zip(counts, pieces[1:], strict=True)
            )
            extra = {
                "pixel_values": vision["pixel_values"],
                "image_grid_thw": vision["image_grid_thw"],
            }
        encoded = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        pad_id = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if extra:
            extra["mm_token_type_ids"] = (encoded["input_ids"] == pad_id).to(torch.long)
        return {**encoded, **extra}


class HfAsrEngine(_HfEngine):
    """Qwen3-ASR through transformers (`Qwen3ASRForConditionalGeneration`)."""

    def __init__(self, model_path: str, **options: Any) -> None:
        super().__init__("asr", model_path, **options)
        self.processor: Any = None

    def _load(self) -> None:
        from transformers import (
            AutoTokenizer,
            Qwen3ASRConfig,
            Qwen3ASRFeatureExtractor,
            Qwen3ASRForConditionalGeneration,
            Qwen3ASRProcessor,
        )

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        features = Qwen3ASRFeatureExtractor.from_pretrained(self.model_path)
        self.processor = Qwen3ASRProcessor(feature_extractor=features, tokenizer=self.tokenizer)
        # transformers' own config class, not AutoConfig's: once vLLM has loaded a
        # Qwen3-ASR in this process, AutoConfig maps "qwen3_asr" to vLLM's class
        config = Qwen3ASRConfig.from_pretrained(self.model_path)
        self.model = self._build(Qwen3ASRForConditionalGeneration, config)

    def _inputs(self, prompt: EnginePrompt) -> dict[str, Any]:
        if prompt.images or prompt.audio is None:
            raise StageFailed(
                "asr: the ASR engine takes exactly one audio and nothing visual", stage="asr"
            )
        pcm, rate = prompt.audio
        inputs = self.processor(
            text=[prompt.text], audio=[pcm], sampling_rate=rate, return_tensors="pt"
        )
        return dict(inputs)
