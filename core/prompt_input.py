"""What the VLM receives for a response (B3, B4, B14, B19): system text, history as
(role, text) turns oldest first, this turn's transcript, and its frames in capture order.

The `PromptInput` is built here once, from session state: its client-supplied parts
(instructions, items and their roles, texts and images) were validated where they entered
the session, so it travels to the VLM stage as it is, with no second validation.

Budgeting and tokenization belong to the VLM stage; the session only decides *what* is
history. An assistant reply whose playback was cut enters history as the prefix that was
heard (B19), measured by played audio, never by wall clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.effects import HistoryTurn, PromptInput
from spec.session_config import DEFAULT_INSTRUCTIONS
from spec.tables import ItemState, PlaybackState

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from core.statemachines.commit import Commit
    from core.statemachines.item import Item
    from core.statemachines.response import Response

__all__ = ["build_prompt", "heard_text", "played_prefix"]


def played_prefix(marks: list[tuple[str, float]], played_ms: float) -> str:
    """The text spoken by the first `played_ms` of audio, from (chunk text, end ms) marks;
    a partly played chunk contributes the proportional share of its characters."""
    out: list[str] = []
    start = 0.0
    for text, end in marks:
        if played_ms >= end:
            out.append(text)
        elif played_ms > start and end > start:
            out.append(text[: int(len(text) * (played_ms - start) / (end - start))])
            break
        else:
            break
        start = end
    return "".join(out)


def heard_text(response: Response) -> str:
    """An assistant reply as history: in full, or the heard prefix when it was cut and the
    client reported how much it played. Cut before any report, what was heard is unknown:
    everything sent counts until an ack says otherwise (D34), never an empty guess."""
    item = response.item
    full = item.text() if item is not None else ""
    playback = response.playback
    if playback.state is not PlaybackState.CLEARED or not playback.reported:
        return full
    return played_prefix(response.text_marks, response.playback.played_ms)


def build_prompt(
    *,
    instructions: str | None,
    items: Iterable[Item],
    responses: Mapping[str, Response],
    segments: list[Commit],
) -> PromptInput:
    # by version: an id deleted and created again meanwhile is another item (B5)
    own = {id(c.item) for c in segments}
    history: list[HistoryTurn] = []
    for item in items:
        if id(item) in own or item.state is not ItemState.COMPLETED:
            continue
        if item.role == "assistant":
            response = responses.get(item.response_id or "")
            text = heard_text(response) if response is not None else item.text()
        else:  # user and system items: their texts and transcripts
            text = item.text()
        if text:
            history.append(HistoryTurn(item.role, text))
    # a segment whose item was deleted meanwhile contributes neither text nor frames
    live = [c for c in segments if c.item.state is not ItemState.DELETED]
    pieces = [c.turn_text() for c in live]
    transcript = " ".join(p for p in pieces if p) or None
    frames = tuple(f for c in live for f in c.frames)
    return PromptInput(
        system=instructions or DEFAULT_INSTRUCTIONS,
        history=tuple(history),
        transcript=transcript,
        frames=frames,
    )
