"""A bounded summary memory of what fell out of the VLM's history window (B29).

`build_prompt` keeps the newest history turns that fit the token budget and drops the
oldest. JoyAI's reference server does not simply forget them: it keeps a running summary
of older video and Q&A, written by the same model in the background, and shows it to the
model with the recent turns. This is that memory, shared by both stages that run the
weights (the gpu `VlmStage` and the remote `RemoteVlm`): only a stage knows its budget
and which turns the budget dropped, so the core never hears of it.

- Keyed by session: the runtime prefixes every engine request id with the session id
  (`sess_x/resp_1`); a request id without one (warm-up, tools) has no memory.
- Bounded in size: at most `max_sessions` sessions (least recently used forgotten, and
  its job cancelled), one summary of at most `max_chars` characters each (cut at a
  sentence boundary), and a job prompt of at most `MAX_LINES` turn lines.
- Bounded in time: a job runs at most `timeout_s`; one job per session at a time.
- Never in a reply's way: the job runs as a task of its own, after the reply's request
  was built; its failure or timeout keeps the old summary and is logged, never an error
  event. The stage cancels outstanding jobs when it is released.
- Triggered when the turns dropped from the window and not yet summarised reach
  `every_turns`; which turns were summarised is remembered by the identity of the last
  one (the nearest timed tick before it, and the offset from it: silences look alike),
  since history indices shift as items are evicted or deleted.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import anyio

from backends.joyai.prompt import SUMMARY_HEADER, time_marker

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from backends.base import HistoryTurn, PromptContext

__all__ = [
    "MAX_LINES",
    "SUMMARY_HEADER",
    "SummaryMemory",
    "SummarySettings",
    "cut_at_sentence",
    "session_of",
    "summary_prompt",
]

log = logging.getLogger(__name__)

#: turn lines one job shows the model at most (the newest are kept)
MAX_LINES: Final = 64
#: characters of one turn line at most
MAX_LINE_CHARS: Final = 300
SUMMARY_INSTRUCTIONS: Final = (
    "You keep the memory of a live video assistant. Below are the earlier summary (if"
    " any) and the observation ticks that have since left the assistant's context:"
    " `Q:` is what the user asked, `A:` what the assistant said, `(silent)` a tick it"
    " stayed silent on, `(camera)` a tick without words. Write one short plain-text"
    " summary of the whole session so far: what was asked, what was answered, what was"
    " seen and when. At most {max_chars} characters. Output only the summary."
)


@dataclass(frozen=True, slots=True)
class SummarySettings:
    """The `summary_*` settings of a VLM stage."""

    enabled: bool = False
    max_chars: int = 1200
    timeout_s: float = 20.0
    every_turns: int = 8
    max_sessions: int = 256

    @property
    def max_tokens(self) -> int:
        """The job's generation cap: a summary of `max_chars` is about a third in tokens."""
        return max(16, self.max_chars // 3)


_Fingerprint = tuple[str, str, float | None]
#: the last summarised turn: a turn with a time (role, text, time) and the offset from it
_Mark = tuple[_Fingerprint, int]


@dataclass(slots=True)
class _Session:
    summary: str | None = None
    #: the last turn the summary covers (None: none yet)
    mark: _Mark | None = None
    #: the last turn of a batch whose job failed: the next try waits for a new batch
    retry_mark: _Mark | None = None
    job: asyncio.Task[None] | None = None
    jobs: int = 0
    failures: int = 0


#: the weights' action markers (and a reasoning block): the model may answer a summary
#: request in its trained grammar, so they are taken out of the summary
_MARKUP: Final = re.compile(r"<think>.*?</think>|</?(?:silence|response|delegation)>", re.S)


def session_of(request_id: str) -> str | None:
    """The session of an engine request id (`sess_x/resp_1` -> `sess_x`), None without."""
    session, slash, _ = request_id.partition("/")
    return session if slash and session else None


def cut_at_sentence(text: str, max_chars: int) -> str:
    """`text` (whitespace normalised) within `max_chars`, cut after the last sentence end
    that fits, else at the last word that fits."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    ends = [head.rfind(p) for p in (". ", "! ", "? ")]
    end = max(ends)
    if head.endswith((".", "!", "?")):
        return head
    if end > 0:
        return head[: end + 1]
    space = head.rfind(" ")
    return head[:space] if space > 0 else head


def _line(turn: HistoryTurn, time_s: float | None) -> str:
    text = " ".join(turn.text.split())[:MAX_LINE_CHARS]
    if turn.role == "assistant":
        return f"A: {text}" if text else "(silent)"
    stamp = f"{time_marker(time_s)} " if time_s is not None else ""
    if turn.role == "user":
        return f"{stamp}Q: {text}" if text else f"{stamp}(camera)"
    return f"{stamp}{turn.role}: {text}"


def summary_prompt(
    previous: str | None, lines: Sequence[str], max_chars: int
) -> list[tuple[str, str]]:
    """The text-only chat of one summary job: instructions, the earlier summary, the
    turns (newest `MAX_LINES`)."""
    body: list[str] = []
    if previous:
        body.append(f"Earlier summary: {previous}")
    body.append("Ticks:")
    body.extend(lines[-MAX_LINES:])
    return [
        ("system", SUMMARY_INSTRUCTIONS.format(max_chars=max_chars)),
        ("user", "\n".join(body)),
    ]


def _fingerprint(context: PromptContext, index: int) -> _Fingerprint:
    turn = context.history[index]
    times = context.history_times_s
    return (turn.role, turn.text, times[index] if index < len(times) else None)


def _mark(context: PromptContext, index: int) -> _Mark:
    """Turn `index` as a mark that survives shifting indices: the nearest turn at or before
    it with a time (tick times are unique; silences and replies all look alike), and how
    many turns after that one it is."""
    times = context.history_times_s
    anchor = index
    for i in range(index, -1, -1):
        if i < len(times) and times[i] is not None:
            anchor = i
            break
    return _fingerprint(context, anchor), index - anchor


def _unsummarised_from(context: PromptContext, dropped: int, mark: _Mark | None) -> int:
    """The index of the first dropped turn the summary does not cover yet."""
    if mark is None:
        return 0
    anchor, offset = mark
    for i in range(dropped - 1, -1, -1):
        if _fingerprint(context, i) == anchor:
            return min(i + offset + 1, dropped)
    # the marked turn left history (evicted or deleted): go by time when it has one
    _, _, mark_time = anchor
    if mark_time is not None:
        times = context.history_times_s
        start = 0
        for i in range(dropped):
            t = times[i] if i < len(times) else None
            if t is not None and t <= mark_time:
                start = i + 1
        return start
    return 0


class SummaryMemory:
    """Per-session summaries of the turns the window dropped; see the module docstring."""

    def __init__(
        self,
        settings: SummarySettings,
        summarize: Callable[[list[tuple[str, str]], int, str], Awaitable[str]],
    ) -> None:
        self.settings = settings
        self._summarize = summarize
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def __len__(self) -> int:
        return len(self._sessions)

    def summary(self, request_id: str) -> str | None:
        """The summary to show with this request's prompt (None: none, or off)."""
        if not self.settings.enabled:
            return None
        session = session_of(request_id)
        state = self._sessions.get(session) if session is not None else None
        if state is None:
            return None
        self._sessions.move_to_end(session)  # type: ignore[arg-type]
        return state.summary

    def state(self, session: str) -> _Session | None:
        """What the memory holds for `session` (tests and diagnostics)."""
        return self._sessions.get(session)

    def observe(self, request_id: str, context: PromptContext, dropped_turns: int) -> None:
        """A prompt of `context` left out its first `dropped_turns` history turns: start a
        summary job for the session when enough of them are not summarised yet and no job
        runs for it. Never raises, never waits."""
        if not self.settings.enabled or dropped_turns <= 0:
            return
        session = session_of(request_id)
        if session is None:
            return
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _Session()
            self._forget_beyond_bound()
        else:
            self._sessions.move_to_end(session)
        if state.job is not None:
            return  # one job per session at a time
        start = _unsummarised_from(context, dropped_turns, state.mark)
        every = self.settings.every_turns
        if dropped_turns - start < every:
            return
        if state.retry_mark is not None:
            since_failure = _unsummarised_from(context, dropped_turns, state.retry_mark)
            if dropped_turns - since_failure < every:
                return  # no retry storm against a failing model: wait for a new batch
        times = context.history_times_s
        lines = [
            _line(context.history[i], times[i] if i < len(times) else None)
            for i in range(max(start, dropped_turns - MAX_LINES), dropped_turns)
        ]
        mark = _mark(context, dropped_turns - 1)
        state.jobs += 1
        job_id = f"{session}/summary-{state.jobs}"
        state.job = asyncio.get_running_loop().create_task(
            self._run(state, job_id, lines, mark), name=f"joyduplex-summary-{session}"
        )

    async def _run(self, state: _Session, job_id: str, lines: list[str], mark: _Mark) -> None:
        settings = self.settings
        messages = summary_prompt(state.summary, lines, settings.max_chars)
        try:
            with anyio.fail_after(settings.timeout_s):
                text = await self._summarize(messages, settings.max_tokens, job_id)
            summary = cut_at_sentence(_MARKUP.sub(" ", text), settings.max_chars)
            if not summary:
                raise ValueError("the model returned an empty summary")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the reply never depends on the summary: keep the old one
            state.failures += 1
            state.retry_mark = mark
            log.warning("summary %s failed, the earlier summary is kept: %r", job_id, exc)
            # the turns stay unsummarised: the next batch retries them with newer ones
        else:
            state.summary = summary
            state.mark = mark
            state.retry_mark = None
        finally:
            state.job = None

    def _forget_beyond_bound(self) -> None:
        while len(self._sessions) > self.settings.max_sessions:
            _, old = self._sessions.popitem(last=False)
            if old.job is not None:
                old.job.cancel()

    def jobs(self) -> list[asyncio.Task[None]]:
        return [s.job for s in self._sessions.values() if s.job is not None]

    async def settled(self) -> None:
        """Wait until no job runs (tests; a stage's release cancels them instead)."""
        while jobs := self.jobs():
            await asyncio.gather(*jobs, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel every running job and forget every session."""
        jobs = self.jobs()
        for job in jobs:
            job.cancel()
        if jobs:
            await asyncio.gather(*jobs, return_exceptions=True)
        self._sessions.clear()
