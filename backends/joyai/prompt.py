"""JoyAI prompt assembly under the VLM stage's own tokenizer and context budget (B3).

The VLM stage alone knows its tokenizer and its budget, so prompt assembly lives here:

1. the context (`spec.effects.PromptInput`) arrives validated: the core built it from
   session state whose client-supplied parts were checked where they entered;
2. ChatML messages are built: the system prompt, the bounded history (user transcripts
   as user turns, replies as assistant turns), then the current user turn: the header
   `[User Query (IMPORTANT — follow this instruction)]` and the transcript, followed by
   one Qwen3-VL image placeholder per frame;
3. the oldest history turns are dropped until the prompt, measured with the stage's
   tokenizer (a callable) plus the cost of the images, fits the budget.

Frames stay raw bytes until here (B2); decoding them is the engine adapter's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from backends.base import InvalidPromptContext

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from backends.base import HistoryTurn, PromptContext

__all__ = [
    "IMAGE_PLACEHOLDER",
    "USER_QUERY_HEADER",
    "BuiltPrompt",
    "ChatMessage",
    "build_prompt",
    "render_chatml",
]

USER_QUERY_HEADER: Final = "[User Query (IMPORTANT — follow this instruction)]"
IMAGE_PLACEHOLDER: Final = "<|vision_start|><|image_pad|><|vision_end|>"
#: a 448x448 frame is 28x28 patches of 16 px merged 2x2: 196 tokens; round up for margins
DEFAULT_IMAGE_TOKENS: Final = 256


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One ChatML message; `images` counts the image placeholders in `text`."""

    role: str  # system | user | assistant
    text: str
    images: int = 0

    def as_openai(self) -> dict[str, Any]:
        """The chat-completions form: text part, then one image part per image."""
        content: list[dict[str, Any]] = []
        body = self.text.replace(IMAGE_PLACEHOLDER, "")
        if body:
            content.append({"type": "text", "text": body})
        content.extend({"type": "image"} for _ in range(self.images))
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


def _user_turn(transcript: str | None, frames: int) -> ChatMessage:
    parts: list[str] = []
    if transcript and transcript.strip():
        parts.append(f"{USER_QUERY_HEADER}\n{transcript.strip()}")
    text = "\n".join(parts)
    if frames:
        text += ("\n" if text else "") + IMAGE_PLACEHOLDER * frames
    return ChatMessage("user", text, images=frames)


def _history_message(turn: HistoryTurn) -> ChatMessage:
    return ChatMessage(turn.role, turn.text)


def build_prompt(
    context: PromptContext,
    *,
    count_tokens: Callable[[str], int],
    budget_tokens: int,
    image_tokens: int | Callable[[bytes], int] = DEFAULT_IMAGE_TOKENS,
    max_images: int = 8,
) -> BuiltPrompt:
    """Assemble the prompt of `context` within `budget_tokens`.

    Args:
        context: the turn's prompt context, as the core built it.
        count_tokens: the stage tokenizer's length of a text (special tokens included).
        budget_tokens: what the prompt may use (the model length minus the reply cap).
        image_tokens: tokens one frame costs, or a callable measuring a frame.
        max_images: frames beyond this are dropped, oldest first (the last frame is
            the current moment).

    Raises:
        InvalidPromptContext: the system prompt and the current turn alone exceed the
            budget (no history left to drop).
    """
    frames = context.frames[-max_images:] if max_images > 0 else ()
    dropped_frames = len(context.frames) - len(frames)
    cost = image_tokens if callable(image_tokens) else (lambda _frame: image_tokens)
    images_cost = sum(cost(frame) for frame in frames)

    system = ChatMessage("system", context.system)
    current = _user_turn(context.transcript, len(frames))
    history = [_history_message(turn) for turn in context.history]
    # ChatML messages are delimited by special tokens, so their token counts add up;
    # each message is measured once and the whole prompt once more at the end.
    fixed = (
        count_tokens(render_message(system))
        + count_tokens(render_message(current))
        + count_tokens("<|im_start|>assistant\n")
        + images_cost
    )
    sizes = [count_tokens(render_message(m)) for m in history]
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
        messages = (system, *history[start:], current)
        text = render_chatml(messages)
        measured = count_tokens(text) + images_cost
        if measured <= budget_tokens or start >= len(history):
            break
        total = measured  # the sum was optimistic: keep dropping
    if measured > budget_tokens:
        raise InvalidPromptContext(
            f"prompt needs {measured} tokens without any history, over the VLM budget of"
            f" {budget_tokens}: shorten the system prompt or the transcript",
            stage="vlm",
        )
    return BuiltPrompt(
        messages=messages,
        text=text,
        images=tuple(frames),
        prompt_tokens=measured,
        dropped_turns=start,
        dropped_frames=dropped_frames,
    )
