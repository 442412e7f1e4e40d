"""Runs one `SessionProtocol` over a channel against a backend.

Theory of operation: one task group per connection holds a reader (channel -> decode ->
`receive`), a writer (bounded outbound queue -> channel) and one task per stage request;
the protocol's deadlines (`next_deadline` -> `handle_timeout`) go to the process's one
`Timers` heap (a timer task of its own only when that does not run). Every stage request
runs in its own cancel scope, registered by request id, so an `Abort` effect (barge-in,
cancel, failure) stops exactly that request; TTS requests of a response run in order on
one worker. Results go back through `backend_event`, which fences anything late. Server
VAD runs in a task of its own, batched across sessions on the VAD tick: appends and
heartbeats are applied while earlier audio waits for its verdict, every other client
event only after those verdicts were applied, so a commit never races its own audio's
verdict. Backend aborts run shielded under a deadline. When the session ends (with its
connection, unless it is resumable), the task group is cancelled and nothing outlives it.

Resume (docs/session-semantics.md D27, D28): a resumable session numbers every event it
emits (`server_event_seq`) and keeps it in its `ResumeJournal` (bounded by encoded bytes
and age, trimmed by `session.event_ack`). A connection that fails, or closes with any code
but 1000, detaches the session instead of ending it: the task group, its stage requests included,
keeps running, new events go only to the journal, and the session waits `resume_grace_s`
for `attach()` (the host's `resume`, from another connection's task). A reattached
connection gets `session.resumed`, the journaled events the client missed, then live
events; one still attached is sent `session.replaced` and closed. Without a resume in
time the session ends as if its peer had gone (`expired`).

Crash boundary: an unexpected exception anywhere in one session (the protocol, an effect,
the timer, the writer) is logged once with its cause and ends only that session, with an
`error` event (`server_error`, `internal_error`) and close 1011; nothing of that session
runs afterwards, so it can neither loop nor close with 1000 as if all were well.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

import anyio
import numpy as np

from backends.base import (
    VAD_FRAME_SAMPLES,
    AsrRequest,
    BackendError,
    DelegationRequest,
    EngineDead,
    InvalidPromptContext,
    TtsRequest,
    TurnEndRequest,
    VlmDecision,
    VlmRequest,
)
from runtime.channel import ChannelClosed
from runtime.clock import loop_clock
from runtime.outbound import OutboundOverflow, OutboundQueue
from runtime.timers import TimerHandle, Timers
from spec.effects import (
    Abort,
    CloseSession,
    EvictReplica,
    ResponseEnded,
    ScoreVad,
    SubmitAsr,
    SubmitDelegation,
    SubmitPartialAsr,
    SubmitTts,
    SubmitTurnEnd,
    SubmitVlm,
)
from spec.errors import (
    CloseCode,
    ErrorCode,
    ProtocolError,
    RemoteProtocolError,
    SessionNotResumable,
    UnknownSession,
)
from spec.events import (
    Error,
    InputAudioBufferAppend,
    ResponseCreated,
    ResponseOutputAudioDelta,
    ServerEvent,
    SessionClose,
    SessionEventAck,
    SessionHeartbeat,
    SessionResume,
)
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    DelegationAnswer,
    StageFailure,
    StageResult,
    TtsAudio,
    TtsDone,
    TurnEndVerdict,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectSendStream

    from backends.base import Backend, VadState
    from core.journal import ResumeJournal
    from core.session import SessionProtocol
    from core.statemachines.attachment import Attachment
    from runtime.channel import Channel
    from runtime.clock import Clock
    from runtime.metrics import Metrics
    from runtime.vad_batcher import VadBatcher
    from spec.effects import Effect

__all__ = ["Attached", "ResumePolicy", "SessionRunner", "StageTimeouts"]

log = logging.getLogger("joyduplex.runtime")

ABORT_DEADLINE_S = 2.0
#: frames of audio that may wait for their VAD verdict before the reader waits too (about
#: 0.8 s of audio): the backpressure that keeps a session that outruns the VAD bounded
MAX_VAD_BACKLOG_FRAMES = 25
#: events applied without waiting for the verdict on earlier audio: more audio, and a
#: liveness probe that changes nothing
_UNORDERED = (InputAudioBufferAppend, SessionHeartbeat)
#: after a crash, how long the writer may take to deliver the error and the 1011 close
CRASH_FLUSH_S = 2.0
#: how long closing the channel may take (a peer that stopped reading may never take it)
CLOSE_DEADLINE_S = 5.0


@dataclass(frozen=True)
class StageTimeouts:
    """Deadlines per stage request (seconds); a miss fails the response, not the session."""

    asr: float = 30.0
    vlm: float = 60.0
    tts: float = 60.0
    delegation: float = 120.0  # the background model (B31); its own timeout_s bounds waits
    #: an end-of-turn verdict later than this is none: the pause ends as server VAD's would
    turn_end: float = 2.0


@dataclass(frozen=True)
class ResumePolicy:
    """How long a resumable session waits for a resume once its connection dropped
    (`spec.limits.Limits.resume_grace_s`); its journal is `core.resume`'s."""

    grace_s: float = 30.0


@dataclass
class Attached:
    """One connection of a session. `after`: a resumed connection's cursor (the last
    event its client received); `ended` is set once the session no longer uses it."""

    channel: Channel
    after: int | None = None
    ended: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class _ResponseWork:
    tts_send: MemoryObjectSendStream[SubmitTts] | None = None
    aborted: set[str] = field(default_factory=set)
    created_ms: int = 0
    first_audio: bool = False


def _float_pcm(pcm16: bytes) -> Any:
    """16 kHz pcm16 as the float32 samples the stages take."""
    return np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0


class SessionRunner:
    """One session over one or more connections: see the module docstring."""

    def __init__(
        self,
        protocol: SessionProtocol,
        backend: Backend,
        channel: Channel,
        *,
        clock: Clock,
        metrics: Metrics,
        vad: VadBatcher | None,
        max_outbound_events: int,
        timeouts: StageTimeouts | None = None,
        timers: Timers | None = None,
        slow_consumer_s: float = 0.0,
        resume: ResumePolicy | None = None,
    ) -> None:
        self.protocol = protocol
        self.backend = backend
        self.channel = channel
        self.resume = resume
        #: the connection served now; `_next`: one that `attach()` handed over meanwhile
        self._conn: Attached | None = Attached(channel)
        self._next: Attached | None = None
        self._conn_scope: anyio.CancelScope | None = None
        self._reattached = anyio.Event()
        self.clock = clock
        self.metrics = metrics
        self.vad = vad
        self.timeouts = timeouts or StageTimeouts()
        self.outbound = OutboundQueue(max_outbound_events)
        self.slow_consumer_s = slow_consumer_s
        self._full_since: float | None = None  # when the outbound queue last became full
        self._loop_time = loop_clock()  # anyio.current_time(), bound once (hot path)
        self._tg: TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}  # open stage request -> its scope
        self._responses: dict[str, _ResponseWork] = {}
        self._vad_state: VadState | None = vad.vad.new_state() if vad is not None else None
        self._vad_rest = np.zeros(0, dtype=np.float32)
        self._vad_slot: Any = None  # this session's place in the VAD queue
        self._vad_submitted = 0  # frames queued for scoring ...
        self._vad_applied = 0  # ... and those whose verdict the protocol has seen
        self._vad_progress: anyio.Event | None = None  # while the reader waits for verdicts
        self._timers = timers  # the process's; a private one when it is not running
        self._timer_at: float | None = None  # loop time of the deadline scheduled
        self._timer_deadline: int | None = None  # the same deadline on the session clock
        self._timer: TimerHandle | None = None
        self._ended = False
        self._closing = False
        self._close_code = CloseCode.NORMAL
        self.crashed: BaseException | None = None  # the cause, once the session crashed

    @property
    def attachment(self) -> Attachment | None:
        """A resumable session's attachment (`core.resume`); None: not resumable."""
        return self.protocol.resume.attachment if self.protocol.resume is not None else None

    @property
    def journal(self) -> ResumeJournal[ServerEvent] | None:
        return self.protocol.resume.journal if self.protocol.resume is not None else None

    # --- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the session until it closes, its peer goes away (a resumable session:
        and does not come back within the grace period), or it crashes."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self._timers is None or not self._timers.running:
                    self._timers = Timers()  # standalone (tests): a timer task of its own
                    tg.start_soon(self._timers.run)
                with self._boundary("start"):
                    self._pump()  # session.created
                conn: Attached | None = self._conn
                while conn is not None:
                    conn = await self._serve(conn)
                tg.cancel_scope.cancel()
        except Exception as exc:  # a runtime task failed outside the boundaries below
            self._crash(exc, "runtime")
        finally:
            self._ended = True
            if self.protocol.resume is not None:
                self.protocol.resume.close()
            if self._timer is not None:
                self._timer.cancel()  # the heap must not keep this session alive
            self._tg = None
            if self.vad is not None:
                self.vad.discard(self._vad_slot)
            for work in self._responses.values():
                if work.tts_send is not None:
                    work.tts_send.close()
            await self._abort_everything()
            if self._conn is not None:
                # a peer that stopped reading may never take the close frame either: bounded
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
                    why = "slow consumer" if self._close_code is CloseCode.POLICY_VIOLATION else ""
                    await self._conn.channel.close(int(self._close_code), why)
                self._conn.ended.set()
            if self._next is not None:
                self._next.ended.set()

    async def _serve(self, conn: Attached) -> Attached | None:
        """Run the reader and the writer of one connection until it ends; the connection
        the session goes on over (resumed, or replacing this one), if any."""
        self._conn, self.channel = conn, conn.channel
        async with anyio.create_task_group() as connection:
            self._conn_scope = connection.cancel_scope
            connection.start_soon(self._writer, conn)
            await self._reader(conn.channel)
            connection.cancel_scope.cancel()
        self._conn_scope = None
        if self._next is not None:  # replaced while attached: tell the old connection
            await self._replaced(conn)
            conn.ended.set()
        elif not self._may_detach(conn):
            return None  # the session ends; `run` closes this connection
        else:
            await self._release(conn)  # its peer is gone
            await self._detach()
            if self._next is None:
                return None
        self._next, following = None, self._next
        return following

    def _may_detach(self, conn: Attached) -> bool:
        """A resumable session outlives a connection that failed or went away without
        saying goodbye; a close frame with 1000 (normal closure) ends it (D28)."""
        return (
            conn.channel.peer_close_code != CloseCode.NORMAL
            and self.protocol.resume is not None
            and self.resume is not None
            and not self._closing
            and self.crashed is None
            and not self.protocol.closed
        )

    @staticmethod
    async def _release(conn: Attached) -> None:
        """Close our end of a connection whose peer has gone (nothing can be delivered;
        this only frees it), then let whoever serves it go."""
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLOSE_DEADLINE_S),
            contextlib.suppress(ChannelClosed, OSError),
        ):
            await conn.channel.close(int(CloseCode.GOING_AWAY), "connection lost")
        conn.ended.set()

    async def _detach(self) -> None:
        """The peer went away: keep the session for `grace_s`, waiting for `attach()`."""
        resume = self.protocol.resume
        assert resume is not None and self.resume is not None
        resume.detach()
        self._conn = None
        self.outbound.clear()  # what it held waits in the journal
        self._full_since = None
        self.metrics.resume_event("detached")
        log.info(
            "session %s detached; resumable for %g s", self.protocol.session_id, self.resume.grace_s
        )
        self._reattached = anyio.Event()
        with anyio.move_on_after(self.resume.grace_s):
            await self._reattached.wait()
        if self._next is None:
            resume.expire()
            self.metrics.resume_event("expired")
            log.info("session %s expired: no resume within its grace", self.protocol.session_id)

    async def _replaced(self, old: Attached) -> None:
        """Send `session.replaced` to the connection a resume took the session from, and
        close it (bounded: that peer may not be reading)."""
        assert self.protocol.resume is not None
        event = self.protocol.resume.replaced(self.protocol.next_event_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
            with contextlib.suppress(ChannelClosed):
                await old.channel.send(event)
            await old.channel.close(int(CloseCode.NORMAL), "session replaced")

    def attach(self, channel: Channel, resume: SessionResume) -> Attached:
        """Hand the session to a new connection (`session.resume`); the caller serves the
        returned connection until its `ended` is set.

        Raises:
            SessionNotResumable: the session was not opened resumable.
            UnknownSession: it has ended.
            InvalidResumeToken: the token is not its current one.
            A refusal changes nothing.
        """
        session_resume = self.protocol.resume
        if session_resume is None or self.resume is None:
            raise SessionNotResumable(
                f"session `{self.protocol.session_id}` was opened without resume",
                param="session_id",
            )
        if self._ended or self.protocol.closed:
            raise UnknownSession(f"session `{self.protocol.session_id}` has ended")
        replaced = session_resume.reattach(resume.resume_token or "")
        conn = Attached(channel, after=resume.last_received_server_event_seq or 0)
        if self._next is not None:  # two resumes raced: the earlier one never started
            self._next.ended.set()
        self._next = conn
        self.metrics.resume_event("replaced" if replaced else "resumed")
        if replaced and self._conn_scope is not None:
            self._conn_scope.cancel()
        self._reattached.set()
        return conn

    async def shutdown(self, reason: str = "shutdown") -> None:
        """Close the session from the server side (graceful shutdown)."""
        if not self.protocol.closed:
            self.protocol.receive(SessionClose(reason=reason), self.clock.now_ms())
            self._pump()

    async def _abort_everything(self) -> None:
        """The connection ended: abort whatever the backend may still be running."""
        try:
            if not self.protocol.closed:
                self.protocol.receive(SessionClose(reason="disconnect"), self.clock.now_ms())
            aborts = [o for o in self.protocol.next_outputs() if isinstance(o, Abort)]
        except Exception:  # a crashed protocol: its stage tasks were cancelled with the group
            log.debug("session %s: no aborts from a crashed protocol", self.protocol.session_id)
            aborts = []
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_DEADLINE_S):
            for abort in aborts:
                await self._backend_abort(abort)

    # --- reader, writer, timer ------------------------------------------------------

    async def _reader(self, channel: Channel) -> None:
        while not self._closing:
            received = await channel.receive()
            if received is None:
                return
            if self.crashed is not None:
                break
            if isinstance(received, ProtocolError):
                self._send_error(received)
                continue
            self.metrics.event_in(str(type(received).__struct_config__.tag))
            if isinstance(received, SessionEventAck) and self.protocol.resume is not None:
                self.protocol.resume.ack(received.server_event_seq)
            backlog = self._vad_submitted - self._vad_applied
            if backlog > MAX_VAD_BACKLOG_FRAMES and self.vad is not None:
                held_since = self._loop_time()  # the VAD is behind: an overload signal
                await self._vad_settled()
                self.vad.note_wait(self._loop_time() - held_since)
            elif not isinstance(received, _UNORDERED):
                await self._vad_settled()  # a commit never races its own audio's verdict
            if self.crashed is not None:
                break
            try:  # the crash boundary, inline on this per-append path (`_boundary`)
                try:
                    self.protocol.receive(received, self.clock.now_ms())
                except RemoteProtocolError as exc:
                    self._send_error(exc)
                self._pump()
            except Exception as exc:
                self._crash(exc, "receive")
        if self.crashed is not None:  # let the writer deliver the error and the 1011 close
            with anyio.move_on_after(CRASH_FLUSH_S):
                await anyio.sleep_forever()

    def _resumed(self, after: int) -> list[ServerEvent]:
        """What a resumed connection is sent before the live events (`core.resume`).
        Taken when its writer starts, the connection it replaced being gone: every event
        up to now is in the replay, every later one comes through the outbound queue."""
        assert self.protocol.resume is not None
        first = self.protocol.resume.resumed(
            after, self.clock.now_ms(), self.protocol.next_event_id
        )
        self.outbound.clear()  # those events are in the replay (or the client has them)
        self._full_since = None
        return first

    async def _writer(self, conn: Attached) -> None:
        if conn.after is not None:
            for event in self._resumed(conn.after):
                if not await self._send(conn.channel, event):
                    return
        while True:
            item = await self.outbound.get()
            if isinstance(item, CloseSession):
                self._closing = True
                await conn.channel.close(int(item.code), item.reason)
                assert self._tg is not None
                self._tg.cancel_scope.cancel()
                return
            if not await self._send(conn.channel, item):
                return

    async def _send(self, channel: Channel, event: ServerEvent) -> bool:
        """Send one event; False when this connection's writer must stop."""
        try:
            with anyio.fail_after(self.slow_consumer_s or math.inf):
                await channel.send(event)
        except TimeoutError:
            self._slow_consumer(f"one event waited {self.slow_consumer_s:g} s to be sent")
            return False
        except ChannelClosed:  # the peer went away: the reader sees it (detach or the end)
            log.debug("send failed; peer gone", exc_info=True)
            return False
        except Exception as exc:  # encoding a server event failed: a bug of ours
            self._crash(exc, "send")
            self._closing = True
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            return False
        return True

    def timer_fired(self, at: float) -> None:
        """The process's timers: the deadline scheduled for `at` is due."""
        if at != self._timer_at or self._ended or self.crashed is not None:
            return  # stale: rescheduled earlier meanwhile, or the session is over
        self._timer_at = self._timer_deadline = None
        with self._boundary("timer"):
            self.protocol.handle_timeout(self.clock.now_ms())
            self._pump()

    def _reschedule(self) -> None:
        """Schedule the protocol's next deadline if it is earlier than the one held (a
        deadline that moved later is found when the held one fires)."""
        deadline = self.protocol.next_deadline()
        if deadline is None or self._timers is None:
            return
        held = self._timer_deadline
        if held is not None and deadline >= held:
            # the common case (every append moves the idle deadline later): the session
            # clock runs on the loop's clock, so the held timer comes first; no clock read
            return
        at = self._loop_time() + max(0, deadline - self.clock.now_ms()) / 1000
        if self._timer_at is None or at < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = at
            self._timer_deadline = deadline
            self._timer = self._timers.schedule(self, at)

    # --- the crash boundary -------------------------------------------------------------

    @contextlib.contextmanager
    def _boundary(self, where: str) -> Iterator[None]:
        """Turn an unexpected exception of the session into its crash (see the module
        docstring); cancellation passes through."""
        try:
            yield
        except Exception as exc:
            self._crash(exc, where)

    def _crash(self, exc: BaseException, where: str) -> None:
        """End this session with `error server_error` and close 1011; log the cause once."""
        self._close_code = CloseCode.INTERNAL_ERROR
        if self.crashed is not None:
            return
        self.crashed = exc
        log.error(
            "session %s crashed (%s): %s",
            self.protocol.session_id,
            where,
            exc.__class__.__name__,
            exc_info=exc,
        )
        self.metrics.session_crashed()
        if self._vad_progress is not None:  # a reader waiting for verdicts gives up
            self._vad_progress.set()
        self._emit(self.protocol.internal_error_event())
        self._emit(CloseSession("internal_error", CloseCode.INTERNAL_ERROR))

    # --- outputs ----------------------------------------------------------------------

    def _send_error(self, exc: ProtocolError) -> None:
        self._emit(self.protocol.error_event(exc))

    def _emit(self, event: ServerEvent | CloseSession) -> None:
        if isinstance(event, ServerEvent):
            tag = str(type(event).__struct_config__.tag)
            self.metrics.event_out(tag)
            if isinstance(event, Error):
                self.metrics.error(event.error.code)
        if self.protocol.resume is not None and not self.protocol.resume.attached:
            # detached: events wait in the journal
            if isinstance(event, CloseSession):  # the session ends without a connection
                self._closing = True
                if self._tg is not None:
                    self._tg.cancel_scope.cancel()
            return
        before = self.outbound.dropped_audio_deltas
        try:
            self.outbound.put(event)
        except OutboundOverflow:
            self._slow_consumer("too many control events are waiting")
        self.metrics.audio_deltas_dropped(self.outbound.dropped_audio_deltas - before)
        if len(self.outbound) < self.outbound.max_events:
            self._full_since = None
        elif self._full_since is None:
            self._full_since = self._loop_time()
        elif self.slow_consumer_s and (self._loop_time() - self._full_since > self.slow_consumer_s):
            self._slow_consumer(f"its outbound queue stayed full {self.slow_consumer_s:g} s")

    def _slow_consumer(self, why: str) -> None:
        """The client stopped reading: close 1008 ("slow consumer") and free its slot."""
        if self._close_code is CloseCode.POLICY_VIOLATION:
            return
        log.warning("session %s: slow consumer (%s); closing", self.protocol.session_id, why)
        self._closing = True
        self._close_code = CloseCode.POLICY_VIOLATION
        self.metrics.slow_consumer()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    def _pump(self) -> None:
        """Route everything the protocol produced: events out, effects to the backend."""
        for out in self.protocol.next_outputs():
            if isinstance(out, ServerEvent):
                self._measure(out)
                self._emit(out)
            else:
                self._execute(out)
        self._reschedule()

    def _measure(self, event: ServerEvent) -> None:
        """Metrics only (time to first audio); what to run is told by effects."""
        if isinstance(event, ResponseCreated):
            self._responses[event.response.id] = _ResponseWork(created_ms=self.clock.now_ms())
        elif isinstance(event, ResponseOutputAudioDelta):
            work = self._responses.get(event.response_id)
            if work is not None and not work.first_audio:
                work.first_audio = True
                elapsed = (self.clock.now_ms() - work.created_ms) / 1000
                self.metrics.time_to_first_audio(elapsed)

    def _feed(self, result: StageResult) -> None:
        if self.crashed is not None:
            return
        try:  # the crash boundary, inline: every VAD verdict comes this way (`_boundary`)
            # a LocalProtocolError (an impossible result) is a crash like any other
            self.protocol.backend_event(result, self.clock.now_ms())
            self._pump()
        except Exception as exc:
            self._crash(exc, f"stage result {type(result).__name__}")

    # --- effects ----------------------------------------------------------------------

    def _execute(self, effect: Effect) -> None:
        """Carry out one effect: `match` over the closed `Effect` union, so mypy reports
        an effect kind added to spec.effects and not handled here (`assert_never`)."""
        tg = self._tg
        match effect:
            case CloseSession():
                self._emit(effect)
            case ScoreVad():
                if self.vad is not None and tg is not None:
                    self._submit_vad(effect, tg)
            case _ if tg is None:
                pass  # the connection ended: no backend work starts any more
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
                work = self._responses.get(effect.response_id)
                if work is not None:
                    work.aborted.add(effect.request_id)
                scope = self._scopes.pop(effect.request_id, None)
                if scope is not None:
                    scope.cancel()
                tg.start_soon(self._backend_abort, effect)
            case EvictReplica():
                self.backend.evict(effect.stage, "its engine died serving a request")
            case ResponseEnded():
                work = self._responses.pop(effect.response_id, None)
                if work is not None and work.tts_send is not None:
                    work.tts_send.close()
            case _:
                assert_never(effect)

    def _engine_id(self, request_id: str) -> str:
        """The backend is shared by every session: its request ids carry the session id
        (`sess_x/resp_1:tts:2`), so one session's abort never reaches another's request."""
        return f"{self.protocol.session_id}/{request_id}"

    async def _backend_abort(self, abort: Abort) -> None:
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
        self._scopes[request_id] = scope
        started = anyio.current_time()
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
            self._scopes.pop(request_id, None)

    async def _run_asr(self, effect: SubmitAsr) -> None:
        asr = self.backend.asr
        if asr is None:
            raise BackendError("this backend has no ASR stage", stage="asr")
        request = AsrRequest(
            self._engine_id(effect.request_id), _float_pcm(effect.pcm16), language=effect.language
        )
        transcript = await asr.transcribe(request)
        self._feed(AsrTranscript(effect.request_id, transcript.text))

    async def _run_partial_asr(self, effect: SubmitPartialAsr) -> None:
        """A live transcript (B33): best effort, so a failure is an `AsrPartial` without
        text, never a stage failure."""
        text: str | None = None
        try:
            asr = self.backend.asr
            if asr is not None:
                request = AsrRequest(
                    self._engine_id(effect.request_id),
                    _float_pcm(effect.pcm16),
                    language=effect.language,
                    partial=True,
                )
                with anyio.move_on_after(self.timeouts.asr):
                    text = (await asr.transcribe(request)).text
        except Exception:
            log.warning("live transcript %s failed", effect.request_id, exc_info=True)
        self._feed(AsrPartial(effect.request_id, text))

    async def _run_vlm(self, effect: SubmitVlm) -> None:
        # the core's PromptInput is the backends' PromptContext: handed over as it is
        request = VlmRequest(
            self._engine_id(effect.request_id), effect.prompt, max_tokens=effect.max_tokens
        )
        async for out in self.backend.vlm.generate(request):
            if isinstance(out, VlmDecision):
                question = out.question or ""
                self._feed(
                    VlmDecisionResult(effect.request_id, out.action.value, out.text, question)
                )
                return
            self._feed(VlmDelta(effect.request_id, out.text))
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
        work = self._responses.setdefault(effect.response_id, _ResponseWork())
        if work.tts_send is None:
            # unbounded: the VLM's token limit bounds the sentences of one response
            send, receive = anyio.create_memory_object_stream[SubmitTts](math.inf)
            work.tts_send = send
            tg.start_soon(self._tts_worker, work, receive)
        work.tts_send.send_nowait(effect)

    async def _tts_worker(self, work: _ResponseWork, requests: Any) -> None:
        async with requests:
            async for effect in requests:
                if effect.request_id in work.aborted:
                    continue
                await self._stage(effect.request_id, "tts", self._run_tts, effect)

    async def _run_tts(self, effect: SubmitTts) -> None:
        request = TtsRequest(
            self._engine_id(effect.request_id), effect.text, effect.sample_rate_hz, effect.voice
        )
        async for chunk in self.backend.tts.synthesize(request):
            self._feed(TtsAudio(effect.request_id, chunk.pcm16, chunk.text))
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
            request = TurnEndRequest(self._engine_id(effect.request_id), _float_pcm(effect.pcm16))
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

    # --- server VAD -------------------------------------------------------------------

    def _submit_vad(self, effect: ScoreVad, tg: TaskGroup) -> None:
        """Queue the whole frames of an append's audio for the process's VAD tick (the
        rest waits for the next append)."""
        assert self.vad is not None and self._vad_state is not None
        audio = _float_pcm(effect.pcm16)
        if len(self._vad_rest):
            audio = np.concatenate([self._vad_rest, audio])
        n = len(audio) // VAD_FRAME_SAMPLES
        self._vad_rest = audio[n * VAD_FRAME_SAMPLES :]
        if n:
            self._vad_submitted += n
            frames = audio[: n * VAD_FRAME_SAMPLES].reshape(n, VAD_FRAME_SAMPLES)
            self._vad_slot = self.vad.submit(
                self._vad_slot, self._vad_state, frames, self._vad_scored, tg
            )

    def _vad_scored(self, probabilities: list[float]) -> None:
        """The tick's verdicts on the next of this session's frames, in order."""
        self._vad_applied += len(probabilities)
        if not self._ended:
            self._feed(VadScores(tuple(probabilities)))
        if self._vad_progress is not None:
            self._vad_progress.set()

    async def _vad_settled(self) -> None:
        """Wait until the verdict on every append applied so far was applied too."""
        while self._vad_applied < self._vad_submitted and self.crashed is None:
            self._vad_progress = anyio.Event()
            await self._vad_progress.wait()
        self._vad_progress = None
