"""JoyAI-VL-Interaction's output grammar -> `VlmDecision`, whole or while streaming.

The model opens every reply with an action marker:

    </silence>                              stay silent            -> LISTEN
    </response> text                        speak `text`           -> SPEAK
    </response> note </delegation> question speak `note`; `question` goes to a background
                                            model                  -> DELEGATE
    (empty)                                 -> LISTEN
    text without a marker                   its first line is a response -> SPEAK

Spoken text is the first line of the body, whitespace collapsed. A `</response>` with
nothing to say is a LISTEN. `ActionStreamParser` applies the same rules to a stream: it
emits speakable deltas only once the marker is known, holds back anything that could
still turn out to be a marker, and its deltas always concatenate to the final
decision's `text`.
"""

from __future__ import annotations

from typing import Final

from backends.base import VlmAction, VlmDecision

__all__ = [
    "DELEGATION",
    "RESPONSE",
    "SILENCE",
    "ActionStreamParser",
    "parse_action",
]

SILENCE: Final = "</silence>"
RESPONSE: Final = "</response>"
DELEGATION: Final = "</delegation>"
# the spoken text ends at the first of these (special tokens appear when the stage keeps
# them, as upstream does with skip_special_tokens=False)
_SPECIAL: Final = ("<|im_end|>", "<|endoftext|>")
_TERMINATORS: Final = (DELEGATION, RESPONSE, SILENCE, *_SPECIAL, "\n")
_OPENERS: Final = (SILENCE, RESPONSE)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _classify(text: str) -> tuple[str, str] | None:
    """(mode, body) once the opening is decided, None while it may still be a marker."""
    head = text.lstrip()
    if head.startswith(SILENCE):
        return "silence", ""
    if head.startswith(RESPONSE):
        return "response", head[len(RESPONSE) :].lstrip()
    if any(marker.startswith(head) for marker in _OPENERS):
        return None  # empty, or a proper prefix of a marker
    return "plain", head


def _first_terminator(body: str) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for term in _TERMINATORS:
        at = body.find(term)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, term)
    return best


def _held_suffix(body: str) -> int:
    """Length of the longest suffix of `body` that could still grow into a terminator."""
    longest = 0
    for term in _TERMINATORS:
        for n in range(min(len(term) - 1, len(body)), 0, -1):
            if term.startswith(body[-n:]):
                longest = max(longest, n)
                break
    return longest


def _question(rest: str) -> str | None:
    cut = len(rest)
    for term in (RESPONSE, SILENCE, *_SPECIAL):
        at = rest.find(term)
        if at >= 0:
            cut = min(cut, at)
    question = _collapse(rest[:cut])
    return question or None


def parse_action(text: str) -> VlmDecision:
    """Parse one complete model output."""
    classified = _classify(text)
    if classified is None or classified[0] == "silence":
        return VlmDecision(VlmAction.LISTEN)
    body = classified[1]
    found = _first_terminator(body)
    spoken_raw = body if found is None else body[: found[0]]
    spoken = _collapse(spoken_raw)
    if found is not None and found[1] == DELEGATION:
        question = _question(body[found[0] + len(DELEGATION) :])
        return VlmDecision(VlmAction.DELEGATE, text=spoken, question=question)
    if not spoken:
        return VlmDecision(VlmAction.LISTEN)
    return VlmDecision(VlmAction.SPEAK, text=spoken)


class ActionStreamParser:
    """Feed generated text as it streams; get speakable deltas, then the decision.

    parser = ActionStreamParser()
    for piece in stream:
        if delta := parser.feed(piece):
            say(delta)
    tail, decision = parser.finish()
    """

    __slots__ = ("_buffer", "_emitted", "_finished")

    def __init__(self) -> None:
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
        classified = _classify(self._buffer)
        if classified is None or classified[0] == "silence":
            return ""
        body = classified[1]
        found = _first_terminator(body)
        end = found[0] if found is not None else len(body) - _held_suffix(body)
        safe = body[:end]
        return self._advance(_collapse(safe))

    def finish(self) -> tuple[str, VlmDecision]:
        """End of generation: the last speakable delta (maybe '') and the decision."""
        self._finished = True
        decision = parse_action(self._buffer)
        spoken = decision.text if decision.action is not VlmAction.LISTEN else self._emitted
        return self._advance(spoken), decision

    def _advance(self, spoken: str) -> str:
        if not spoken.startswith(self._emitted):  # pragma: no cover - guarded by construction
            raise AssertionError(f"speakable text went back: {self._emitted!r} -> {spoken!r}")
        delta = spoken[len(self._emitted) :]
        self._emitted = spoken
        return delta
