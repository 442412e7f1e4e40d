"""JoyAI-VL-Interaction's output grammar -> `VlmDecision`, whole or while streaming.

The model opens every reply with an action marker (the forms its trained system prompt
teaches, `prompt.JOYAI_SYSTEM_PROMPT`, and the ones the reference servers accept):

    </silence>                              stay silent            -> LISTEN
    </response> text                        speak `text`           -> SPEAK
    </response> note </delegation> question speak `note`; `question` goes to a background
    </response> note <delegation> question  model (either spelling; the question may be
                                            wrapped as `<question>` or `<question>...
                                            </question>`)          -> DELEGATE
    (empty)                                 -> LISTEN
    text without a marker                   its first line is a response -> SPEAK

Rules, applied the same way to a whole output (`parse_action`) and to a stream
(`ActionStreamParser`):

1. a leading reasoning block `<think>...</think>` is dropped (nothing is decided while
   it is open; one that never closes is a LISTEN); a stray `</think>` before the first
   marker drops everything up to it;
2. the first `</silence>` or `</response>` anywhere in the first line decides: text in
   front of it is dropped (`"I see a cup.</silence>"` is a LISTEN), as the reference
   servers do;
3. the spoken text is the body's first line up to the first markup terminator (any
   action marker, a reasoning or question tag, a chat special token), whitespace
   collapsed; a trailing half-written tag (`"... </resp"` cut off by the token limit) is
   never spoken. A `</response>` with nothing to say is a LISTEN.

So neither a marker nor a delegated question ever reaches TTS. The stream parser emits
speakable deltas only once the marker is known, holds back anything that could still
turn out to be markup, and its deltas always concatenate to the final decision's `text`.
Output without any marker is released only when its first line is complete (a marker
may still follow on that line).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Final

from backends.base import VlmAction, VlmDecisionResult, VlmDelta

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

__all__ = [
    "DELEGATION",
    "DELEGATION_MARKERS",
    "DELEGATION_OPEN",
    "MARKERS",
    "RESPONSE",
    "SILENCE",
    "ActionStreamParser",
    "parse_action",
]

SILENCE: Final = "</silence>"
RESPONSE: Final = "</response>"
DELEGATION: Final = "</delegation>"
#: the spelling without the slash, which one of the reference system prompts teaches
DELEGATION_OPEN: Final = "<delegation>"
DELEGATION_MARKERS: Final = (DELEGATION, DELEGATION_OPEN)
THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"
QUESTION_OPEN: Final = "<question>"
QUESTION_CLOSE: Final = "</question>"
#: every action marker of the grammar: none of them is ever spoken
MARKERS: Final = (SILENCE, RESPONSE, *DELEGATION_MARKERS)
_OPENERS: Final = (SILENCE, RESPONSE)
# special tokens appear when the stage keeps them, as upstream does with
# skip_special_tokens=False
_SPECIAL: Final = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
#: markup that ends the spoken text
_TAGS: Final = (
    *MARKERS,
    THINK_OPEN,
    THINK_CLOSE,
    QUESTION_OPEN,
    QUESTION_CLOSE,
    *_SPECIAL,
)
_TERMINATORS: Final = (*_TAGS, "\n")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _find_first(text: str, needles: tuple[str, ...]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for needle in needles:
        at = text.find(needle)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, needle)
    return best


def _could_grow_into(head: str, needles: tuple[str, ...]) -> bool:
    return any(needle.startswith(head) for needle in needles)


def _after_reasoning(text: str) -> str | None:
    """`text` without a leading reasoning block; None while that block may be open."""
    head = text.lstrip()
    if head.startswith(THINK_OPEN):
        end = head.find(THINK_CLOSE)
        return None if end < 0 else head[end + len(THINK_CLOSE) :].lstrip()
    if head and THINK_OPEN.startswith(head):
        return None  # "<", "<th", ...: may still become `<think>`
    first_line = head.split("\n", 1)[0]
    close = first_line.find(THINK_CLOSE)
    if close >= 0:
        marker = _find_first(first_line, _OPENERS)
        if marker is None or close < marker[0]:
            return head[close + len(THINK_CLOSE) :].lstrip()
    return head


def _classify(text: str, *, final: bool) -> tuple[str, str] | None:
    """(mode, body) once the opening is decided, None while it may still change.

    `final`: the whole output is known (nothing more will be fed).
    """
    rest = _after_reasoning(text)
    if rest is None:
        return ("silence", "") if final else None
    line_end = rest.find("\n")
    first_line = rest if line_end < 0 else rest[:line_end]
    marker = _find_first(first_line, _OPENERS)
    if marker is not None:
        at, name = marker
        if name == SILENCE:
            return "silence", ""
        return "response", rest[at + len(name) :].lstrip()
    if line_end < 0 and not final:
        return None  # a marker may still come on this line
    return "plain", first_line


def _held_suffix(body: str, terms: tuple[str, ...] = _TERMINATORS) -> int:
    """Length of the longest suffix of `body` that could still grow into one of `terms`."""
    longest = 0
    for term in terms:
        for n in range(min(len(term) - 1, len(body)), 0, -1):
            if term.startswith(body[-n:]):
                longest = max(longest, n)
                break
    return longest


def _unwrap_question(text: str) -> str:
    question = _collapse(text)
    if question.startswith(QUESTION_OPEN):
        question = question[len(QUESTION_OPEN) :]
        question = question.split(QUESTION_CLOSE, 1)[0]
    elif question.startswith("<") and question.endswith(">"):
        question = question[1:-1]  # `<the question>`, as the prompt shows it
    return _collapse(question.replace(QUESTION_CLOSE, " "))


def _question(rest: str) -> str | None:
    found = _find_first(rest, (*_OPENERS, *DELEGATION_MARKERS, *_SPECIAL, "\n"))
    question = _unwrap_question(rest if found is None else rest[: found[0]])
    return question or None


def _spoken(body: str, *, final: bool) -> tuple[str, tuple[int, str] | None]:
    """The speakable part of `body` (not collapsed) and the terminator that ended it."""
    found = _find_first(body, _TERMINATORS)
    if found is not None:
        return body[: found[0]], found
    held = _held_suffix(body, _TAGS if final else _TERMINATORS)
    return body[: len(body) - held], None


def parse_action(text: str, request_id: str) -> VlmDecisionResult:
    """Parse one complete model output: the decision of request `request_id`."""
    classified = _classify(text, final=True)
    if classified is None or classified[0] == "silence":
        return VlmDecisionResult(request_id, VlmAction.LISTEN)
    body = classified[1]
    spoken_raw, found = _spoken(body, final=True)
    spoken = _collapse(spoken_raw)
    if found is not None and found[1] in DELEGATION_MARKERS:
        question = _question(body[found[0] + len(found[1]) :]) or ""
        return VlmDecisionResult(request_id, VlmAction.DELEGATE, text=spoken, question=question)
    if not spoken:
        return VlmDecisionResult(request_id, VlmAction.LISTEN)
    return VlmDecisionResult(request_id, VlmAction.SPEAK, text=spoken)


class ActionStreamParser:
    """Feed generated text as it streams; get speakable deltas, then the decision.

    parser = ActionStreamParser(request_id)
    for piece in stream:
        if delta := parser.feed(piece):
            say(delta)
    tail, decision = parser.finish()
    """

    __slots__ = ("_buffer", "_emitted", "_finished", "request_id")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._buffer = ""
        self._emitted = ""
        self._finished = False

    @property
    def text(self) -> str:
        """Everything fed so far (the raw action text)."""
        return self._buffer

    @property
    def emitted(self) -> str:
        """The speakable text emitted so far."""
        return self._emitted

    def feed(self, piece: str) -> str:
        """Add generated text; return newly speakable text ('' when none is safe yet)."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self._buffer += piece
        classified = _classify(self._buffer, final=False)
        if classified is None or classified[0] == "silence":
            return ""
        safe, _ = _spoken(classified[1], final=False)
        return self._advance(_collapse(safe))

    def finish(self) -> tuple[str, VlmDecisionResult]:
        """End of generation: the last speakable delta (maybe '') and the decision."""
        self._finished = True
        decision = parse_action(self._buffer, self.request_id)
        spoken = decision.text if decision.action is not VlmAction.LISTEN else self._emitted
        return self._advance(spoken), decision

    def _advance(self, spoken: str) -> str:
        if not spoken.startswith(self._emitted):  # pragma: no cover - guarded by construction
            raise AssertionError(f"speakable text went back: {self._emitted!r} -> {spoken!r}")
        delta = spoken[len(self._emitted) :]
        self._emitted = spoken
        return delta


async def stream_actions(
    pieces: AsyncGenerator[str, None], request_id: str
) -> AsyncGenerator[VlmDelta | VlmDecisionResult, None]:
    """A streamed JoyAI reply as what a `Vlm` stage yields: the speakable deltas as soon as
    the marker allows, then exactly one decision. `pieces` is closed when the reply ends
    or its consumer stops (a barge-in): closing is how every engine is told to abort."""
    parser = ActionStreamParser(request_id)
    async with aclosing(pieces):
        async for piece in pieces:
            delta = parser.feed(piece)
            if delta:
                yield VlmDelta(request_id, delta)
    tail, decision = parser.finish()
    if tail:
        yield VlmDelta(request_id, tail)
    yield decision
