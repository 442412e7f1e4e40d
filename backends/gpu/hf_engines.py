"""transformers engines: the same stages without vLLM (one GPU, a check, the CPU in tests).

`HfVlmEngine` (Qwen3-VL, `AutoModelForImageTextToText`) and `HfAsrEngine` (Qwen3-ASR)
implement `GenerationEngine`: the prompt is prefilled (the ASR: the model's own forward,
audio included; the VLM: that forward taken apart, so that it starts from a kept
prompt's KV and skips frames already encoded, `prompt_reuse.py`), then `StaticDecoder`
decodes token by token on a static KV cache, the step captured as a CUDA Graph on a
CUDA device unless the placement says `enforce_eager` (`static_decode.py`). Text leaves
the worker thread through a `PieceQueue`, taken in batches: one thread hop per batch,
not per token (the first piece at once, later ones gathered for up to 20 ms).
Preprocessing (tokenizing, image and audio features) runs in a worker thread too, off
the event loop. `abort()` stops a generation at the next token. `device` is "cpu"
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
them (transformers 5 requires it whenever `image_grid_thw` is given). The VLM's own
prefill uses only what transformers 5.17 (the lent GPU machine's) and 5.19 share: the
vision tower's `pooler_output` / `deepstack_features`, `get_rope_index`, and the
language model's `visual_pos_masks` / `deepstack_visual_embeds`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from backends.base import StageFailed
from backends.gpu.device_audit import device_audit as audit_context
from backends.gpu.errors import map_engine_errors
from backends.gpu.prompt_reuse import (
    EncodedFrame,
    FrameEncodings,
    ImageSpan,
    KeptPrompt,
    PromptSlots,
    SlotMatch,
    image_digest,
)
from backends.gpu.static_decode import StaticDecoder

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractContextManager

    from backends.gpu.engine_api import EnginePrompt, Sampling
    from backends.gpu.prompt_reuse import Grid

__all__ = [
    "DecodeTiming",
    "HfAsrEngine",
    "HfVlmEngine",
    "PieceQueue",
    "PieceStream",
    "queue_streamer",
]

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


class PieceStream:
    """The text of one request, as its generating thread puts it in `pieces`; raises the
    first of `errors` at the end. `thread`: a request's own thread, joined at the end (the
    batched engine's loop thread serves many requests and is not)."""

    def __init__(
        self,
        pieces: PieceQueue,
        errors: list[BaseException],
        thread: threading.Thread | None = None,
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
        if self._thread is not None:
            await anyio.to_thread.run_sync(self._thread.join)
        if self._errors:
            raise self._errors[0]


def queue_streamer(tokenizer: Any, pieces: PieceQueue, *, skip_special_tokens: bool) -> Any:
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
    #: prompt tokens whose KV came from a kept slot (`prompt_reuse.py`), not prefilled
    reused_tokens: int = 0
    #: images the vision tower encoded for this prefill (the others were in the prefix
    #: reused, or their encoding was prepared or kept)
    images_encoded: int = 0
    #: the batched engine: submitted -> a slot, and the steps that decoded its tokens
    queue_wait_ms: float = 0.0
    decode_steps: int = 0

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


@dataclass(slots=True)
class _Prefill:
    """A prefill's outcome: the prompt's KV (a transformers cache), the last position's
    logits, the decoder's M-RoPE offset, and what it did not recompute."""

    cache: Any
    logits: Any
    rope_delta: int = 0
    reused: int = 0
    images_encoded: int = 0
    match: SlotMatch | None = None


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
    #: encodes frames ahead of their turn (`prepare_image`): the VLM's, when it keeps any
    prepares_frames = False

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
        device_audit: bool = False,
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.dtype = dtype
        self.device = device
        self.load_format = load_format
        self.max_len = max_len
        self.cuda_graphs = cuda_graphs
        #: every op of the decoder set-up, the preprocessing and the requests checked to
        #: stay on `device` (device_audit.py); loading is not audited (meta-device init)
        self.device_audit = device_audit
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

    def _audited(self) -> AbstractContextManager[Any]:
        """This engine's device audit, entered in the thread that runs the torch work; a
        no-op unless `device_audit`."""
        return audit_context(self.name, self.device, enabled=self.device_audit)

    def _in_audit(self, work: Callable[..., Any], *args: Any) -> Any:
        with self._audited():
            return work(*args)

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

    def _stop_and_suppressed_ids(self) -> tuple[frozenset[int], list[int]]:
        """The generation config's end ids and the ids it never samples."""
        generation = getattr(self.model, "generation_config", None)
        eos = getattr(generation, "eos_token_id", None)
        never = [int(i) for i in getattr(generation, "suppress_tokens", None) or []]
        return frozenset([eos] if isinstance(eos, int) else (eos or [])), never

    def _prepare_decoding(self) -> None:
        import torch

        self._eos, never = self._stop_and_suppressed_ids()
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
                await anyio.to_thread.run_sync(self._in_audit, self._prepare_decoding)

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

    def _before_prefill(self) -> None:
        """Forget what the previous request left on the model (Qwen3-VL's rope deltas)."""

    def _length(self, request: Any) -> int:
        return int(request["input_ids"].shape[1])

    def _prefill(self, inputs: Any) -> _Prefill:
        """The model's own forward over the whole prompt (the ASR's audio included)."""
        self._before_prefill()
        out = self.model(**inputs, use_cache=True, logits_to_keep=1)
        return _Prefill(out.past_key_values, out.logits[:, -1, :])

    def _keeps_prompts(self) -> bool:
        return False

    def _keep(self, request: Any, prefill: _Prefill, generated: list[int]) -> None:
        """After a request, under the lock: keep what the next one may reuse (VLM)."""

    def _generate(
        self, request: Any, sampling: Sampling, stop: threading.Event, streamer: Any
    ) -> None:
        import torch

        decoder = self.decoder
        if decoder is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        length = self._length(request)
        timing = DecodeTiming(prompt_tokens=length, graphs=decoder.graphs)
        generated: list[int] = []
        stepped = 0  # generated tokens whose keys and values the decoder wrote
        with self._busy, torch.inference_mode():
            started = time.perf_counter()
            prefill = self._prefill(request)
            decoder.load_prompt(prefill.cache, length, prefill.rope_delta)
            if not self._keeps_prompts():
                prefill.cache = None  # copied into the decoder's: not held while decoding
            timing.reused_tokens = prefill.reused
            timing.images_encoded = prefill.images_encoded
            logits = prefill.logits
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
                stepped += 1
            if self.device.startswith("cuda"):
                torch.cuda.synchronize(self.device)
            timing.tokens = len(generated)
            timing.token_ids = tuple(generated)
            timing.decode_ms = (time.perf_counter() - started) * 1000 if generated else 0.0
            # before the lock goes: the next request overwrites the decoder's cache
            self._keep(request, prefill, generated[:stepped])
        self.last_timing = timing

    async def submit(
        self, request_id: str, prompt: EnginePrompt, sampling: Sampling
    ) -> PieceStream:
        if self.model is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        # tokenizing and image/audio features are CPU work: off the event loop
        inputs = await anyio.to_thread.run_sync(self._in_audit, self._prepared, prompt)
        stop = threading.Event()
        self._stops[request_id] = stop
        pieces = PieceQueue()
        streamer = queue_streamer(
            self.tokenizer, pieces, skip_special_tokens=sampling.skip_special_tokens
        )
        errors: list[BaseException] = []

        def run() -> None:
            try:
                self._in_audit(self._generate, inputs, sampling, stop, streamer)
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
        return PieceStream(pieces, errors, thread)

    def _prepared(self, prompt: EnginePrompt) -> Any:
        return self._on_device(self._inputs(prompt))

    async def abort(self, request_id: str) -> None:
        stop = self._stops.get(request_id)
        if stop is not None:
            stop.set()

    def prepare_image(self, image: Any) -> bool:
        return False


class HfVlmEngine(_HfEngine):
    """Qwen3-VL / JoyAI through transformers, keeping work between requests.

    The prefill is the model's own forward taken apart (embeddings, the vision tower,
    M-RoPE positions, the language model with deepstack, the head), so that it can start
    from a kept prompt's KV and skip encoding frames already encoded (`prompt_reuse.py`):

    - `kv_slots` prompts' KV are kept, `kv_slot_bytes` in all (default: as much again as
      the static cache). The M-RoPE positions are those of the whole prompt
      (`get_rope_index`), of which the suffix prefill takes its slice, so a suffix lands
      where a full prefill would put it; pixel values enter only for its own images.
    - `encoded_frames` frames' vision encodings are kept (0: none, and no preparation);
      `prepare_image` encodes a frame ahead of its turn.
    """

    mrope = True

    def __init__(
        self,
        model_path: str,
        *,
        kv_slots: int = 4,
        kv_slot_bytes: int | None = None,
        encoded_frames: int = 16,
        **options: Any,
    ) -> None:
        super().__init__("vlm", model_path, **options)
        self.image_processor: Any = None
        self.kv_slot_bytes = kv_slot_bytes
        self.slots = PromptSlots(slots=kv_slots, max_bytes=kv_slot_bytes or 0)
        self.frames = FrameEncodings(max_images=encoded_frames)
        self._text_config: Any = None
        self._pad_id = -1

    @property
    def prepares_frames(self) -> bool:
        return self.frames.max_images > 0

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
        self._text_config = self.model.config.get_text_config(decoder=True)
        self._pad_id = int(self.tokenizer.convert_tokens_to_ids(IMAGE_PAD))

    def _prepare_decoding(self) -> None:
        super()._prepare_decoding()
        assert self.decoder is not None
        if self.kv_slot_bytes is None:
            self.slots.max_bytes = self.decoder.cache_bytes

    async def close(self) -> None:
        await super().close()
        # not under the lock: a request still stopping must not hold the event loop
        self.slots.clear()
        self.frames.clear()

    def forget(self) -> None:
        """Drop every kept prompt and frame: the next prefill is a cold, full one (what
        the GPU check's time-to-first-token figures measure)."""
        with self._busy:
            self.slots.clear()
            self.frames.clear()

    def _before_prefill(self) -> None:
        self.model.model.rope_deltas = None

    @property
    def _merge(self) -> int:
        return int(getattr(self.image_processor, "merge_size", 2))

    def _inputs(self, prompt: EnginePrompt) -> dict[str, Any]:
        """The model forward's own inputs for `prompt` (every image processed): what the
        reference full forward of the checks and tests takes."""
        import torch

        text = prompt.text
        extra: dict[str, Any] = {}
        if prompt.images:
            _check_placeholders(text, prompt.images)
            vision = self.image_processor(images=list(prompt.images), return_tensors="pt")
            counts = [int(grid.prod()) // self._merge**2 for grid in vision["image_grid_thw"]]
            text = _expand(text, counts)
            extra = {
                "pixel_values": vision["pixel_values"],
                "image_grid_thw": vision["image_grid_thw"],
            }
        encoded = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        if extra:
            extra["mm_token_type_ids"] = (encoded["input_ids"] == self._pad_id).to(torch.long)
        return {**encoded, **extra}

    def _process(self, images: list[Any]) -> list[tuple[Grid, Any]]:
        """The image processor over `images`: each one's patch grid and pixel values,
        on the device in the model's dtype."""
        import torch

        vision = self.image_processor(images=images, return_tensors="pt")
        grids = [tuple(int(v) for v in grid) for grid in vision["image_grid_thw"]]
        rows = [t * h * w for t, h, w in grids]
        values = vision["pixel_values"].to(self.device, dtype=getattr(torch, self.dtype))
        return list(zip(grids, values.split(rows), strict=True))  # type: ignore[arg-type]

    def _prepared(self, prompt: EnginePrompt) -> _VlmPrompt:
        """Tokens and image spans of `prompt`, off the event loop and outside the lock:
        the image processor runs only for frames whose patch grid is not known yet (one
        seen before, prepared or in a kept prompt, is not processed again)."""
        images = prompt.images
        text = prompt.text
        if images:
            _check_placeholders(text, images)
        digests = [image_digest(image) for image in images]
        grids: list[Grid | None] = [self.frames.grid(digest) for digest in digests]
        pixels: dict[int, Any] = {}
        unknown = [i for i, grid in enumerate(grids) if grid is None]
        if unknown:
            for i, (grid, values) in zip(
                unknown, self._process([images[i] for i in unknown]), strict=True
            ):
                grids[i], pixels[i] = grid, values
                self.frames.note_grid(digests[i], grid)
        known = [grid for grid in grids if grid is not None]
        counts = [t * h * w // self._merge**2 for t, h, w in known]
        encoded = self.tokenizer(
            _expand(text, counts), return_tensors="pt", add_special_tokens=False
        )
        ids = encoded["input_ids"]
        host = ids[0].numpy().astype(np.int64)
        spans = _spans(host, self._pad_id, digests, known, counts)
        return _VlmPrompt(ids.to(self.device), host, spans, tuple(images), pixels)

    def _length(self, request: _VlmPrompt) -> int:
        return len(request.ids)

    def _positions(self, request: _VlmPrompt) -> tuple[Any, int]:
        """M-RoPE position ids (3, 1, length) of the whole prompt, and the offset of the
        positions after it (what the decoder adds to each generated token's index)."""
        import torch

        ids = request.input_ids
        if not request.spans:
            positions = torch.arange(ids.shape[1], device=ids.device).view(1, 1, -1)
            return positions.expand(3, 1, -1), 0
        grid = torch.tensor([span.grid for span in request.spans], device=ids.device)
        types = (ids == self._pad_id).to(torch.long)
        positions, deltas = self.model.model.get_rope_index(
            input_ids=ids, mm_token_type_ids=types, image_grid_thw=grid
        )
        return positions, int(deltas.reshape(-1)[0])

    def _encode(self, values: Any, grids: list[Grid]) -> list[EncodedFrame]:
        """The vision tower over the images whose pixel values are `values`, one call."""
        import torch

        visual = self.model.model.visual
        grid = torch.tensor(grids, device=values.device)
        out = visual(values.type(visual.dtype), grid_thw=grid, return_dict=True)
        sizes = [t * h * w // self._merge**2 for t, h, w in grids]
        embeds = out.pooler_output.split(sizes)
        deepstack = [features.split(sizes) for features in out.deepstack_features]
        frames = []
        for i, frame_grid in enumerate(grids):
            # copies, not views: a kept frame must not hold the whole batch's storage
            parts = (embeds[i].clone(), *(layer[i].clone() for layer in deepstack))
            frames.append(
                EncodedFrame(
                    frame_grid,
                    parts[0],
                    parts[1:],
                    sum(part.numel() * part.element_size() for part in parts),
                )
            )
        return frames

    def _encodings(self, request: _VlmPrompt, indices: list[int]) -> tuple[list[EncodedFrame], int]:
        """The encodings of the prompt's images `indices`: kept ones as they are, the
        others encoded together (and kept); how many were encoded."""
        spans = request.spans
        found = {spans[i].digest: self.frames.get(spans[i].digest) for i in indices}
        missing = [d for d, frame in found.items() if frame is None]
        if missing:
            first = {spans[i].digest: i for i in reversed(indices)}
            order = [first[d] for d in missing]
            late = [i for i in order if i not in request.pixels]
            pixels = dict(request.pixels)
            if late:  # its grid was known, its encoding no longer is
                for i, (_, values) in zip(
                    late, self._process([request.images[i] for i in late]), strict=True
                ):
                    pixels[i] = values
            import torch

            values = torch.cat([pixels[i] for i in order])
            for digest, frame in zip(
                missing, self._encode(values, [spans[i].grid for i in order]), strict=True
            ):
                found[digest] = frame
                self.frames.put(digest, frame)
        frames = [found[spans[i].digest] for i in indices]
        return [f for f in frames if f is not None], len(missing)

    def _prefix_cache(self, slot: KeptPrompt | None, length: int) -> Any:
        """A fresh transformers cache holding the first `length` positions of `slot`."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self._text_config)
        if slot is None or length == 0:
            return cache
        for index, segments in enumerate(slot.kv):
            keys, values = [], []
            left = length
            for seg_keys, seg_values in segments:
                take = min(left, int(seg_keys.shape[-2]))
                keys.append(seg_keys[:, :, :take])
                values.append(seg_values[:, :, :take])
                left -= take
                if left == 0:
                    break
            cache.update(torch.cat(keys, dim=-2), torch.cat(values, dim=-2), index)
        return cache

    def _prefill(self, request: _VlmPrompt) -> _Prefill:
        """The prompt past the longest kept prefix (all of it without one): its
        embeddings with its images' visual features, at the whole prompt's positions,
        through the language model on top of the kept KV."""
        import torch

        match = self.slots.match(request.ids, request.spans)
        start = match.reused
        positions, delta = self._positions(request)
        suffix = request.input_ids[:, start:]
        embeds = self.model.model.get_input_embeddings()(suffix)
        indices = [i for i, span in enumerate(request.spans) if span.start >= start]
        frames, encoded = self._encodings(request, indices)
        mask = deepstack = None
        if frames:
            mask = suffix == self._pad_id
            visual = torch.cat([f.embeds for f in frames]).to(embeds.device, embeds.dtype)
            if int(mask.sum()) != visual.shape[0]:
                raise StageFailed("vlm: image tokens and image features differ", stage="vlm")
            embeds = embeds.masked_scatter(mask.unsqueeze(-1).expand_as(embeds), visual)
            deepstack = [
                torch.cat([f.deepstack[layer] for f in frames])
                for layer in range(len(frames[0].deepstack))
            ]
        cache = self._prefix_cache(match.slot, start)
        out = self.model.model.language_model(
            input_ids=None,
            inputs_embeds=embeds,
            position_ids=positions[:, :, start:],
            past_key_values=cache,
            use_cache=True,
            visual_pos_masks=mask,
            deepstack_visual_embeds=deepstack,
        )
        logits = self.model.lm_head(out.last_hidden_state[:, -1, :])
        return _Prefill(cache, logits, delta, reused=start, images_encoded=encoded, match=match)

    def _keeps_prompts(self) -> bool:
        return self.slots.slots > 0

    def _keep(self, request: _VlmPrompt, prefill: _Prefill, generated: list[int]) -> None:
        """The prompt's KV (the prefill's cache) and the generated tokens' (copied out of
        the decoder's static cache) become a slot: the next turn's prompt continues
        through this reply when the conversation keeps it as generated."""
        if not self._keeps_prompts() or prefill.cache is None or self.decoder is None:
            return
        length = len(request.ids)
        steps = len(generated)
        static = self.decoder.cache.layers
        kv = []
        for index, layer in enumerate(prefill.cache.layers):
            segments = [(layer.keys[:, :, :length], layer.values[:, :, :length])]
            if steps:
                kept = static[index]
                segments.append(
                    (
                        kept.keys[:, :, length : length + steps].clone(),
                        kept.values[:, :, length : length + steps].clone(),
                    )
                )
            kv.append(segments)
        nbytes = sum(t.numel() * t.element_size() for layer in kv for seg in layer for t in seg)
        ids = np.concatenate([request.ids, np.asarray(generated, dtype=np.int64)])
        match = prefill.match
        self.slots.keep(
            KeptPrompt(ids, request.spans, length, kv, nbytes),
            replaces=match.slot if match is not None and match.covers else None,
        )

    def prepare_image(self, image: Any) -> bool:
        """Encode one decoded frame now and keep its encoding, so that the prefill of the
        turn that shows it does not (blocking: the stage runs it in a worker thread,
        outside the request lock). False when nothing was done: no preparation here, not
        started, or the frame's encoding is already kept."""
        import torch

        if self.model is None or not self.prepares_frames:
            return False
        digest = image_digest(image)
        if digest in self.frames:
            return False
        with torch.inference_mode(), self._audited():
            [(grid, values)] = self._process([image])
            [frame] = self._encode(values, [grid])
            if self.device.startswith("cuda"):
                # published to another thread's stream: finished first
                torch.cuda.current_stream(self.device).synchronize()
        self.frames.put(digest, frame)
        return True


@dataclass(frozen=True, slots=True)
class _VlmPrompt:
    """A VLM request ready for the prefill: token ids (on the device and on the host),
    where each image's placeholders are, the images, and the pixel values of those the
    image processor already ran for."""

    input_ids: Any
    ids: Any  # numpy int64
    spans: tuple[ImageSpan, ...]
    images: tuple[Any, ...]
    pixels: dict[int, Any]


def _check_placeholders(text: str, images: tuple[Any, ...]) -> None:
    if text.count(IMAGE_PAD) != len(images):
        raise StageFailed("vlm: image placeholders and images differ in number", stage="vlm")


def _expand(text: str, counts: list[int]) -> str:
    """Each `<|image_pad|>` of `text` as its image's number of visual tokens."""
    if not counts:
        return text
    pieces = text.split(IMAGE_PAD)
    return pieces[0] + "".join(
        IMAGE_PAD * n + rest for n, rest in zip(counts, pieces[1:], strict=True)
    )


def _spans(
    ids: Any, pad_id: int, digests: list[bytes], grids: list[Grid], counts: list[int]
) -> tuple[ImageSpan, ...]:
    """Each image's run of placeholder tokens in `ids`, in order."""
    positions = np.flatnonzero(ids == pad_id)
    if len(positions) != sum(counts):
        raise StageFailed("vlm: image placeholders and images differ in number", stage="vlm")
    spans = []
    offset = 0
    for digest, grid, count in zip(digests, grids, counts, strict=True):
        start, last = int(positions[offset]), int(positions[offset + count - 1])
        if last - start != count - 1:
            raise StageFailed("vlm: an image's placeholder tokens are split", stage="vlm")
        spans.append(ImageSpan(start, last + 1, digest, grid))
        offset += count
    return tuple(spans)


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
