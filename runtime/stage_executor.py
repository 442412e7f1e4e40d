"""`StageExecutor`: carries out one session's stage effects against the backend.

Every stage request runs in its own task and cancel scope, registered by request id, so an
`Abort` effect (barge-in, cancel, failure) stops exactly that request, and the backend is
asked to abort it too (shielded, under a deadline). The TTS requests of one response run in
order on one worker, whose queue closes at `ResponseEnded`. Each request has its stage's
deadline; a miss or a failure comes back as a `StageFailure`, so it fails the response,
never the session. Results go back through `feed` (the session fences anything late).

A `PrepareFrame` (a frame arrived, and the VLM works on frames ahead of their turn) is
handed to the VLM stage fire and forget: the stage bounds and drops, and nothing comes back.

Preemptive responses (B35): their requests run like any other, keyed by the
speculation's id; the executor keeps the stage seconds each one spends, so that a
discarded one's are counted (`SpeculationOutcome`), and lets go of its TTS queue then.

It decides nothing: which request runs, is retried, reused or dropped is the session's.
The backend is shared by every session of the process, so the ids it sees carry the
session id (`_engine_id`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, assert_never

import anyio
import numpy as np

from backends.base import (
    AsrRequest,
    BackendError,
    DelegationRequest,
    EngineDead,
    InvalidPromptContext,
    TtsRequest,
    TurnEndRequest,
    VlmRequest,
)
from spec.effects import (
    Abort,
    EvictReplica,
    PrepareFrame,
    ResponseEnded,
    SpeculationOutcome,
    SubmitAsr,
    SubmitDelegation,
    SubmitPartialAsr,
    SubmitTts,
    SubmitTurnEnd,
    SubmitVlm,
)
from spec.errors import ErrorCode
from spec.stage_results import (
    AsrPartial,
    DelegationAnswer,
    StageFailure,
    StageResult,
    TtsDone,
    TurnEndVerdict,
    VlmDecisionResult,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectSendStream

    from backends.base import Backend
    from runtime.metrics import Metrics

__all__ = ["StageEffect", "StageExecutor", "StageTimeouts", "float_pcm"]

log = logging.getLogger("joyduplex.runtime")

ABORT_DEADLINE_S = 2.0

#: the effects carried out here (the session runner routes the others)
StageEffect = (
    SubmitAsr
    | SubmitPartialAsr
    | SubmitVlm
    | SubmitTts
    | SubmitDelegation
    | SubmitTurnEnd
    | Abort
    | EvictReplica
    | ResponseEnded
    | SpeculationOutcome
    | PrepareFrame
)


@dataclass(frozen=True)
class StageTimeouts:
    """Deadlines per stage request (seconds); a miss fails the response, not the session."""

    asr: float = 30.0
    vlm: float = 60.0
    tts: float = 60.0
    delegation: float = 120.0  # the background model (B31); its own timeout_s bounds waits
    #: an end-of-turn verdict later than this is none: the pause ends as server VAD's would
    turn_end: float = 2.0


@dataclass
class _TtsQueue:
    """The TTS requests of one response, in order, and those aborted before they ran."""

    send: MemoryObjectSendStream[SubmitTts]
    aborted: set[str] = field(default_factory=set)


def float_pcm(pcm16: bytes) -> Any:
    """16 kHz pcm16 as the float32 samples the stages take."""
    return np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0


class StageExecutor:
    """One session's stage requests: see the module docstring."""

    def __init__(
        self,
        backend: Backend,
        session_id: str,
        *,
        timeouts: StageTimeouts,
        metrics: Metrics,
        feed: Callable[[StageResult], None],
    ) -> None:
        self.backend = backend
        self.session_id = session_id
        self.timeouts = timeouts
        self.metrics = metrics
        self._feed = feed
        self.scopes: dict[str, anyio.CancelScope] = {}  # open stage request -> its scope
        self._tts: dict[str, _TtsQueue] = {}  # response id -> its TTS queue
        #: preparing speculations: id -> stage seconds of its finished requests
        self._speculations: dict[str, float] = {}
        #: running requests of preparing speculations: request id -> (speculation, start)
        self._speculating: dict[str, tuple[str, float]] = {}

    def execute(self, effect: StageEffect, tg: TaskGroup) -> None:
        """Start one effect's work in `tg`: `match` over the closed union, so mypy reports
        a stage effect added to spec.effects and not handled here."""
        match effect:
            case SubmitAsr():
                tg.start_soon(self._stage, effect.request_id, "asr", self._run_asr, effect)
            case SubmitPartialAsr():
                tg.start_soon(self._run_partial_asr, effect)
            case SubmitVlm():
                tg.start_soon(self._stage, effect.request_id, "vlm", self._run_vlm, effect)
            case SubmitTts():
                self._queue_tts(tg, effect)
            case SubmitDelegation():
                tg.start_soon(
                    self._stage, effect.request_id, "delegation", self._run_delegation, effect
                )
            case SubmitTurnEnd():
                tg.start_soon(self._run_turn_end, effect)
            case Abort():
                queue = self._tts.get(effect.response_id)
                if queue is not None:
                    queue.aborted.add(effect.request_id)
                scope = self.scopes.pop(effect.request_id, None)
                if scope is not None:
                    scope.cancel()
                tg.start_soon(self.backend_abort, effect)
            case EvictReplica():
                self.backend.evict(effect.stage, "its engine died serving a request")
            case ResponseEnded():
                self._end_tts(effect.response_id)
            case SpeculationOutcome():
                self._speculation(effect)
            case PrepareFrame():
                tg.start_soon(self._prepare_frame, effect)
            case _:
                assert_never(effect)

    async def _prepare_frame(self, effect: PrepareFrame) -> None:
        """Fire and forget: the VLM stage bounds how many frames it prepares at once and
        drops the rest; nothing of it may reach the session, a failure least of all."""
        try:
            await self.backend.vlm.prepare_frame(effect.frame)
        except Exception:
            log.debug("preparing %s failed", effect.frame_id, exc_info=True)

    def _end_tts(self, key: str) -> None:
        ended = self._tts.pop(key, None)
        if ended is not None:
            ended.send.close()

    def _speculation(self, effect: SpeculationOutcome) -> None:
        key = effect.speculation_id
        self.metrics.preemptive_response(effect.outcome)
        if effect.outcome == "started":
            self._speculations[key] = 0.0
            return
        spent = self._speculations.pop(key, 0.0)
        now = anyio.current_time()
        for request_id, (owner, started) in list(self._speculating.items()):
            if owner == key:
                del self._speculating[request_id]
                spent += now - started
        if effect.outcome == "discarded":
            self.metrics.preemptive_discarded_seconds(spent)
            self._end_tts(key)  # nothing joins it: no response adopted it

    async def abort_all(self, aborts: list[Abort]) -> None:
        """The session ended: ask the backend to abort what it may still run (shielded,
        under a deadline: a backend that hangs must not hold the session's end)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_DEADLINE_S):
            for abort in aborts:
                await self.backend_abort(abort)

    def close(self) -> None:
        """The session ended: no TTS request waits any more."""
        for queue in self._tts.values():
            queue.send.close()
        self._tts.clear()

    def _engine_id(self, request_id: str) -> str:
        """The backend is shared by every session: its request ids carry the session id
        (`sess_x/resp_1:tts:2`), so one session's abort never reaches another's request."""
        return f"{self.session_id}/{request_id}"

    async def backend_abort(self, abort: Abort) -> None:
        backend = self.backend
        stages = {
            "asr": backend.asr,
            "vlm": backend.vlm,
            "tts": backend.tts,
            "delegation": backend.delegate,
        }
        stage = stages.get(abort.stage)
        if stage is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_DEADLINE_S):
            try:
                await stage.abort(self._engine_id(abort.request_id))
            except Exception:
                log.warning("abort of %s failed", abort.request_id, exc_info=True)

    async def _stage(self, request_id: str, stage: str, run: Any, effect: Any) -> None:
        """Run one stage request in its own cancel scope; failures become StageFailure."""
        scope = anyio.CancelScope()
        self.scopes[request_id] = scope
        started = anyio.current_time()
        speculation = getattr(effect, "response_id", None)
        if speculation not in self._speculations:
            speculation = None
        if speculation is not None:
            self._speculating[request_id] = (speculation, started)
        timeout = getattr(self.timeouts, stage)
        try:
            with scope:
                with anyio.fail_after(timeout):
                    await run(effect)
                self.metrics.stage_latency(stage, anyio.current_time() - started)
        except TimeoutError:
            self._feed(
                StageFailure(
                    request_id,
                    ErrorCode.STAGE_FAILED,
                    f"{stage} did not answer within {timeout:g} s",
                    may_have_accepted=True,
                )
            )
        except BackendError as exc:
            log.warning("%s %s failed: %s", stage, request_id, exc.message)
            self._feed(
                StageFailure(
                    request_id,
                    exc.code,
                    exc.message,
                    may_have_accepted=not isinstance(exc, InvalidPromptContext),
                    engine_dead=isinstance(exc, EngineDead),
                )
            )
        except Exception:
            log.exception("%s %s raised an untranslated error", stage, request_id)
            self._feed(
                StageFailure(
                    request_id, ErrorCode.ENGINE_ERROR, f"{stage} failed", may_have_accepted=True
                )
            )
        finally:
            self.scopes.pop(request_id, None)
            if self._speculating.pop(request_id, None) is not None and speculation is not None:
                self._speculations[speculation] += anyio.current_time() - started

    async def _run_asr(self, effect: SubmitAsr) -> None:
        asr = self.backend.asr
        if asr is None:
            raise BackendError("this backend has no ASR stage", stage="asr")
        request = AsrRequest(
            self._engine_id(effect.request_id), float_pcm(effect.pcm16), language=effect.language
        )
        transcript = await asr.transcribe(request)
        self._feed(replace(transcript, request_id=effect.request_id))

    async def _run_partial_asr(self, effect: SubmitPartialAsr) -> None:
        """A live transcript (B33): best effort, so a failure is an `AsrPartial` without
        text, never a stage failure."""
        text: str | None = None
        try:
            asr = self.backend.asr
            if asr is not None:
                request = AsrRequest(
                    self._engine_id(effect.request_id),
                    float_pcm(effect.pcm16),
                    language=effect.language,
                    partial=True,
                )
                started = anyio.current_time()
                with anyio.move_on_after(self.timeouts.asr):
                    text = (await asr.transcribe(request)).text
                if text is not None:  # a commit may take this transcript instead of asking
                    self.metrics.stage_latency("asr_partial", anyio.current_time() - started)
        except Exception:
            log.warning("live transcript %s failed", effect.request_id, exc_info=True)
        self._feed(AsrPartial(effect.request_id, text))

    async def _run_vlm(self, effect: SubmitVlm) -> None:
        # the core's PromptInput is the backends' PromptContext: handed over as it is
        request = VlmRequest(
            self._engine_id(effect.request_id),
            effect.prompt,
            max_tokens=effect.max_tokens,
            tools=effect.tools,
            tool_choice=effect.tool_choice,
        )
        async for out in self.backend.vlm.generate(request):
            # the stage names its engine request; the core knows it by its own id
            self._feed(replace(out, request_id=effect.request_id))
            if isinstance(out, VlmDecisionResult):
                return
        raise BackendError("the VLM stream ended without a decision", stage="vlm")

    async def _run_delegation(self, effect: SubmitDelegation) -> None:
        delegate = self.backend.delegate
        if delegate is None:
            raise BackendError("this backend has no background model", stage="delegation")
        request = DelegationRequest(
            self._engine_id(effect.request_id),
            effect.question,
            history=effect.history,
            transcript=effect.transcript,
        )
        self._feed(DelegationAnswer(effect.request_id, await delegate.answer(request)))

    def _queue_tts(self, tg: TaskGroup, effect: SubmitTts) -> None:
        queue = self._tts.get(effect.response_id)
        if queue is None:
            # unbounded: the VLM's token limit bounds the sentences of one response
            send, receive = anyio.create_memory_object_stream[SubmitTts](math.inf)
            queue = self._tts[effect.response_id] = _TtsQueue(send)
            tg.start_soon(self._tts_worker, queue, receive)
        queue.send.send_nowait(effect)

    async def _tts_worker(self, queue: _TtsQueue, requests: Any) -> None:
        async with requests:
            async for effect in requests:
                if effect.request_id in queue.aborted:
                    continue
                await self._stage(effect.request_id, "tts", self._run_tts, effect)

    async def _run_tts(self, effect: SubmitTts) -> None:
        request = TtsRequest(
            self._engine_id(effect.request_id), effect.text, effect.sample_rate_hz, effect.voice
        )
        async for chunk in self.backend.tts.synthesize(request):
            self._feed(replace(chunk, request_id=effect.request_id))
        self._feed(TtsDone(effect.request_id))

    async def _run_turn_end(self, effect: SubmitTurnEnd) -> None:
        """Ask the end-of-turn model about a pause (B32). It never fails a response: a
        backend without the model, a failure or a timeout is "no verdict" (D33). The
        session waits for the pause's words itself and drops a verdict the speaker outran
        (its request id is stale)."""
        model = self.backend.turn_end
        probability: float | None = None
        if model is not None:
            started = anyio.current_time()
            request = TurnEndRequest(self._engine_id(effect.request_id), float_pcm(effect.pcm16))
            try:
                with anyio.fail_after(self.timeouts.turn_end):
                    probability = await model.predict(request)
                self.metrics.stage_latency("turn_end", anyio.current_time() - started)
            except TimeoutError:
                log.warning(
                    "turn_end %s: no verdict within %g s", effect.request_id, self.timeouts.turn_end
                )
            except BackendError as exc:
                log.warning("turn_end %s failed: %s", effect.request_id, exc.message)
            except Exception:
                log.exception("turn_end %s raised an untranslated error", effect.request_id)
        log.debug("turn_end %s: probability %s", effect.request_id, probability)
        self._feed(TurnEndVerdict(effect.request_id, probability))
