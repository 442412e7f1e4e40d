"""`Script`: everything the scripted backend does, as data a test can change at any time.

A `Script` is shared by the four scripted stages of one backend. It owns:

    latency      seconds per stage: before an ASR answer, before every streamed VLM item
                 and TTS chunk, before a VAD batch (VAD defaults to 0: it runs every tick)
    transcripts  ASR answers, consumed oldest first; `default_transcript` when empty
    partials     live-transcript answers (B33), consumed oldest first ("" when empty);
                 `live_transcripts` says whether the ASR offers them (off by default)
    replies      VLM replies `(action, text[, question])`, consumed oldest first; when empty
                 the VLM echoes: "I hear you: <transcript>." (or "I hear you." without one)
    failures     per stage, raise a chosen `BackendError` subclass at submission or after
                 N streamed items (`fail`); optionally aimed at one request id
    parking      `park(stage)`: requests of that stage wait until `release(stage)`;
                 `await wait_parked(stage)` returns once a request is waiting
    death        `kill(stage)`: `EngineDead` for every later step of that stage until
                 `revive(stage)` (requests already streaming fail at their next item)
    records      `requests` (every request received, in order) and `aborts`

Tests may mutate a Script while a server runs with it, also from another thread: queues
are deques, parked requests are woken through their own event loop's token.

A request's path through a stage (`admit`, then `checkpoint` before every item):

    record -> park (until released or aborted) -> dead? -> failure at submission?
           -> [latency -> aborted? -> dead? -> failure after N items? -> item] ...
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

import anyio
import anyio.from_thread
import anyio.lowlevel

from backends.base import BackendError, EngineDead, VlmAction

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken

__all__ = [
    "DEFAULT_TRANSCRIPT",
    "STAGES",
    "Admission",
    "RecordedAbort",
    "RecordedRequest",
    "Script",
    "ScriptedFailure",
    "ScriptedReply",
    "StageName",
]

StageName = Literal["vad", "asr", "vlm", "tts"]
STAGES: tuple[StageName, ...] = get_args(StageName)
#: stages whose answers stream, so a failure can come after some items
STREAMING_STAGES: frozenset[StageName] = frozenset({"vlm", "tts"})

DEFAULT_TRANSCRIPT = "scripted transcript"
DEFAULT_LATENCY_S: dict[StageName, float] = {"vad": 0.0, "asr": 0.01, "vlm": 0.01, "tts": 0.01}


class ScriptedReply(NamedTuple):
    """One VLM answer: `listen` with empty text is a silence decision."""

    action: VlmAction
    text: str = ""
    question: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedFailure:
    """A failure waiting for the next request of its stage (or for `request_id` only)."""

    error: type[BackendError]
    message: str
    after_items: int | None = None  # None: at submission; k: after k streamed items
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as a stage received it (`request` is the AsrRequest/VlmRequest/...;
    for VAD a `VadBatch`)."""

    stage: StageName
    request_id: str
    request: object


@dataclass(frozen=True, slots=True)
class RecordedAbort:
    """An `abort(request_id)` call on a stage."""

    stage: StageName
    request_id: str


@dataclass(slots=True)
class _Parked:
    request_id: str
    event: anyio.Event
    token: EventLoopToken
    thread_id: int


@dataclass(slots=True)
class Admission:
    """A request admitted by `Script.admit`: checks it again before each streamed item."""

    script: Script
    stage: StageName
    request_id: str
    failure: ScriptedFailure | None  # a failure due after some items, if any

    @property
    def aborted(self) -> bool:
        return self.script.is_aborted(self.request_id)

    def checkpoint(self, items_sent: int) -> None:
        """Raise what is due before item `items_sent + 1`: engine death or a failure."""
        self.script.raise_if_dead(self.stage)
        failure = self.failure
        if failure is None or failure.after_items is None or items_sent < failure.after_items:
            return
        self.failure = None
        raise failure.error(failure.message, stage=self.stage)


@dataclass
class Script:
    """The programmable behaviour and the records of one scripted backend."""

    latency: dict[StageName, float] = field(default_factory=lambda: dict(DEFAULT_LATENCY_S))
    transcripts: deque[str] = field(default_factory=deque)
    default_transcript: str = DEFAULT_TRANSCRIPT
    partials: deque[str] = field(default_factory=deque)
    live_transcripts: bool = False
    replies: deque[ScriptedReply] = field(default_factory=deque)
    echo_transcript: bool = True
    requests: list[RecordedRequest] = field(default_factory=list)
    aborts: list[RecordedAbort] = field(default_factory=list)
    failures: dict[StageName, deque[ScriptedFailure]] = field(
        default_factory=lambda: {stage: deque() for stage in STAGES}
    )
    dead: set[StageName] = field(default_factory=set)
    warmed_up: set[StageName] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._parking: set[StageName] = set()
        self._parked: dict[StageName, dict[str, _Parked]] = {stage: {} for stage in STAGES}
        self._aborted: set[str] = set()

    # --- programming (tests) -----------------------------------------------------------

    def say(self, *transcripts: str) -> Script:
        """Queue ASR transcripts, one per later request."""
        self.transcripts.extend(transcripts)
        return self

    def reply(
        self, text: str, *, action: VlmAction = VlmAction.SPEAK, question: str | None = None
    ) -> Script:
        """Queue one VLM reply (`speak` by default)."""
        self.replies.append(ScriptedReply(action, text, question))
        return self

    def stay_silent(self, count: int = 1) -> Script:
        """Queue `count` silence decisions (`listen`, no text)."""
        self.replies.extend(ScriptedReply(VlmAction.LISTEN) for _ in range(count))
        return self

    def fail(
        self,
        stage: StageName,
        error: type[BackendError],
        *,
        after_items: int | None = None,
        message: str | None = None,
        request_id: str | None = None,
    ) -> Script:
        """Make the next request of `stage` (or only `request_id`) raise `error`.

        Args:
            after_items: None raises at submission; k raises after k streamed items
                (VLM deltas + decision, TTS chunks). Only for `vlm` and `tts`.
        """
        if stage not in STAGES:
            raise ValueError(f"unknown stage `{stage}`")
        if after_items is not None and (stage not in STREAMING_STAGES or after_items < 0):
            raise ValueError("after_items needs a streaming stage (vlm, tts) and k >= 0")
        text = message or f"scripted {error.__name__} in {stage}"
        self.failures[stage].append(ScriptedFailure(error, text, after_items, request_id))
        return self

    def kill(self, stage: StageName) -> None:
        """Every later step of `stage` raises `EngineDead` until `revive(stage)`."""
        self.dead.add(stage)

    def revive(self, stage: StageName) -> None:
        self.dead.discard(stage)

    def park(self, stage: StageName) -> None:
        """Requests of `stage` arriving from now on wait until released (or aborted)."""
        with self._lock:
            self._parking.add(stage)

    def release(self, stage: StageName, request_id: str | None = None) -> None:
        """Wake one parked request (the stage stays parked), or unpark the whole stage."""
        with self._lock:
            if request_id is None:
                self._parking.discard(stage)
                woken = list(self._parked[stage].values())
                self._parked[stage].clear()
            else:
                one = self._parked[stage].pop(request_id, None)
                woken = [one] if one is not None else []
        for parked in woken:
            _wake(parked)

    def parked(self, stage: StageName) -> list[str]:
        """Ids of the requests of `stage` waiting now, oldest first."""
        with self._lock:
            return list(self._parked[stage])

    async def wait_parked(
        self, stage: StageName, count: int = 1, *, timeout: float = 5.0
    ) -> list[str]:
        """Return once at least `count` requests of `stage` are parked (their ids).

        Polls every millisecond, so it works across threads and event loops.

        Raises:
            TimeoutError: fewer were parked after `timeout` seconds.
        """
        with anyio.fail_after(timeout):
            while len(ids := self.parked(stage)) < count:
                await anyio.sleep(0.001)
        return ids

    # --- assertions (tests) ------------------------------------------------------------

    def requests_of(self, stage: StageName) -> list[object]:
        """The requests `stage` received, in order."""
        return [r.request for r in self.requests if r.stage == stage]

    def aborted_ids(self, stage: StageName | None = None) -> list[str]:
        return [a.request_id for a in self.aborts if stage is None or a.stage == stage]

    # --- serving (stages) --------------------------------------------------------------

    def say_partial(self, *texts: str) -> Script:
        """Offer live transcripts (B33) and queue their answers, one per partial request."""
        self.live_transcripts = True
        self.partials.extend(texts)
        return self

    def next_partial(self) -> str:
        try:
            return self.partials.popleft()
        except IndexError:
            return ""

    def next_transcript(self) -> str:
        try:
            return self.transcripts.popleft()
        except IndexError:
            return self.default_transcript

    def next_reply(self, transcript: str | None) -> ScriptedReply:
        """The queued reply, else the echo reply."""
        try:
            return self.replies.popleft()
        except IndexError:
            pass
        spoken = (transcript or "").strip().rstrip(".!?").strip()
        if self.echo_transcript and spoken:
            return ScriptedReply(VlmAction.SPEAK, f"I hear you: {spoken}.")
        return ScriptedReply(VlmAction.SPEAK, "I hear you.")

    async def admit(self, stage: StageName, request_id: str, request: object) -> Admission:
        """Record a request, park it if its stage is parked, then raise what is due at
        submission (engine death, a scripted failure)."""
        self.requests.append(RecordedRequest(stage, request_id, request))
        await self._park_if_parked(stage, request_id)
        self.raise_if_dead(stage)
        failure = self._take_failure(stage, request_id)
        if failure is not None and failure.after_items is None:
            raise failure.error(failure.message, stage=stage)
        return Admission(self, stage, request_id, failure)

    def raise_if_dead(self, stage: StageName) -> None:
        if stage in self.dead:
            raise EngineDead(f"scripted {stage} engine is dead", stage=stage)

    def record_abort(self, stage: StageName, request_id: str) -> None:
        """Record an abort; a parked request of that id wakes up and ends."""
        self.aborts.append(RecordedAbort(stage, request_id))
        with self._lock:
            self._aborted.add(request_id)
            parked = self._parked[stage].pop(request_id, None)
        if parked is not None:
            _wake(parked)

    def is_aborted(self, request_id: str) -> bool:
        return request_id in self._aborted

    def _take_failure(self, stage: StageName, request_id: str) -> ScriptedFailure | None:
        queue = self.failures[stage]
        for failure in list(queue):
            if failure.request_id in (None, request_id):
                queue.remove(failure)
                return failure
        return None

    async def _park_if_parked(self, stage: StageName, request_id: str) -> None:
        with self._lock:
            if stage not in self._parking or request_id in self._aborted:
                return
            parked = _Parked(
                request_id,
                anyio.Event(),
                anyio.lowlevel.current_token(),
                threading.get_ident(),
            )
            self._parked[stage][request_id] = parked
        try:
            await parked.event.wait()
        finally:
            with self._lock:
                if self._parked[stage].get(request_id) is parked:
                    del self._parked[stage][request_id]


def _wake(parked: _Parked) -> None:
    """Set a parked request's event from its own event loop's thread."""
    if threading.get_ident() == parked.thread_id:
        parked.event.set()
        return
    with contextlib.suppress(anyio.RunFinishedError):  # its loop is gone: nobody waits
        anyio.from_thread.run_sync(parked.event.set, token=parked.token)
