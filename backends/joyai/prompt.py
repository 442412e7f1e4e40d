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
4. the current tick's frames are kept first (its newest `max_images`); history frames
   and history turns leave in blocks, so that between two drops every prompt begins
   with the previous one exactly (text and images) and vLLM's prefix cache reuses it
   (JoyAI's reference server likewise resets its context a whole chunk at a time):
   - frames: the history's ticks (user turns) are grouped in blocks of
     `frame_block_ticks(max_images)` (half of `max_images`), counted from the oldest
     turn of the history; the frames of the newest whole blocks that fit the images
     left after the current tick are shown. When a new frame would overflow, the oldest
     block's frames leave together, so about half the allowance of recent frames stays
     in view (at the camera's cadence of a frame a tick); only when the newest block
     alone holds more frames than the allowance (ticks of many frames) are the newest
     frames shown one by one, as they fit;
   - turns: the history's text is cut into blocks of a quarter of the budget
     (`HISTORY_BLOCKS`), counted from its oldest turn; the window starts at the oldest
     block start from which the prompt fits, measured with the stage's tokenizer (a
     callable) with every history frame the allowance permits paid for, so a block of
     turns leaves at once when the prompt outgrows the budget and frames leaving never
     let an older block back in;
   - the blocks are counted on what the context holds, so they stay put while the
     history grows at its end and while the core drops frames of old ticks, as long as
     the core's `max_context_images` exceeds the allowance (the defaults, 8 and 8, do
     whenever the tick has a frame);
     once the core deletes the oldest items (past `max_items` or `max_history_bytes`)
     every deletion moves the blocks, and prompts stop extending each other.

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
    "HISTORY_BLOCKS",
    "IMAGE_PLACEHOLDER",
    "JOYAI_SYSTEM_PROMPT",
    "SUMMARY_HEADER",
    "USER_QUERY_HEADER",
    "BuiltPrompt",
    "ChatMessage",
    "build_messages",
    "build_prompt",
    "frame_block_ticks",
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
#: history text leaves in blocks of `budget_tokens // HISTORY_BLOCKS` tokens: big enough
#: that a drop leaves room for many ticks before the next one, small enough that a block
#: stays within what history may use once the system prompt, the tick and the frames are
#: paid for (half the budget would often be all of it, and a drop would empty history)
HISTORY_BLOCKS: Final = 4


def frame_block_ticks(max_images: int) -> int:
    """Ticks per block of history frames: half of `max_images` (rounded up), so that
    after a block leaves about half the allowance of recent frames is still shown."""
    return max(1, (max_images + 1) // 2)


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
    dropped_turns: int  # leading history turns left out to fit the budget (whole blocks)
    dropped_frames: int  # frames of the context not shown (beyond `max_images`, by blocks)


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
    #: the body without image placeholders: what the history's text blocks are counted
    #: on, the same whichever of its frames are shown
    bare: str


def _frames_shown(
    context: PromptContext, image_allowance: int, block: int
) -> list[tuple[bytes, ...]]:
    """Per history turn, the frames shown: those of the newest whole blocks of `block`
    ticks that fit `image_allowance` (the module docstring's block rule); none of a turn
    that is not a user tick."""
    frames = context.history_frames
    per_turn = [
        frames[i] if i < len(frames) and turn.role == "user" else ()
        for i, turn in enumerate(context.history)
    ]
    # a block is `block` consecutive user turns, counted from the oldest one held
    block_of: list[int] = []
    ticks = 0
    for turn in context.history:
        block_of.append(ticks // block if turn.role == "user" else -1)
        ticks += turn.role == "user"
    in_block = [0] * -(-ticks // block)
    for i, b in enumerate(block_of):
        if b >= 0:
            in_block[b] += len(per_turn[i])
    first, shown = len(in_block), 0
    for b in range(len(in_block) - 1, -1, -1):
        if shown + in_block[b] > image_allowance:
            break
        shown += in_block[b]
        first = b
    if first < len(in_block) or not in_block:
        return [per_turn[i] if block_of[i] >= first else () for i in range(len(per_turn))]
    # not even the newest block fits (ticks of many frames): the newest frames that do,
    # one by one, rather than none
    left = image_allowance
    kept: list[tuple[bytes, ...]] = [()] * len(per_turn)
    for i in range(len(per_turn) - 1, -1, -1):
        kept[i] = per_turn[i][len(per_turn[i]) - min(left, len(per_turn[i])) :]
        left -= len(kept[i])
    return kept


def _history_turns(
    context: PromptContext, image_allowance: int, max_images: int
) -> tuple[list[_Turn], int]:
    """History as messages, with the frames the block rule shows; and how many frames
    were left out."""
    times = context.history_times_s
    frames = context.history_frames
    shown = _frames_shown(context, max(image_allowance, 0), frame_block_ticks(max_images))
    dropped = sum(len(f) for f in frames) - sum(len(f) for f in shown)
    turns: list[_Turn] = []
    for i, turn in enumerate(context.history):
        if turn.role == "user":
            time_s = times[i] if i < len(times) else None
            body = _tick(turn.text, time_s, len(shown[i]))
            turns.append(_Turn("user", body, shown[i], _tick(turn.text, time_s, 0)))
        elif turn.role == "assistant":
            answer = _answer(turn.text)
            turns.append(_Turn("assistant", answer, (), answer))
        else:
            turns.append(_Turn(turn.role, turn.text, (), turn.text))
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
    history, dropped_history = _history_turns(context, max_images - len(current_frames), max_images)
    current = _Turn(
        "user",
        _tick(context.transcript, context.time_s, len(current_frames)),
        current_frames,
        _tick(context.transcript, context.time_s, 0),
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
        max_images: images per prompt: the current tick's newest first (the last
            frame is the current moment), then history frames by the block rule.
        summary: a summary of the turns that left the window in earlier requests
            (`memory.py`), shown after the session's instructions; a fixed cost. None:
            the prompt is exactly as without a memory.

    Raises:
        InvalidPromptContext: the system prompt and the current turn alone exceed the
            budget (no history left to drop).
    """
    history, current, dropped_frames, current_count = _assemble(context, max_images=max_images)
    instructions = _prefix(session_instructions(context), summary)
    cost = image_tokens if callable(image_tokens) else (lambda _frame: image_tokens)

    # ChatML messages are delimited by special tokens, so their token counts add up;
    # each message is measured once and the whole prompt once more at the end.
    fixed = (
        count_tokens(render_message(ChatMessage("system", JOYAI_SYSTEM_PROMPT)))
        + count_tokens(render_message(ChatMessage(current.role, current.body)))
        + sum(cost(frame) for frame in current.frames)
        + count_tokens("<|im_start|>assistant\n")
        + (count_tokens(f"{instructions}\n\n") if instructions else 0)
    )
    # Where the window starts is decided on the turns' text without image placeholders,
    # with the newest history frames the allowance permits paid for whether shown or not:
    # then the decision only grows as the session goes on (a block of frames leaving
    # lets no older block of turns back in) and the blocks' starts never move.
    bare = [count_tokens(render_message(ChatMessage(t.role, t.bare))) for t in history]
    suffix = [0] * (len(history) + 1)
    for i in range(len(history) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + bare[i]
    reserve = _frame_reserve(
        context, max(max_images - current_count, 0), cost, count_tokens(IMAGE_PLACEHOLDER)
    )
    block = max(1, budget_tokens // HISTORY_BLOCKS)
    starts = [0]  # block starts: the first turn not a reply at or past each `block` tokens
    mark = block
    for i, turn in enumerate(history):
        counted = suffix[0] - suffix[i]
        if counted >= mark and turn.role != "assistant":
            starts.append(i)
            mark = (counted // block + 1) * block
    # the oldest block start whose window fits; past the newest start (a block as large
    # as the room history has), the oldest turns go one at a time as a last resort
    candidates = [*starts, *range(starts[-1] + 1, len(history) + 1)]
    for start in candidates:
        # a reply whose question was dropped opens nothing: drop it with its question
        while start < len(history) and history[start].role == "assistant":
            start += 1
        if start < len(history) and fixed + suffix[start] + reserve[start] > budget_tokens:
            continue
        messages, frames = _window(history, current, start, instructions)
        text = render_chatml(messages)
        measured = count_tokens(text) + sum(cost(frame) for frame in frames)
        if measured <= budget_tokens or start >= len(history):
            break  # a fit, or no history left to drop
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


def _frame_reserve(
    context: PromptContext, allowance: int, cost: Callable[[bytes], int], placeholder: int
) -> list[int]:
    """Per history turn index, the cost (image and placeholder) of the newest `allowance`
    frames of the user ticks from that turn on: what the window from there may show."""
    frames = context.history_frames
    reserve = [0] * (len(context.history) + 1)
    left, paid = allowance, 0
    for i in range(len(context.history) - 1, -1, -1):
        if context.history[i].role == "user" and i < len(frames) and left > 0:
            newest = frames[i][len(frames[i]) - min(left, len(frames[i])) :]
            paid += sum(cost(frame) + placeholder for frame in newest)
            left -= len(newest)
        reserve[i] = paid
    return reserve
