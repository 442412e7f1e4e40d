"""JoyAI prompt assembly under the VLM stage's own tokenizer and context budget (B3).

The VLM stage alone knows its tokenizer and its budget, so prompt assembly lives here.
The layout is the one the JoyAI-VL-Interaction weights were trained and are served with
(JoyAI's reference server, `services/webinfer/` of jd-opensource/JoyAI-VL-Interaction;
vLLM-Omni's `asr_to_joyai` stage processor lays out the single-tick case the same way):

1. the system message is always the model's trained system prompt
   (`JOYAI_SYSTEM_PROMPT`), which defines the output grammar `actions.py` parses; a
   session's own `instructions` never replace it: they open the first user message of
   the window, where the reference server places its extra (static) instructions;
2. every observation tick is a user message: the header
   `[User Query (IMPORTANT — follow this instruction)]` and the question, only on the
   tick the question arrives; the tick's time marker `<t seconds>` when its time is
   known; one Qwen3-VL image placeholder per frame. The parts are concatenated without
   separators, as the Qwen3-VL chat template renders a list of content parts;
3. every answer is an assistant message in the model's own grammar: `</response> text`,
   or `</silence>` for a tick it stayed silent on (a history turn with no text);
4. the oldest history turns are dropped until the prompt, measured with the stage's
   tokenizer (a callable) plus the cost of the images, fits the budget; frames beyond
   `max_images` are dropped oldest first (the current tick's frames are kept first).

Frames stay raw bytes until here (B2); decoding them is the engine adapter's job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from backends.base import InvalidPromptContext
from spec.session_config import DEFAULT_INSTRUCTIONS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from backends.base import PromptContext

__all__ = [
    "DEFAULT_IMAGE_TOKENS",
    "IMAGE_PLACEHOLDER",
    "JOYAI_SYSTEM_PROMPT",
    "SUMMARY_HEADER",
    "USER_QUERY_HEADER",
    "BuiltPrompt",
    "ChatMessage",
    "build_messages",
    "build_prompt",
    "render_chatml",
    "render_message",
    "session_instructions",
    "summary_block",
    "time_marker",
]

# Interface constant of the JoyAI-VL-Interaction weights: the system prompt the model was
# trained with, reproduced exactly. It mirrors `DEFAULT_SYSTEM_PROMPT_EN` of JoyAI's
# reference server (jd-opensource/JoyAI-VL-Interaction, services/webinfer/live_adapter.py,
# the server's default `system_prompt`), identical to `DEFAULT_SYSTEM_PROMPT` of vLLM-Omni's
# JoyAI interaction server (experimental/fullduplex/joyvl/decision/prompts.py), which its
# `asr_to_joyai` stage processor sends.
JOYAI_SYSTEM_PROMPT: Final = (
    "You are a real-time video streaming assistant observing a continuous camera feed frame"
    " by frame. The last frame represents the current moment.\n"
    "## Action Format\n"
    "At every inference step you MUST choose exactly one of the following three actions:\n"
    "**Stay silent** — output ONLY:\n"
    "</silence>\n"
    "Choose this when nothing noteworthy has changed in the scene, no user query is pending,"
    " or there is nothing useful to say.\n"
    "**Speak** — output the token followed by a concise reply:\n"
    "</response> Your reply here.\n"
    "Choose this when you observe something worth reporting or a significant state change,"
    " or when you can answer a user question based on available evidence.\n"
    "\n"
    "**Delegate** — when a question is too hard or error-prone to answer reliably yourself,"
    " speak a brief note that you're delegating, then hand the question to the background"
    " solver:\n"
    "</response> Brief note that you're delegating. </delegation> <the question>"
)
# Interface constant: the question header, as both references spell it.
USER_QUERY_HEADER: Final = "[User Query (IMPORTANT — follow this instruction)]"
IMAGE_PLACEHOLDER: Final = "<|vision_start|><|image_pad|><|vision_end|>"
#: opens the summary of the turns that left the window (`memory.py`); not from the
#: references, which keep their summaries in their own layout
SUMMARY_HEADER: Final = "[Earlier in this session]"
#: the model's answers in history, in its own grammar (`actions.py`)
SILENCE_ANSWER: Final = "</silence>"
RESPONSE_PREFIX: Final = "</response>"
#: a 448x448 frame is 28x28 patches of 16 px merged 2x2: 196 tokens; round up for margins
DEFAULT_IMAGE_TOKENS: Final = 256


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One ChatML message; `images` counts the image placeholders in `text`."""

    role: str  # system | user | assistant
    text: str
    images: int = 0

    def as_openai(self) -> dict[str, Any]:
        """The chat-completions form: text and image parts in the order of `text`."""
        content: list[dict[str, Any]] = []
        pieces = self.text.split(IMAGE_PLACEHOLDER)
        for i, piece in enumerate(pieces):
            if i:
                content.append({"type": "image"})
            if piece:
                content.append({"type": "text", "text": piece})
        return {"role": self.role, "content": content}


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    """A prompt ready for the engine."""

    messages: tuple[ChatMessage, ...]
    text: str  # ChatML, ending with the assistant header (generation prompt)
    images: tuple[bytes, ...]  # raw frames, one per placeholder, in order
    prompt_tokens: int  # measured text tokens + image cost
    dropped_turns: int  # history turns left out to fit the budget
    dropped_frames: int  # frames beyond `max_images` left out (oldest first)


def render_message(message: ChatMessage) -> str:
    return f"<|im_start|>{message.role}\n{message.text}<|im_end|>\n"


def render_chatml(messages: Sequence[ChatMessage]) -> str:
    """Qwen ChatML with the generation prompt for the assistant turn."""
    return "".join(render_message(m) for m in messages) + "<|im_start|>assistant\n"


def time_marker(seconds: float) -> str:
    """`<12.3 seconds>`: the reference server's tick time (one decimal, halves up)."""
    rounded = math.floor(seconds * 10 + 0.5) / 10
    return f"<{rounded:.1f} seconds>"


def session_instructions(context: PromptContext) -> str | None:
    """The session's own instructions, None when it set none.

    `PromptInput.system` holds the session's `instructions`, or the server default when
    it set none; the default (or this model's own prompt, passed by a caller that builds
    contexts itself) adds nothing to the trained prompt.
    """
    text = context.system.strip()
    if not text or text in (DEFAULT_INSTRUCTIONS, JOYAI_SYSTEM_PROMPT):
        return None
    return text


def _tick(query: str | None, time_s: float | None, frames: int) -> str:
    """One observation tick's user content: header and query, time marker, frames."""
    parts: list[str] = []
    if query and query.strip():
        parts.append(f"{USER_QUERY_HEADER}\n{query.strip()}")
    if time_s is not None:
        parts.append(time_marker(time_s))
    parts.append(IMAGE_PLACEHOLDER * frames)
    return "".join(parts)


def _answer(text: str) -> str:
    text = text.strip()
    return f"{RESPONSE_PREFIX} {text}" if text else SILENCE_ANSWER


@dataclass(frozen=True, slots=True)
class _Turn:
    role: str
    body: str  # without the instructions prefix
    frames: tuple[bytes, ...]


def _history_turns(context: PromptContext, image_allowance: int) -> tuple[list[_Turn], int]:
    """History as messages, with the newest `image_allowance` frames kept; and how many
    frames were left out."""
    times = context.history_times_s
    frames = context.history_frames
    kept_frames: list[tuple[bytes, ...]] = [() for _ in context.history]
    dropped = 0
    allowance = max(image_allowance, 0)
    for i in range(len(context.history) - 1, -1, -1):
        turn_frames = frames[i] if i < len(frames) else ()
        keep = turn_frames[len(turn_frames) - min(allowance, len(turn_frames)) :]
        kept_frames[i] = keep
        dropped += len(turn_frames) - len(keep)
        allowance -= len(keep)
    turns: list[_Turn] = []
    for i, turn in enumerate(context.history):
        if turn.role == "user":
            time_s = times[i] if i < len(times) else None
            body = _tick(turn.text, time_s, len(kept_frames[i]))
            turns.append(_Turn("user", body, kept_frames[i]))
        elif turn.role == "assistant":
            turns.append(_Turn("assistant", _answer(turn.text), ()))
        else:
            turns.append(_Turn(turn.role, turn.text, ()))
    return turns, dropped


def build_messages(
    context: PromptContext, *, max_images: int = 8, start: int = 0, summary: str | None = None
) -> tuple[tuple[ChatMessage, ...], tuple[bytes, ...], int]:
    """The ChatML messages of `context` with the history from turn `start` on (no budget):
    messages, the frames in placeholder order, and the frames left out."""
    history, current, dropped, _ = _assemble(context, max_images=max_images)
    prefix = _prefix(session_instructions(context), summary)
    messages, frames = _window(history, current, start, prefix)
    return messages, frames, dropped


def _assemble(context: PromptContext, *, max_images: int) -> tuple[list[_Turn], _Turn, int, int]:
    current_frames = context.frames[-max_images:] if max_images > 0 else ()
    dropped = len(context.frames) - len(current_frames)
    history, dropped_history = _history_turns(context, max_images - len(current_frames))
    current = _Turn(
        "user", _tick(context.transcript, context.time_s, len(current_frames)), current_frames
    )
    return history, current, dropped + dropped_history, len(current_frames)


def summary_block(summary: str) -> str:
    """How a summary of the turns that left the window (`memory.py`) is shown."""
    return f"{SUMMARY_HEADER}\n{summary}"


def _prefix(instructions: str | None, summary: str | None) -> str | None:
    """What opens the first user message: the session's instructions, then the summary."""
    parts = [p for p in (instructions, summary_block(summary) if summary else None) if p]
    return "\n\n".join(parts) if parts else None


def _window(
    history: Sequence[_Turn], current: _Turn, start: int, instructions: str | None
) -> tuple[tuple[ChatMessage, ...], tuple[bytes, ...]]:
    """System prompt, history from `start`, the current tick; the session's instructions
    (and the summary of earlier turns, when there is one) open the first user message
    (where the reference server puts its static prefix)."""
    turns = [*history[start:], current]
    messages = [ChatMessage("system", JOYAI_SYSTEM_PROMPT)]
    frames: list[bytes] = []
    prefixed = instructions is None
    for turn in turns:
        body = turn.body
        if not prefixed and turn.role == "user":
            body = f"{instructions}\n\n{body}"
            prefixed = True
        messages.append(ChatMessage(turn.role, body, images=len(turn.frames)))
        frames.extend(turn.frames)
    return tuple(messages), tuple(frames)


def build_prompt(
    context: PromptContext,
    *,
    count_tokens: Callable[[str], int],
    budget_tokens: int,
    image_tokens: int | Callable[[bytes], int] = DEFAULT_IMAGE_TOKENS,
    max_images: int = 8,
    summary: str | None = None,
) -> BuiltPrompt:
    """Assemble the prompt of `context` within `budget_tokens`.

    Args:
        context: the turn's prompt context, as the core built it.
        count_tokens: the stage tokenizer's length of a text (special tokens included).
        budget_tokens: what the prompt may use (the model length minus the reply cap).
        image_tokens: tokens one frame costs, or a callable measuring a frame.
        max_images: frames beyond this are dropped, oldest first (the last frame is
            the current moment).
        summary: a summary of the turns that left the window in earlier requests
            (`memory.py`), shown after the session's instructions; a fixed cost. None:
            the prompt is exactly as without a memory.

    Raises:
        InvalidPromptContext: the system prompt and the current turn alone exceed the
            budget (no history left to drop).
    """
    history, current, dropped_frames, _ = _assemble(context, max_images=max_images)
    instructions = _prefix(session_instructions(context), summary)
    cost = image_tokens if callable(image_tokens) else (lambda _frame: image_tokens)

    def turn_cost(turn: _Turn) -> int:
        text = render_message(ChatMessage(turn.role, turn.body))
        return count_tokens(text) + sum(cost(frame) for frame in turn.frames)

    # ChatML messages are delimited by special tokens, so their token counts add up;
    # each message is measured once and the whole prompt once more at the end.
    fixed = (
        count_tokens(render_message(ChatMessage("system", JOYAI_SYSTEM_PROMPT)))
        + turn_cost(current)
        + count_tokens("<|im_start|>assistant\n")
        + (count_tokens(f"{instructions}\n\n") if instructions else 0)
    )
    sizes = [turn_cost(turn) for turn in history]
    total = fixed + sum(sizes)
    start = 0
    while True:
        while total > budget_tokens and start < len(history):
            total -= sizes[start]
            start += 1
        # a reply whose question was dropped opens nothing: drop it with its question
        while start < len(history) and history[start].role == "assistant":
            total -= sizes[start]
            start += 1
        messages, frames = _window(history, current, start, instructions)
        text = render_chatml(messages)
        measured = count_tokens(text) + sum(cost(frame) for frame in frames)
        if measured <= budget_tokens or start >= len(history):
            break
        total = measured  # the sum was optimistic: keep dropping
    if measured > budget_tokens:
        raise InvalidPromptContext(
            f"prompt needs {measured} tokens without any history, over the VLM budget of"
            f" {budget_tokens}: shorten the system prompt or the transcript",
            stage="vlm",
        )
    dropped_frames += sum(len(turn.frames) for turn in history[:start])
    return BuiltPrompt(
        messages=messages,
        text=text,
        images=frames,
        prompt_tokens=measured,
        dropped_turns=start,
        dropped_frames=dropped_frames,
    )
