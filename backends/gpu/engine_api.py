"""What a stage asks of a generation engine, independent of the runtime behind it.

The stages (`asr.py`, `vlm.py`) talk to a `GenerationEngine`: vLLM's `AsyncLLM` in
production (`engines.py`), or transformers on CPU for tests and debugging
(`hf_engines.py`). Both take the same `EnginePrompt` and `Sampling` and stream text
deltas, so prompt building, compensation and action parsing are the same code on both.

Submission and streaming are separate steps on purpose (B18): `submit()` returns once
the engine holds the request, and everything before that returns is compensated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from backends.base import StageLifecycle
from backends.gpu.errors import map_engine_errors

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    import numpy as np
    import numpy.typing as npt

__all__ = [
    "EnginePrompt",
    "EngineStage",
    "GenerationEngine",
    "Sampling",
    "TextStream",
]


@dataclass(frozen=True, slots=True)
class EnginePrompt:
    """A rendered prompt and its multimodal data, ready to submit.

    `images` are decoded frames (PIL images) for the VLM; `audio` is mono float32 PCM
    and its rate for the ASR. A prompt for the ASR engine never carries images (B2).
    """

    text: str
    images: tuple[Any, ...] = ()
    audio: tuple[npt.NDArray[np.float32], int] | None = None

    def multi_modal_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.images:
            data["image"] = list(self.images)
        if self.audio is not None:
            data["audio"] = self.audio
        return data


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings shared by the runtimes (vLLM `SamplingParams` names)."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    skip_special_tokens: bool = False
    seed: int | None = None


class TextStream(Protocol):
    """The deltas of one accepted request; ends when the request finishes."""

    def __aiter__(self) -> AsyncIterator[str]: ...


class GenerationEngine(Protocol):
    """One loaded model replica that streams text for prompts."""

    name: str
    #: `prepare_image` does something: the transformers VLM engine, which keeps frames'
    #: vision encodings (`prompt_reuse.py`); False for vLLM and the ASR
    prepares_frames: bool

    async def start(self) -> None:
        """Load the model (and capture CUDA Graphs where the runtime does)."""
        ...

    async def close(self) -> None: ...

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` under this engine's tokenizer (special tokens included)."""
        ...

    async def submit(self, request_id: str, prompt: EnginePrompt, sampling: Sampling) -> TextStream:
        """Hand the request to the engine; returns once the engine holds it."""
        ...

    async def abort(self, request_id: str) -> None:
        """Stop a request; a no-op for unknown or finished ones."""
        ...

    def prepare_image(self, image: Any) -> bool:
        """Encode a decoded frame ahead of the request that shows it (blocking: call it
        in a worker thread); False when nothing was done."""
        ...


class EngineStage(StageLifecycle):
    """A stage served by one `GenerationEngine`: entering the stage starts the engine,
    leaving closes it, and an abort reaches it; every foreign error is translated once."""

    name: str
    engine: GenerationEngine

    async def load(self) -> None:
        with map_engine_errors(self.name):
            await self.engine.start()

    async def release(self) -> None:
        with map_engine_errors(self.name):
            await self.engine.close()

    async def abort(self, request_id: str) -> None:
        with map_engine_errors(self.name):
            await self.engine.abort(request_id)

    def observe_timing(self, sink: Callable[[str, float], None]) -> None:
        """Where the engine times its requests (the batched one), `sink(stage, seconds)`
        hears it: the server's stage latency histograms."""
        if hasattr(self.engine, "on_timing"):
            self.engine.on_timing = sink
