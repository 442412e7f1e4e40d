"""The decision stage: JoyAI-VL-Interaction (Qwen3-VL), prompt context -> action + text.

Per request: build the prompt under this stage's tokenizer and budget (`prompt.py`,
B3), decode the raw frames only now, in a worker thread and within a pixel limit
(`frames.py`, B2), submit through the shared request path (`submission.py`, B18), and
parse the action grammar while streaming (`actions.py`): speakable `VlmDelta`s as
soon as the marker is known, then exactly one `VlmDecisionResult`. JoyAI's serving rules
(`backends.joyai.policy`, B30) apply around it: silence before the first question
without running the model, and an exact repeat of the last answer decided `listen`.
Sampling follows upstream's JoyAI stage (`backends.joyai.sampling`, shared with the
remote backend) unless the caller sets its own. With `summary_memory` on, the turns the
budget drops are summarised in the background by the same engine (`backends.joyai.memory`)
and the session's summary opens its later prompts.

Frames ahead of their turn: where the engine keeps frames' vision encodings (the
transformers runtime, `prompt_reuse.py`), `prepare_frame` decodes a frame as it
arrives and has the engine encode it, so the turn's prefill finds it done; bounded, and
best effort (a frame not prepared is encoded at its turn, as without).
"""

from __future__ import annotations

import io
import logging
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Final

import anyio

from backends.base import PromptContext, VlmRequest
from backends.gpu.engine_api import EnginePrompt, EngineStage, Sampling
from backends.gpu.frames import DEFAULT_MAX_PIXELS, decode_frames, decode_frames_off_loop
from backends.gpu.replica import ReplicaHealth
from backends.gpu.submission import stream_request
from backends.joyai.memory import SummaryMemory, SummarySettings
from backends.joyai.prompt import (
    DEFAULT_IMAGE_TOKENS,
    JOYAI_SYSTEM_PROMPT,
    ChatMessage,
    render_chatml,
)
from backends.joyai.sampling import JOYAI_SAMPLING_PARAMS
from backends.joyai.turn import JoyAITurn, summary_settings

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from backends.gpu.engine_api import GenerationEngine
    from backends.gpu.placement import StagePlacement
    from backends.joyai.prompt import BuiltPrompt

__all__ = ["JOYAI_SAMPLING", "JOYAI_SYSTEM_PROMPT", "MAX_PREPARING", "VlmStage"]

log = logging.getLogger("joyduplex.backends.gpu")

JOYAI_SAMPLING: Final = Sampling(**JOYAI_SAMPLING_PARAMS)
#: frames encoded ahead of their turn at once (`VlmStage.prepare_frame`): two keep up
#: with a camera a session sends a frame a second from, and bound the GPU work that
#: shares the device with a running request
MAX_PREPARING: Final = 2


class VlmStage(JoyAITurn, EngineStage):
    """JoyAI behind a `GenerationEngine` (vLLM in production)."""

    name = "vlm"

    def __init__(
        self,
        engine: GenerationEngine,
        placement: StagePlacement,
        *,
        sampling: Sampling | None = None,
        image_tokens: int = DEFAULT_IMAGE_TOKENS,
        max_side: int = 448,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        summary: SummarySettings | None = None,
    ) -> None:
        self.engine = engine
        self.placement = placement
        self.health = ReplicaHealth("vlm")
        self.sampling = sampling or replace(JOYAI_SAMPLING, max_tokens=placement.max_tokens)
        self.image_tokens = image_tokens
        self.max_side = max_side
        self.max_pixels = max_pixels
        self.memory = SummaryMemory(summary or summary_settings(placement), self._summarize)
        self._preparing = 0  # frames being prepared (`prepare_frame`)

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    @property
    def budget_tokens(self) -> int:
        """Tokens the prompt may use: the configured budget, or the model length minus the reply."""
        if self.placement.context_budget_tokens is not None:
            return self.placement.context_budget_tokens
        return self.placement.max_model_len - self.sampling.max_tokens

    @property
    def max_images(self) -> int:
        return self.placement.max_images

    @property
    def reply_cap(self) -> int:
        return self.sampling.max_tokens

    @property
    def prepares_frames(self) -> bool:
        return self.engine.prepares_frames

    async def prepare_frame(self, frame: bytes) -> None:
        """Decode a frame as its turn will (same limits) and have the engine encode it,
        in a worker thread, at most `MAX_PREPARING` at once in this process (the stage
        is shared by every session): a frame arriving while that many run is dropped,
        not queued, and is encoded at its turn's prefill as without preparation. Never
        raises; a failure is logged and costs nothing else."""
        if not self.engine.prepares_frames or self._preparing >= MAX_PREPARING:
            return
        self._preparing += 1
        try:
            await anyio.to_thread.run_sync(self._prepare_now, frame)
        except Exception as exc:
            log.debug("vlm: a frame was not prepared (%s: %s)", type(exc).__name__, exc)
        finally:
            self._preparing -= 1

    def _prepare_now(self, frame: bytes) -> None:
        (image,) = decode_frames((frame,), max_side=self.max_side, max_pixels=self.max_pixels)
        self.engine.prepare_image(image)

    async def warmup(self) -> None:
        """One request with a frame: pays the one-off processor setup before serving."""
        frame = _blank_jpeg()
        context = PromptContext(system=JOYAI_SYSTEM_PROMPT, transcript="Hello.", frames=(frame,))
        async for _ in self.generate(VlmRequest("warmup-vlm", context, max_tokens=4)):
            pass

    async def _summarize(
        self, messages: list[tuple[str, str]], max_tokens: int, job_id: str
    ) -> str:
        """One summary job of the memory: a text-only prompt on this stage's engine."""
        prompt = EnginePrompt(render_chatml([ChatMessage(role, text) for role, text in messages]))
        sampling = replace(self.sampling, max_tokens=max_tokens)
        pieces = stream_request(self.engine, self.health, job_id, prompt, sampling, stage=self.name)
        async with aclosing(pieces):
            return "".join([piece async for piece in pieces])

    async def pieces(
        self, request: VlmRequest, built: BuiltPrompt, max_tokens: int
    ) -> AsyncGenerator[str, None]:
        # the raw frames are decoded only now, off the event loop, within the pixel limit
        images = await decode_frames_off_loop(
            built.images, max_side=self.max_side, max_pixels=self.max_pixels
        )
        prompt = EnginePrompt(built.text, images=images)
        sampling = replace(self.sampling, max_tokens=max_tokens)
        stream = stream_request(
            self.engine, self.health, request.request_id, prompt, sampling, stage=self.name
        )
        async with aclosing(stream):
            async for piece in stream:
                yield piece


def _blank_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 64), (40, 40, 40)).save(out, format="JPEG")
    return out.getvalue()
