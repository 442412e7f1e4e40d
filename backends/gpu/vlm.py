"""The decision stage: JoyAI-VL-Interaction (Qwen3-VL), prompt context -> action + text.

Per request: build the prompt under this stage's tokenizer and budget (`prompt.py`,
B3), decode the raw frames only now, in a worker thread and within a pixel limit
(`frames.py`, B2), submit through the shared request path (`submission.py`, B18), and
parse the action grammar while streaming (`actions.py`): speakable `VlmTextDelta`s as
soon as the marker is known, then exactly one `VlmDecision`. Sampling follows upstream's
JoyAI stage (`backends.joyai.sampling`, shared with the remote backend) unless the caller
sets its own.
"""

from __future__ import annotations

import io
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from backends.base import PromptContext, VlmDecision, VlmRequest, VlmTextDelta
from backends.gpu.engine_api import EnginePrompt, EngineStage, Sampling
from backends.gpu.frames import DEFAULT_MAX_PIXELS, decode_frames_off_loop
from backends.gpu.replica import ReplicaHealth
from backends.gpu.submission import stream_request
from backends.joyai.actions import stream_actions
from backends.joyai.prompt import (
    DEFAULT_IMAGE_TOKENS,
    JOYAI_SYSTEM_PROMPT,
    BuiltPrompt,
    build_prompt,
)
from backends.joyai.sampling import JOYAI_SAMPLING_PARAMS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from backends.gpu.engine_api import GenerationEngine
    from backends.gpu.placement import StagePlacement

__all__ = ["JOYAI_SAMPLING", "JOYAI_SYSTEM_PROMPT", "VlmStage"]

JOYAI_SAMPLING: Final = Sampling(**JOYAI_SAMPLING_PARAMS)


class VlmStage(EngineStage):
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
    ) -> None:
        self.engine = engine
        self.placement = placement
        self.health = ReplicaHealth("vlm")
        self.sampling = sampling or replace(JOYAI_SAMPLING, max_tokens=placement.max_tokens)
        self.image_tokens = image_tokens
        self.max_side = max_side
        self.max_pixels = max_pixels

    @property
    def budget_tokens(self) -> int:
        """Tokens the prompt may use: the configured budget, or the model length minus the reply."""
        if self.placement.context_budget_tokens is not None:
            return self.placement.context_budget_tokens
        return self.placement.max_model_len - self.sampling.max_tokens

    async def warmup(self) -> None:
        """One request with a frame: pays the one-off processor setup before serving."""
        frame = _blank_jpeg()
        context = PromptContext(system=JOYAI_SYSTEM_PROMPT, transcript="Hello.", frames=(frame,))
        async for _ in self.generate(VlmRequest("warmup-vlm", context, max_tokens=4)):
            pass

    def build(self, request: VlmRequest) -> BuiltPrompt:
        """The prompt for `request`, within this stage's budget."""
        return build_prompt(
            request.context,
            count_tokens=self.engine.count_tokens,
            budget_tokens=self.budget_tokens,
            image_tokens=self.image_tokens,
            max_images=self.placement.max_images,
        )

    async def generate(self, request: VlmRequest) -> AsyncIterator[VlmTextDelta | VlmDecision]:
        built = self.build(request)
        images = await decode_frames_off_loop(
            built.images, max_side=self.max_side, max_pixels=self.max_pixels
        )
        prompt = EnginePrompt(built.text, images=images)
        cap = self.sampling.max_tokens
        sampling = replace(self.sampling, max_tokens=min(request.max_tokens or cap, cap))
        pieces = stream_request(
            self.engine, self.health, request.request_id, prompt, sampling, stage=self.name
        )
        async with aclosing(stream_actions(pieces)) as outputs:
            async for out in outputs:
                yield out


def _blank_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 64), (40, 40, 40)).save(out, format="JPEG")
    return out.getvalue()
