"""`FrameDescriber`: a deterministic stand-in for the vision-language model. It is NOT a VLM.

No weights of a real vision-language model run offline on a 2-core CPU from a package,
so the embedded backend answers from measurements
instead (`frame_features.py`): dominant colour names, brightness, and motion between the
last two frames of the request. It understands only a few kinds of question, by keyword:

    colour       "what colour is this"     -> "I see something red."
    brightness   "is it dark in here"      -> "It looks bright."
    motion       "is anything moving"      -> "I see movement." / "Nothing is moving."
    anything     "what do you see"         -> colour and brightness together

Camera-only turns (no transcript) follow the upstream speech-profile scenario of a spoken
instruction followed by camera-only turns: the describer speaks only when something
changed, else it decides `listen`. "Changed" means the last frame's dominant colour
differs from the frame before it in this request or, with a single frame, from the colour
the assistant last named in history; or clear motion between the last two frames. When
the most recent user turn asked about colour and no answer named a colour yet, a
camera-only turn answers it. The describer keeps no state of its own: everything it
compares comes from the request, so sessions cannot leak into each other.

A reply streams as word-sized `VlmDelta`s followed by exactly one `VlmDecisionResult`.

It ignores the prompt's text: neither the system prompt nor the session's `instructions`
change what it says (it reads only the transcript and history for the keywords above, and
the frames). Nor does it read the tick form of history (B29): times, earlier turns'
frames and silent ticks are there for the real model; and it does not apply JoyAI's
serving rules (silence before the first question, repeat suppression, B30). The real
model's prompt (JoyAI's trained system prompt, the session's instructions, history in
tick format) is assembled by `backends.joyai.prompt` for the gpu backend and the remote
one; the CPU stand-in cannot show how that prompt steers answers.
"""

from __future__ import annotations

import enum
import io
import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from backends.base import (
    InvalidPromptContext,
    PromptContext,
    StageLifecycle,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.cpu.assets import import_extra
from backends.cpu.failures import serving_failures
from backends.cpu.frame_features import (
    COLOUR_NAMES,
    FrameFeatures,
    analyse_frame,
    motion_between,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = [
    "MOTION_THRESHOLD",
    "FrameDescriber",
    "Topic",
    "compose_reply",
    "topic_of",
    "word_deltas",
]

log = logging.getLogger("joyduplex.backends.cpu")

#: mean absolute luma change between the last two frames that counts as movement
MOTION_THRESHOLD = 0.05


class Topic(enum.Enum):
    """What a transcript asks about."""

    COLOUR = "colour"
    BRIGHTNESS = "brightness"
    MOTION = "motion"
    SCENE = "scene"


_TOPIC_PATTERNS = (
    (Topic.COLOUR, re.compile(r"\bcolou?rs?\b|\bshades?\b|\bhues?\b")),
    (Topic.BRIGHTNESS, re.compile(r"\bbright\w*|\bdark\w*|\bdim\b|\blit\b|\blight(ing)?\b")),
    (Topic.MOTION, re.compile(r"\bmov\w*|\bmotion\b|\bstill\b|\bchang\w*")),
)
_COLOUR_WORDS = {name: name for name in COLOUR_NAMES} | {"gray": "grey", "violet": "purple"}
_COLOUR_WORD = re.compile(r"\b(" + "|".join(sorted(_COLOUR_WORDS)) + r")\b")


def topic_of(text: str) -> Topic:
    """The first topic whose keywords appear in `text`, else the whole scene."""
    lowered = text.lower()
    for topic, pattern in _TOPIC_PATTERNS:
        if pattern.search(lowered):
            return topic
    return Topic.SCENE


def _first_colour_named(text: str) -> str | None:
    match = _COLOUR_WORD.search(text.lower())
    return _COLOUR_WORDS[match.group(1)] if match else None


def _colour_sentence(frame: FrameFeatures) -> str:
    (top, _share), *others = frame.colours  # others: each at least MIN_COLOUR_SHARE
    if not others:
        return f"I see something {top}."
    return f"I see mostly {top}, with some {others[0][0]}."


def _brightness_sentence(frame: FrameFeatures) -> str:
    level = frame.brightness
    if level < 0.12:
        return "It is very dark."
    if level < 0.35:
        return "It is quite dark."
    if level < 0.65:
        return "It is neither bright nor dark."
    if level < 0.85:
        return "It looks bright."
    return "It is very bright."


def _speak(request_id: str, text: str) -> VlmDecisionResult:
    return VlmDecisionResult(request_id, VlmAction.SPEAK, text)


def _answer(topic: Topic, latest: FrameFeatures | None, previous: FrameFeatures | None) -> str:
    if latest is None:
        return "I cannot see anything yet: no camera frame has arrived."
    if topic is Topic.COLOUR:
        return _colour_sentence(latest)
    if topic is Topic.BRIGHTNESS:
        return _brightness_sentence(latest)
    if topic is Topic.MOTION:
        if previous is None:
            return "I need at least two frames to tell whether anything moves."
        moved = motion_between(previous, latest) >= MOTION_THRESHOLD
        return "I see movement." if moved else "Nothing is moving."
    return f"{_colour_sentence(latest)} {_brightness_sentence(latest)}"


def compose_reply(
    request_id: str,
    context: PromptContext,
    latest: FrameFeatures | None,
    previous: FrameFeatures | None,
) -> VlmDecisionResult:
    """Decide request `request_id`'s turn from the context and the last two frames'
    features."""
    transcript = (context.transcript or "").strip()
    if transcript:
        return _speak(request_id, _answer(topic_of(transcript), latest, previous))
    if latest is None:
        return VlmDecisionResult(request_id, VlmAction.LISTEN)

    # the last question: camera-only ticks are user turns without words (B29)
    last_user = next(
        (t.text for t in reversed(context.history) if t.role == "user" and t.text.strip()), None
    )
    colour_question = last_user is not None and topic_of(last_user) is Topic.COLOUR
    if previous is not None:
        earlier_colour: str | None = previous.dominant
    else:
        earlier_colour = next(
            (
                colour
                for turn in reversed(context.history)
                if turn.role == "assistant" and (colour := _first_colour_named(turn.text))
            ),
            None,
        )

    current = latest.dominant
    if earlier_colour is None:
        # Nothing seen before: answer a pending colour question, otherwise stay quiet.
        return (
            _speak(request_id, _colour_sentence(latest))
            if colour_question
            else VlmDecisionResult(request_id, VlmAction.LISTEN)
        )
    if current != earlier_colour:
        if colour_question:
            return _speak(request_id, f"Now I see something {current}.")
        return _speak(request_id, f"Something {current} came into view.")
    if previous is not None and motion_between(previous, latest) >= MOTION_THRESHOLD:
        return _speak(request_id, "I see movement.")
    return VlmDecisionResult(request_id, VlmAction.LISTEN)


def word_deltas(text: str) -> list[str]:
    """Split `text` into word-sized pieces that concatenate back to it."""
    return re.findall(r"\s*\S+", text)


class FrameDescriber(StageLifecycle):
    """The `Vlm` stage of the CPU backend: a frame describer, not a vision-language model.

    Deterministic: the same request always gets the same reply. See the module docstring
    for the questions it understands and when a camera-only turn speaks.
    """

    name = "vlm"

    def __init__(self) -> None:
        self._loaded = False

    # --- lifecycle ---------------------------------------------------------------------

    async def load(self) -> None:
        import_extra("PIL.Image", stage="vlm")
        log.info("vlm: frame describer ready (a deterministic stand-in, not a VLM)")
        self._loaded = True

    async def release(self) -> None:
        self._loaded = False

    async def warmup(self) -> None:
        """Describe one tiny generated frame (loads Pillow's PNG decoder)."""
        from PIL import Image

        buffer = io.BytesIO()
        Image.new("RGB", (8, 8), (255, 0, 0)).save(buffer, format="PNG")
        context = PromptContext(
            system="", transcript="what colour is this", frames=(buffer.getvalue(),)
        )
        async for _item in self.generate(VlmRequest("warmup", context)):
            pass

    async def abort(self, request_id: str) -> None:
        """No-op: a reply is computed at once; the runtime stops consuming the stream."""

    #: a frame costs nothing before its turn here
    prepares_frames = False
    #: a frame describer chooses no tools: it accepts a session's `tools` and never calls
    #: one (B37; `session.created` says so in `capabilities.function_calling`)
    function_calling = False

    async def prepare_frame(self, frame: bytes) -> None:
        """No-op (`prepares_frames` is False)."""

    # --- generation --------------------------------------------------------------------

    async def generate(self, request: VlmRequest) -> AsyncIterator[VlmDelta | VlmDecisionResult]:
        """Stream the reply to one turn: text deltas (speak only), then one decision.

        Raises:
            InvalidPromptContext: a frame that is not a decodable JPEG/PNG image
                (client-supplied data; the context's types were validated by the core).
            StageFailed: any other failure.
        """
        context = request.context
        frames = context.frames[-2:]
        with serving_failures("vlm", request.request_id):
            first_index = len(context.frames) - len(frames)
            features = await anyio.to_thread.run_sync(self._analyse, frames, first_index)
            previous = features[-2] if len(features) == 2 else None
            latest = features[-1] if features else None
            decision = compose_reply(request.request_id, context, latest, previous)
        if decision.action is not VlmAction.LISTEN:
            words = word_deltas(decision.text)
            if request.max_tokens is not None:
                words = words[: max(request.max_tokens, 1)]
            for word in words:
                yield VlmDelta(request.request_id, word)
            decision = replace(decision, text="".join(words))
        yield decision

    @staticmethod
    def _analyse(frames: tuple[bytes, ...], first_index: int) -> list[FrameFeatures]:
        features = []
        for offset, frame in enumerate(frames):
            try:
                features.append(analyse_frame(frame))
            except (ValueError, OSError) as exc:
                raise InvalidPromptContext(
                    f"prompt context `frames[{first_index + offset}]` is not a decodable "
                    f"JPEG/PNG image: {exc}",
                    stage="vlm",
                ) from exc
        return features
