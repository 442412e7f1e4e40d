"""What the VLM receives for a response (B3, B4, B14, B19): system text, history as
(role, text) turns oldest first, this turn's transcript, and its frames in capture order.

The `PromptInput` is built here once, from session state: its client-supplied parts
(instructions, items and their roles, texts and images) were validated where they entered
the session, so it travels to the VLM stage as it is, with no second validation.

Budgeting and tokenization belong to the VLM stage; the session only decides *what* is
history. An assistant reply whose playback was cut enters history as the prefix that was
heard (B19), measured by played audio, never by wall clock.

History is in observation-tick form (B29, D30): what items do not hold (each user turn's
time on the session clock, the frames of the newest turns, which turns were answered with
silence) comes from the session's `core.turn_log.TurnLog`, written by `record_shown`
when a VLM request is submitted and by `record_silence` when a response listens.
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
    from core.turn_log import TurnLog

__all__ = [
    "build_prompt",
    "heard_text",
    "pause_prompt",
    "played_prefix",
    "record_shown",
    "record_silence",
]


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


def record_shown(log: TurnLog, segments: list[Commit], prompt: PromptInput) -> None:
    """A VLM request showed `segments`: their frames become history frames (bounded by
    the log), and a turn with words means the session has been asked something."""
    for commit in segments:
        if commit.item.state is not ItemState.DELETED:
            log.keep_frames(commit.item, commit.frames)
    if prompt.transcript:
        log.asked = True


def record_silence(log: TurnLog, segments: list[Commit]) -> None:
    """A response over `segments` ended in silence: its last live turn was answered with
    silence (an empty assistant turn right after it in history)."""
    live = [c for c in segments if c.item.state is not ItemState.DELETED]
    if live:
        log.answered_silently(live[-1].item)


def build_prompt(
    *,
    instructions: str | None,
    items: Iterable[Item],
    responses: Mapping[str, Response],
    segments: list[Commit],
    log: TurnLog | None = None,
) -> PromptInput:
    """The prompt of a response whose input is `segments`, in one pass over the items.

    History is in tick form (B29): every earlier user turn (camera-only ones too, with an
    empty text) with its time and its kept frames from `log`, every assistant reply as
    heard, and an empty assistant turn after a turn the model answered with silence.
    Without a log (or for items it does not know) only turns with text are history.
    """
    # by version: an id deleted and created again meanwhile is another item (B5)
    own = {id(c.item) for c in segments}
    # a segment whose item was deleted meanwhile contributes neither text nor frames
    live = [c for c in segments if c.item.state is not ItemState.DELETED]
    pieces = [c.turn_text() for c in live]
    return _prompt(
        instructions=instructions,
        items=items,
        responses=responses,
        own=own,
        log=log,
        transcript=" ".join(p for p in pieces if p) or None,
        frames=tuple(f for c in live for f in c.frames),
        turn_time_s=log.time_s(live[-1].item) if log is not None and live else None,
    )


def pause_prompt(
    *,
    instructions: str | None,
    items: Iterable[Item],
    responses: Mapping[str, Response],
    log: TurnLog,
    transcript: str,
    frames: tuple[bytes, ...],
) -> PromptInput:
    """The prompt the response to an utterance would get if its turn ended now, with
    `transcript` as its words and `frames` as its frames (a preemptive response, B35)."""
    return _prompt(
        instructions=instructions,
        items=items,
        responses=responses,
        own=set(),
        log=log,
        transcript=transcript if transcript.strip() else None,  # as a commit's turn text
        frames=frames,
        turn_time_s=log.now_s(),
    )


def _prompt(
    *,
    instructions: str | None,
    items: Iterable[Item],
    responses: Mapping[str, Response],
    own: set[int],
    log: TurnLog | None,
    transcript: str | None,
    frames: tuple[bytes, ...],
    turn_time_s: float | None,
) -> PromptInput:
    """A prompt: history from every completed item not in `own`, then this turn."""
    history: list[HistoryTurn] = []
    times: list[float | None] = []
    frames_of: list[tuple[bytes, ...]] = []
    for item in items:
        if id(item) in own or item.state is not ItemState.COMPLETED:
            continue
        kept: tuple[bytes, ...] = ()
        time_s: float | None = None
        if item.role == "assistant" and item.type == "message":
            response = responses.get(item.response_id or "")
            text = heard_text(response) if response is not None else item.text()
            tick = False
        elif item.type != "message":  # a function call or its output (B39): its text
            text = item.text()
            tick = False
        else:  # user and system items: their texts and transcripts
            text = item.text()
            tick = log is not None and item.role == "user" and log.is_turn(item)
            if tick and log is not None:
                kept, time_s = log.frames(item), log.time_s(item)
        if text or tick:
            history.append(HistoryTurn(item.role, text))
            times.append(time_s)
            frames_of.append(kept)
        if tick and log is not None and log.silent(item):
            history.append(HistoryTurn("assistant", ""))
            times.append(None)
            frames_of.append(())
    timed = log is not None
    return PromptInput(
        system=instructions or DEFAULT_INSTRUCTIONS,
        history=tuple(history),
        transcript=transcript,
        frames=frames,
        time_s=turn_time_s,
        history_times_s=tuple(times) if timed else (),
        history_frames=tuple(frames_of) if timed else (),
        asked_before=log.asked if log is not None else False,
    )
