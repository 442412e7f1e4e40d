"""`JoyAITurn`: one JoyAI-VL-Interaction turn, whatever serves the weights.

The gpu `VlmStage` (an in-process engine) and the remote `RemoteVlm` (vLLM's chat
completions over HTTP) differ only in how a built prompt becomes a stream of text
pieces and how tokens are counted. Everything else about a turn is JoyAI's and lives
here once: the serving rules around the model (`policy`, B30: silence before the first
question, no exact repeat), the prompt under the stage's budget with the session's
summary of dropped turns (`prompt`, `memory`, B29), and the action grammar parsed while
streaming (`actions`): speakable `VlmDelta`s, then exactly one `VlmDecisionResult`.

A stage subclasses it (before its transport base, so `release` closes the memory first),
sets `memory` in its constructor, and implements `count_tokens`, the budget properties and
`pieces`.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Protocol

from backends.base import VlmAction, VlmDecisionResult, VlmDelta, VlmRequest
from backends.joyai.actions import stream_actions
from backends.joyai.memory import SummarySettings
from backends.joyai.policy import previous_answer, silent_before_first_question, without_repeat
from backends.joyai.prompt import build_prompt

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    from backends.joyai.memory import SummaryMemory
    from backends.joyai.prompt import BuiltPrompt

__all__ = ["JoyAITurn", "SummaryKeys", "summary_settings"]


class SummaryKeys(Protocol):
    """The `summary_*` keys a stage's configuration carries (placement or remote table)."""

    @property
    def summary_memory(self) -> bool: ...
    @property
    def summary_max_chars(self) -> int: ...
    @property
    def summary_timeout_s(self) -> float: ...
    @property
    def summary_every_turns(self) -> int: ...


def summary_settings(config: SummaryKeys) -> SummarySettings:
    """The memory settings of a stage configuration's `summary_*` keys."""
    return SummarySettings(
        enabled=config.summary_memory,
        max_chars=config.summary_max_chars,
        timeout_s=config.summary_timeout_s,
        every_turns=config.summary_every_turns,
    )


class JoyAITurn:
    """The turn logic a JoyAI stage shares; see the module docstring."""

    name = "vlm"
    memory: SummaryMemory
    #: a frame's prompt cost in tokens
    image_tokens: int

    # --- what the serving side supplies ------------------------------------------------

    def count_tokens(self, text: str) -> int:
        raise NotImplementedError

    @property
    def budget_tokens(self) -> int:
        """Tokens the prompt may use."""
        raise NotImplementedError

    @property
    def max_images(self) -> int:
        """Frames per prompt."""
        raise NotImplementedError

    def pieces(
        self, request: VlmRequest, built: BuiltPrompt, max_tokens: int
    ) -> AsyncGenerator[str, None]:
        """The model's raw text for `built`, streamed, at most `max_tokens` of it."""
        raise NotImplementedError

    @property
    def reply_cap(self) -> int:
        """The stage's own reply cap (it also bounds a session's `max_output_tokens`)."""
        raise NotImplementedError

    @property
    def prepares_frames(self) -> bool:
        """Whether a frame is worth handing over when it arrives (the transformers
        engine encodes it then); a remote server or vLLM does its own caching."""
        return False

    async def prepare_frame(self, frame: bytes) -> None:
        """No-op unless `prepares_frames`."""

    @property
    def function_calling(self) -> bool:
        """JoyAI chooses no tool itself: its delegation is its one way to act."""
        return False

    # --- the turn ------------------------------------------------------------------------

    def build(self, request: VlmRequest) -> BuiltPrompt:
        """The prompt for `request`, within this stage's budget, with the session's
        summary of earlier turns when the memory holds one."""
        return build_prompt(
            request.context,
            count_tokens=self.count_tokens,
            budget_tokens=self.budget_tokens,
            image_tokens=self.image_tokens,
            max_images=self.max_images,
            summary=self.memory.summary(request.request_id),
        )

    def max_tokens(self, request: VlmRequest) -> int:
        """The reply cap of `request`: the session's, bounded by the stage's."""
        cap = self.reply_cap
        return min(request.max_tokens or cap, cap)

    async def generate(self, request: VlmRequest) -> AsyncIterator[VlmDelta | VlmDecisionResult]:
        if silent_before_first_question(request.context):  # JoyAI's rule, B30
            yield VlmDecisionResult(request.request_id, VlmAction.LISTEN)
            return
        built = self.build(request)
        self.memory.observe(request.request_id, request.context, built.dropped_turns)
        pieces = self.pieces(request, built, self.max_tokens(request))
        actions = stream_actions(pieces, request.request_id)
        decided = without_repeat(actions, previous_answer(request.context))
        async with aclosing(decided) as outputs:
            async for out in outputs:
                yield out

    async def release(self) -> None:
        await self.memory.aclose()  # outstanding summary jobs end before the engine or client
        await super().release()  # type: ignore[misc]
