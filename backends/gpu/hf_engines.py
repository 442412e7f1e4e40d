"""transformers engines: the CPU route of the same stages (tests, debugging without vLLM).

`HfVlmEngine` (Qwen3-VL, `AutoModelForImageTextToText`) and `HfAsrEngine` (Qwen3-ASR)
implement `GenerationEngine` with `model.generate()` in a worker thread, streaming text
through `TextIteratorStreamer`; `abort()` stops a generation at the next token through
a stopping criterion. `device` is "cpu" (tests) or "cuda:N". They take the very
`EnginePrompt` the vLLM engines take, so the prompt building, compensation, streaming
and action parsing above them are the code that runs in production. No CUDA Graphs, one
request at a time: not a serving runtime (`runtime = "transformers"` in the placement).

Qwen3-VL's processor class needs torchvision, which does not import beside the CPU
torch wheel, so the image processor is run directly and each `<|image_pad|>` is
expanded to `grid_thw.prod() // merge_size**2` copies, with `mm_token_type_ids` marking
them (transformers 5 requires it whenever `image_grid_thw` is given).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import anyio

from backends.base import StageFailed
from backends.gpu.errors import map_engine_errors

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from backends.gpu.engine_api import EnginePrompt, Sampling

__all__ = ["HfAsrEngine", "HfVlmEngine"]

IMAGE_PAD = "<|image_pad|>"


class _ThreadStream:
    """Deltas of one `generate()` running in a worker thread."""

    def __init__(
        self, streamer: Any, thread: threading.Thread, errors: list[BaseException]
    ) -> None:
        self._streamer = streamer
        self._thread = thread
        self._errors = errors

    async def __aiter__(self) -> AsyncIterator[str]:
        end = object()
        while True:
            piece = await anyio.to_thread.run_sync(
                next, self._streamer, end, abandon_on_cancel=True
            )
            if piece is end:
                break
            if isinstance(piece, str) and piece:
                yield piece
        await anyio.to_thread.run_sync(self._thread.join)
        if self._errors:
            raise self._errors[0]


class _HfEngine:
    """Shared plumbing: load, count tokens, run `generate` in a thread, abort by flag."""

    def __init__(
        self, name: str, model_path: str, *, dtype: str = "float32", device: str = "cpu"
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.dtype = dtype
        self.device = device
        self.model: Any = None
        self.tokenizer: Any = None
        self._stops: dict[str, threading.Event] = {}

    def _load(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self.model is None:
            with map_engine_errors(self.name):
                await anyio.to_thread.run_sync(self._load)

    async def close(self) -> None:
        for stop in self._stops.values():
            stop.set()
        self.model = None

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _inputs(self, prompt: EnginePrompt) -> dict[str, Any]:
        raise NotImplementedError

    async def submit(
        self, request_id: str, prompt: EnginePrompt, sampling: Sampling
    ) -> _ThreadStream:
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        if self.model is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        inputs = {
            key: value.to(self.device) if hasattr(value, "to") else value
            for key, value in self._inputs(prompt).items()
        }
        stop = threading.Event()
        self._stops[request_id] = stop

        class _Stop(StoppingCriteria):  # type: ignore[misc]
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
                return stop.is_set()

        streamer = TextIteratorStreamer(
            self.tokenizer, skip_prompt=True, skip_special_tokens=sampling.skip_special_tokens
        )
        errors: list[BaseException] = []
        generate_kwargs: dict[str, Any] = {
            **inputs,
            "max_new_tokens": sampling.max_tokens,
            "do_sample": sampling.temperature > 0,
            "streamer": streamer,
            "stopping_criteria": StoppingCriteriaList([_Stop()]),
            "repetition_penalty": sampling.repetition_penalty,
        }
        if sampling.temperature > 0:
            generate_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
            if sampling.top_k > 0:
                generate_kwargs["top_k"] = sampling.top_k

        def run() -> None:
            import torch

            try:
                with torch.inference_mode():
                    self.model.generate(**generate_kwargs)
            except BaseException as exc:  # surfaced by the stream
                errors.append(exc)
                streamer.end()
            finally:
                self._stops.pop(request_id, None)

        thread = threading.Thread(target=run, name=f"hf-{self.name}-{request_id}", daemon=True)
        thread.start()
        return _ThreadStream(streamer, thread, errors)

    async def abort(self, request_id: str) -> None:
        stop = self._stops.get(request_id)
        if stop is not None:
            stop.set()


class HfVlmEngine(_HfEngine):
    """Qwen3-VL / JoyAI through transformers."""

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu") -> None:
        super().__init__("vlm", model_path, dtype=dtype, device=device)
        self.image_processor: Any = None

    def _load(self) -> None:
        import torch
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.image_processor = AutoImageProcessor.from_pretrained(self.model_path)
        self.model = (
            AutoModelForImageTextToText.from_pretrained(
                self.model_path, dtype=getattr(torch, self.dtype)
            )
            .to(self.device)
            .eval()
        )

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

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu") -> None:
        super().__init__("asr", model_path, dtype=dtype, device=device)
        self.processor: Any = None

    def _load(self) -> None:
        import torch
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
        model = Qwen3ASRForConditionalGeneration.from_pretrained(
            self.model_path, config=config, dtype=getattr(torch, self.dtype)
        )
        self.model = model.to(self.device).eval()

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
