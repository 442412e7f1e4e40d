"""`Script`: everything the scripted backend does, as data a test can change at any time.

A `Script` is shared by the four scripted stages of one backend. It owns:

    latency      seconds per stage: before an ASR answer, before every streamed VLM item
                 and TTS chunk, before a VAD batch (VAD defaults to 0: it runs every tick)
    engines      per stage, a `BatchedEngineModel` (cost_model.py) that decides when an
                 answer or streamed item is ready instead of `latency`: the requests of
                 that stage share one batched engine's steps (none by default)
    transcripts  ASR answers, consumed oldest first; `default_transcript` when empty
    turn_ends    end-of-turn verdicts (`semantic_vad`, B32): probabilities that the speaker
                 finished, consumed oldest first; `default_turn_end` (1.0) when empty
    partials     live-transcript answers (B33), consumed oldest first ("" when empty);
                 `live_transcripts` says whether the ASR offers them (off by default);
                 `punctuates` whether it ends sentences with a mark, as Whisper does
                 (off by default: then an unpunctuated partial is no cue, B32);
                 `asr_languages` the languages it knows (None, the default: any)
    replies      VLM replies `(action, text[, question, calls])`, consumed oldest first; when
                 empty the VLM echoes: "I hear you: <transcript>." (or "I hear you." without
                 one). `call(name, arguments)` queues a reply that calls a function (B38):
                 its arguments stream in pieces of `chunk` characters after the text;
                 `function_calling` says whether the VLM declares it chooses tools (on)
    failures     per stage, raise a chosen `BackendError` subclass at submission or after
                 N streamed items (`fail`); optionally aimed at one request id
    parking      `park(stage)`: requests of that stage wait until `release(stage)`;
                 `await wait_parked(stage)` returns once a request is waiting
    death        `kill(stage)`: `EngineDead` for every later step of that stage until
                 `revive(stage)` (requests already streaming fail at their next item)
    faults       `inject(stage, step, kind)`: the next request of `stage` (optionally only
                 one whose id starts with a prefix, such as a session's `sess_x/`) raises
                 `StageFailed`, hangs until cancelled, or reports `EngineDead`, at one step:
                 `submit`, its `first` or a `mid`dle streamed item, or at `finish` (ASR's
                 transcript, VLM's decision, the end of TTS's stream)
    records      `requests` (every request received, in order) and `aborts`; with
                 `max_records` only about the latest that many of each are kept (a long-
                 running served backend, such as a soak's, must not grow with every turn)
    frames       `prepares_frames` says whether the VLM takes frames as they arrive
                 (off by default); `prepared_frames` records those it was handed

Tests may mutate a Script while a server runs with it, also from another thread: queues
are deques, parked requests are woken through their own event loop's token.

A request's path through a stage (`admit`, then `checkpoint` before every item):

    record -> park (until released or aborted) -> dead? -> failure at submission?
           -> fault at submit? -> [latency (or the engine's steps) -> aborted? -> dead?
           -> failure after N items? -> fault at this step? -> item] ... -> fault at finish?
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

from backends.base import BackendError, EngineDead, StageFailed, VlmAction

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken

    from backends.scripted.cost_model import BatchedEngineModel

__all__ = [
    "DEFAULT_TRANSCRIPT",
    "FAULT_STEPS",
    "STAGES",
    "Admission",
    "FaultKind",
    "FaultStep",
    "RecordedAbort",
    "RecordedRequest",
    "Script",
    "ScriptedCall",
    "ScriptedFailure",
    "ScriptedFault",
    "ScriptedReply",
    "StageName",
]

StageName = Literal["vad", "asr", "vlm", "tts", "turn_end"]
STAGES: tuple[StageName, ...] = get_args(StageName)
#: stages whose answers stream, so a failure can come after some items
STREAMING_STAGES: frozenset[StageName] = frozenset({"vlm", "tts"})

FaultStep = Literal["submit", "first", "mid", "finish"]
FaultKind = Literal["raise", "hang", "dead"]
#: the steps of each stage a fault can be injected at (ASR does not stream)
FAULT_STEPS: dict[StageName, tuple[FaultStep, ...]] = {
    "asr": ("submit", "finish"),
    "vlm": ("submit", "first", "mid", "finish"),
    "tts": ("submit", "first", "mid", "finish"),
}

DEFAULT_TRANSCRIPT = "scripted transcript"
DEFAULT_LATENCY_S: dict[StageName, float] = {
    "vad": 0.0,
    "asr": 0.01,
    "vlm": 0.01,
    "tts": 0.01,
    "turn_end": 0.0,
}


class ScriptedCall(NamedTuple):
    """One function call of a reply: its JSON `arguments` stream in `chunk`-character
    pieces (B38)."""

    name: str
    arguments: str
    chunk: int = 8


class ScriptedReply(NamedTuple):
    """One VLM answer: `listen` with empty text is a silence decision; `calls` stream
    after its text, before its decision."""

    action: VlmAction
    text: str = ""
    question: str | None = None
    calls: tuple[ScriptedCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ScriptedFailure:
    """A failure waiting for the next request of its stage (or for `request_id` only)."""

    error: type[BackendError]
    message: str
    after_items: int | None = None  # None: at submission; k: after k streamed items
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedFault:
    """A fault waiting for the next request of its stage whose id starts with
    `request_prefix`: at `step` it raises `StageFailed` (`raise`), waits until cancelled
    (`hang`: the runner's stage timeout or an abort ends it) or raises `EngineDead`
    (`dead`: the engine reports it died)."""

    step: FaultStep
    kind: FaultKind
    request_prefix: str = ""


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
    fault: ScriptedFault | None = None  # a fault due at a later step, if any

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

    async def reach(self, *steps: FaultStep) -> None:
        """The request is at `steps` (an item can be both the first and the last): carry
        out the fault due at one of them."""
        fault = self.fault
        if fault is None or fault.step not in steps:
            return
        self.fault = None
        if fault.kind == "hang":
            await anyio.sleep_forever()
        error = EngineDead if fault.kind == "dead" else StageFailed
        raise error(
            f"scripted {fault.kind} fault at {fault.step} in {self.stage}", stage=self.stage
        )


@dataclass
class Script:
    """The programmable behaviour and the records of one scripted backend."""

    latency: dict[StageName, float] = field(default_factory=lambda: dict(DEFAULT_LATENCY_S))
    engines: dict[str, BatchedEngineModel] = field(default_factory=dict)  # by stage name
    transcripts: deque[str] = field(default_factory=deque)
    default_transcript: str = DEFAULT_TRANSCRIPT
    partials: deque[str] = field(default_factory=deque)
    live_transcripts: bool = False
    punctuates: bool = False
    asr_languages: tuple[str, ...] | None = None
    replies: deque[ScriptedReply] = field(default_factory=deque)
    turn_ends: deque[float] = field(default_factory=deque)
    default_turn_end: float = 1.0
    echo_transcript: bool = True
    requests: list[RecordedRequest] = field(default_factory=list)
    aborts: list[RecordedAbort] = field(default_factory=list)
    failures: dict[StageName, deque[ScriptedFailure]] = field(
        default_factory=lambda: {stage: deque() for stage in STAGES}
    )
    dead: set[StageName] = field(default_factory=set)
    faults: dict[StageName, deque[ScriptedFault]] = field(
        default_factory=lambda: {stage: deque() for stage in STAGES}
    )
    warmed_up: set[StageName] = field(default_factory=set)
    #: keep between this many and twice this many of the latest records (None: all)
    max_records: int | None = None
    prepares_frames: bool = False
    #: whether its VLM declares that it chooses function tools (B37)
    function_calling: bool = True
    prepared_frames: deque[bytes] = field(default_factory=lambda: deque(maxlen=256))

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._parking: set[StageName] = set()
        self._parked: dict[StageName, dict[str, _Parked]] = {stage: {} for stage in STAGES}
        self._aborted: dict[str, None] = {}  # an ordered set: the oldest go first

    # --- programming (tests) -----------------------------------------------------------

    def say(self, *transcripts: str) -> Script:
        """Queue ASR transcripts, one per later request."""
        self.transcripts.extend(transcripts)
        return self

    def judge_turns(self, *probabilities: float) -> Script:
        """Queue end-of-turn verdicts, one per later `semantic_vad` pause."""
        self.turn_ends.extend(probabilities)
        return self

    def reply(
        self, text: str, *, action: VlmAction = VlmAction.SPEAK, question: str | None = None
    ) -> Script:
        """Queue one VLM reply (`speak` by default)."""
        self.replies.append(ScriptedReply(action, text, question))
        return self

    def call(self, name: str, arguments: str, *, text: str = "", chunk: int = 8) -> Script:
        """Queue one VLM reply that calls `name` with `arguments` (JSON, streamed in
        `chunk`-character pieces), after speaking `text` if any (B38)."""
        if chunk < 1:
            raise ValueError("chunk must be at least one character")
        self.replies.append(
            ScriptedReply(VlmAction.SPEAK, text, None, (ScriptedCall(name, arguments, chunk),))
        )
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

    def inject(
        self, stage: StageName, step: FaultStep, kind: FaultKind, *, request_prefix: str = ""
    ) -> Script:
        """Make the next request of `stage` whose id starts with `request_prefix` fail
        (`raise`), hang (`hang`) or report its engine dead (`dead`) at `step`.

        Raises:
            ValueError: `stage` has no such step (`FAULT_STEPS`).
        """
        if step not in FAULT_STEPS.get(stage, ()):
            raise ValueError(f"{stage} has no fault step `{step}`")
        self.faults[stage].append(ScriptedFault(step, kind, request_prefix))
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

    def next_turn_end(self) -> float:
        try:
            return self.turn_ends.popleft()
        except IndexError:
            return self.default_turn_end

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
        self._trim(self.requests)
        await self._park_if_parked(stage, request_id)
        self.raise_if_dead(stage)
        failure = self._take_failure(stage, request_id)
        if failure is not None and failure.after_items is None:
            raise failure.error(failure.message, stage=stage)
        fault = next(
            (f for f in self.faults[stage] if request_id.startswith(f.request_prefix)), None
        )
        if fault is not None:
            self.faults[stage].remove(fault)
        admission = Admission(self, stage, request_id, failure, fault)
        await admission.reach("submit")
        return admission

    def raise_if_dead(self, stage: StageName) -> None:
        if stage in self.dead:
            raise EngineDead(f"scripted {stage} engine is dead", stage=stage)

    def record_abort(self, stage: StageName, request_id: str) -> None:
        """Record an abort; a parked request of that id wakes up and ends."""
        self.aborts.append(RecordedAbort(stage, request_id))
        self._trim(self.aborts)
        with self._lock:
            self._aborted[request_id] = None
            if self.max_records is not None and len(self._aborted) > 2 * self.max_records:
                for old in list(self._aborted)[: self.max_records]:
                    del self._aborted[old]
            parked = self._parked[stage].pop(request_id, None)
        if parked is not None:
            _wake(parked)

    def is_aborted(self, request_id: str) -> bool:
        return request_id in self._aborted

    def _trim(self, records: list[RecordedRequest] | list[RecordedAbort]) -> None:
        """Drop the older half once twice `max_records` are kept (amortized O(1))."""
        if self.max_records is not None and len(records) > 2 * self.max_records:
            del records[: len(records) - self.max_records]

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
