"""JoyAI's serving rules around the model's decision (B30).

These are the reference server's rules for these weights, not the protocol's, so they
live with the rest of JoyAI's interface (prompt layout, output grammar) and both stages
that run the weights apply them: the gpu `VlmStage` and the remote `RemoteVlm`.

1. Silence before the first question: JoyAI's reference server answers every observation
   tick with `</silence>` without asking the model until the user has asked something;
   the model was trained on sessions that start with a question. Here: a turn without
   words (camera only, or a transcript that came out empty) while no earlier turn of the
   session carried words (`PromptContext.asked_before`, or a user turn with text in its
   history) is decided `listen` at once. The silence enters history like any other. A
   session's own `instructions` count as its standing question (the reference takes the
   user's prompt text as the query): a camera-profile session, which has no ASR, that
   says "tell me when someone comes in" is watched from its first tick.
2. Exact-repeat suppression: an answer that repeats, word for word (whitespace
   normalised), the last answer the assistant spoke is not said again: the turn is
   decided `listen`. It applies only to a turn without a new question, so a user who asks
   the same thing twice is answered twice. Because replies stream, the speakable deltas
   are held back while they still read as that same answer and released the moment they
   differ, so only a reply that starts like the previous one waits, and never longer
   than that shared prefix.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING

from backends.base import VlmAction, VlmDecisionResult, VlmDelta
from backends.joyai.prompt import session_instructions

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from backends.base import PromptContext

__all__ = ["previous_answer", "silent_before_first_question", "without_repeat"]


def _words(text: str) -> str:
    return " ".join(text.split())


def _has_question(context: PromptContext) -> bool:
    return bool(context.transcript and context.transcript.strip())


def silent_before_first_question(context: PromptContext) -> bool:
    """Whether this turn is answered with silence without running the model (rule 1)."""
    if _has_question(context) or context.asked_before:
        return False
    if session_instructions(context) is not None:
        return False
    return not any(turn.role == "user" and turn.text.strip() for turn in context.history)


def previous_answer(context: PromptContext) -> str | None:
    """The answer this turn must not repeat (rule 2): the last spoken assistant turn,
    whitespace normalised; None for a turn that asks something new or when nothing was
    said yet."""
    if _has_question(context):
        return None
    for turn in reversed(context.history):
        if turn.role == "assistant" and turn.text.strip():
            return _words(turn.text)
    return None


async def without_repeat(
    outputs: AsyncGenerator[VlmDelta | VlmDecisionResult, None], previous: str | None
) -> AsyncGenerator[VlmDelta | VlmDecisionResult, None]:
    """`outputs` (deltas, then one decision) with an exact repeat of `previous` turned
    into a `listen` (rule 2); `outputs` is closed when this generator is."""
    held: list[VlmDelta] = []
    said = ""
    holding = previous is not None
    async with aclosing(outputs):
        async for out in outputs:
            if isinstance(out, VlmDelta):
                if not holding:
                    yield out
                    continue
                held.append(out)
                said += out.text
                if previous is not None and previous.startswith(_words(said)):
                    continue  # still reads as the previous answer
                holding = False
                for delta in held:
                    yield delta
                held.clear()
                continue
            if (
                holding
                and out.action is VlmAction.SPEAK
                and previous is not None
                and _words(out.text) == previous
            ):
                yield VlmDecisionResult(out.request_id, VlmAction.LISTEN)
                return
            for delta in held:
                yield delta
            held.clear()
            yield out
