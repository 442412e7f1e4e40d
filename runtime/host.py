"""The session host: one backend, admission control, metrics, and the live sessions.

The transport hands every accepted connection to `serve()`; the host admits it (or
refuses with `resource_exhausted`, close 1013), runs a `SessionRunner`, and releases the
slot on every terminal path. `start()` loads and warms up the backend before the host
reports ready; `stop()` closes every session with reason `shutdown` (close 1001).
`watch()` runs beside them: event-loop lag, CPU, and this worker's state on the board.

A server of several worker processes runs one host per worker, each with its own backend
and `worker_share(max_sessions, workers)` session slots; the hosts share their state on a
`WorkerBoard`, so `readiness()` answers for the whole server from any worker.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from backends.registry import load_backend
from core.admission import OverloadGate, SessionSlots, worker_share
from core.resume import Resumption
from core.session import SessionProtocol
from runtime.clock import MonotonicClock
from runtime.heap import return_free_heap
from runtime.metrics import Metrics
from runtime.session_runner import ResumePolicy, SessionRunner
from runtime.stage_executor import StageTimeouts
from runtime.timers import Timers
from runtime.vad_batcher import VadBatcher
from runtime.workers import WorkerState, WorkerStatus, session_host, session_owner
from runtime.workers import session_id as owned_session_id
from spec.errors import (
    CloseCode,
    ErrorCode,
    ProtocolError,
    RemoteProtocolError,
    ResumeRefused,
    UnknownSession,
)
from spec.limits import Limits
from spec.session_config import SessionConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from backends.base import Backend
    from runtime.channel import Channel
    from runtime.workers import WorkerBoard
    from spec.events import ServerEvent, SessionResume

__all__ = ["HostSettings", "Readiness", "SessionHost"]

log = logging.getLogger("joyduplex.runtime")

#: shedding counts as over once the gate has stayed open this long (seconds)
SHEDDING_QUIET_S = 10.0


def new_resume_token() -> str:
    """A resume token: 192 random bits, URL-safe."""
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class HostSettings:
    backend: str = "cpu"
    backend_options: dict[str, Any] = field(default_factory=dict)
    profile: str = "speech"
    limits: Limits = field(default_factory=Limits)
    session_defaults: SessionConfig = field(default_factory=SessionConfig)
    timeouts: StageTimeouts = field(default_factory=StageTimeouts)
    shutdown_grace_s: float = 5.0
    #: names this server in every session id it issues, for a balancer (None: no name)
    host_id: str | None = None


@dataclass(frozen=True)
class Readiness:
    """The answer of /readyz: ready only when every worker is."""

    ready: bool
    reason: str | None  # what is not ready, when something is not
    worker: WorkerStatus  # this process
    workers: list[WorkerStatus]  # every worker of the server (just this one, alone)
    max_sessions: int  # this worker's share of `max_sessions`

    @property
    def workers_ready(self) -> int:
        return sum(w.state is WorkerState.READY for w in self.workers)

    @property
    def sessions_all(self) -> int:
        return sum(w.sessions for w in self.workers)


class SessionHost:
    """The sessions of one server process.

    Args:
        settings: backend, profile, limits, session defaults.
        backend: a backend object to use instead of loading `settings.backend`.
        board: the shared state of a multi-worker server; `worker` is this host's slot.
    """

    def __init__(
        self,
        settings: HostSettings,
        backend: Backend | None = None,
        *,
        board: WorkerBoard | None = None,
        worker: int = 0,
    ) -> None:
        self.settings = settings
        self.board = board
        self.worker = worker
        self.workers = board.size if board is not None else 1
        self.metrics = Metrics(worker=worker)
        self.slots = SessionSlots(worker_share(settings.limits.max_sessions, self.workers))
        limits = settings.limits
        self.overload = OverloadGate(
            loop_lag_limit_ms=limits.shed_loop_lag_ms,
            vad_limit_ms=limits.shed_vad_wait_ms,
            loop_busy_limit=limits.shed_loop_busy,
            vad_busy_limit=limits.shed_vad_busy,
        )
        self.backend = backend
        self._started = False
        self._stopping = False
        self._failure: str | None = None
        self._vad: VadBatcher | None = None
        #: every session's deadlines; `timers.run()` runs beside `watch()` (the transport's
        #: lifespan); while it does not, each session runs a timer of its own
        self.timers = Timers()
        self._runners: dict[str, SessionRunner] = {}
        #: called with every server event of every session of this host as it is sent, on
        #: the event loop (a measurement in this process, tools/browser_latency.py); it
        #: must not block or raise; None (the default): no one listens
        self.event_listener: Callable[[ServerEvent], None] | None = None
        self._ids = itertools.count(1)
        #: names this process in every session id it issues (never 0: "no owner")
        self.owner = secrets.randbelow(2**32 - 1) + 1
        if board is not None:
            board.set_owner(worker, self.owner)
        self._all_closed = anyio.Event()
        #: sessions refused in the current shedding episode (None: none under way), and
        #: when the gate last refused
        self._shed_refused: int | None = None
        self._shed_last = 0.0

    @property
    def sessions(self) -> int:
        return len(self._runners)

    @property
    def ready(self) -> bool:
        """Started, not shutting down, and no stage out of service (B18)."""
        return self._started and self.backend is not None and not self.backend.dead

    @property
    def failure(self) -> str | None:
        """Why the host is not ready, when it is not for a reason worth reporting."""
        if self.backend is not None and self.backend.dead:
            return "; ".join(
                f"stage {s} out of service: {why}" for s, why in self.backend.dead.items()
            )
        return self._failure

    async def start(self) -> None:
        """Load, enter and warm up the backend; only then is the host ready."""
        try:
            if self.backend is None:
                options = {"profile": self.settings.profile, **self.settings.backend_options}
                self.backend = load_backend(self.settings.backend, **options)
            for stage in self.backend.stages():
                # a batched GPU engine's queue wait, prefill and step times (its engine
                # thread observes them) join the stage latency histograms
                observe = getattr(stage, "observe_timing", None)
                if observe is not None:
                    observe(self.metrics.stage_latency)
            log.info("loading backend %s", self.backend.description or self.backend.name)
            await self.backend.__aenter__()
            log.info("warming up backend %s", self.backend.name)
            await self.backend.warmup()
        except Exception as exc:
            self._failure = str(exc)
            log.error("backend failed to start: %s", exc)
            raise
        if self.backend.vad is not None:
            self._vad = VadBatcher(self.backend.vad)
        self._started = True
        self.publish()
        log.info("backend %s ready", self.backend.name)

    @property
    def state(self) -> WorkerState:
        if self._stopping:
            return WorkerState.SHUTTING_DOWN
        if self.backend is not None and self.backend.dead:
            return WorkerState.OUT_OF_SERVICE
        return WorkerState.READY if self._started else WorkerState.STARTING

    def publish(self) -> None:
        """Write this worker's state and session count to the board (if there is one)."""
        if self.board is not None:
            self.board.publish(self.worker, self.state, self.sessions)

    def readiness(self) -> Readiness:
        """Ready when this worker and every other worker of the server are."""
        me = WorkerStatus(self.worker, os.getpid(), self.state, self.sessions)
        if self.board is None:
            workers = [me]
        else:
            self.publish()
            workers = [me if w.index == self.worker else w for w in self.board.snapshot()]
        not_ready: list[str] = []
        for w in workers:
            if w.state is WorkerState.READY:
                continue
            why = (self.failure or w.state.label) if w is me else w.state.label
            not_ready.append(why if len(workers) == 1 else f"worker {w.index} (pid {w.pid}): {why}")
        return Readiness(
            ready=not not_ready,
            reason="; ".join(not_ready) or None,
            worker=me,
            workers=workers,
            max_sessions=self.slots.capacity,
        )

    async def watch(self, period_s: float = 0.25) -> None:
        """Until cancelled: measure how late the event loop wakes a `period_s` sleep
        (event-loop lag) and how much of it the loop's thread ran on the CPU, count this
        process's CPU, and publish this worker's state."""
        # this task runs on the event loop's thread: its thread CPU time is the loop's
        cpu_before = time.thread_time()
        while True:
            before = anyio.current_time()
            await anyio.sleep(period_s)
            now = anyio.current_time()
            lag_s = max(0.0, now - before - period_s)
            cpu_now = time.thread_time()
            busy = (cpu_now - cpu_before) / max(now - before, 1e-6)
            cpu_before = cpu_now
            self.metrics.loop_lag(lag_s)
            self.metrics.sample_cpu()
            vad = self._vad
            vad_s = vad.take_longest_wait_s() if vad is not None else 0.0
            vad_busy = vad.take_scoring_s() / max(now - before, 1e-6) if vad is not None else None
            self.metrics.busy(busy, vad_busy)
            self.overload.observe(
                lag_s * 1000,
                vad_s * 1000,
                loop_busy=busy,
                vad_busy=vad_busy,
                sessions=len(self._runners),
            )
            self._log_shedding(self.overload.refusal(), now)
            self.publish()

    def _log_shedding(self, refusal: ProtocolError | None, now: float) -> None:
        """Say when shedding starts (why) and when it has been over for `SHEDDING_QUIET_S`
        (how many were refused): at the edge of capacity the gate opens and closes many
        times a second, which is one episode, not many."""
        if refusal is not None:
            self._shed_last = now
            if self._shed_refused is None:
                self._shed_refused = 0
                log.warning("refusing new sessions: %s", refusal.message)
        elif self._shed_refused is not None and now - self._shed_last >= SHEDDING_QUIET_S:
            log.warning(
                "admitting new sessions again: under the limits for %g s; %d refused meanwhile",
                SHEDDING_QUIET_S,
                self._shed_refused,
            )
            self._shed_refused = None

    async def close_sessions(self) -> None:
        """Stop admitting, close every session (`session.closed` reason shutdown, close
        1001), and wait up to the grace period for them to end."""
        self._started = False
        self._stopping = True
        self._failure = "shutting down"
        self.publish()
        for runner in list(self._runners.values()):
            await runner.shutdown("shutdown")
        if self._runners:
            with anyio.move_on_after(self.settings.shutdown_grace_s):
                await self._all_closed.wait()

    async def stop(self) -> None:
        """Close every session, then release the backend."""
        await self.close_sessions()
        if self.backend is not None:
            with anyio.CancelScope(shield=True):
                await self.backend.__aexit__(None, None, None)

    def session(self, session_id: str) -> SessionRunner | None:
        """The live session of that id in this process, if any (tests, diagnostics)."""
        return self._runners.get(session_id)

    def new_session_id(self) -> str:
        return owned_session_id(self.owner, next(self._ids), self.settings.host_id)

    def _other_host(self, session_id: str) -> bool:
        """Whether `session_id` names another server by its host id (its owner id then
        says nothing about this server's workers)."""
        return session_host(session_id) != self.settings.host_id

    def owner_elsewhere(self, session_id: str) -> int | None:
        """The worker of this server that holds `session_id` when it is another one
        (live, by the owner id the session id names); None when it is not."""
        if session_id in self._runners or self.board is None or self._other_host(session_id):
            return None
        owner = session_owner(session_id)
        index = None if owner is None else self.board.owner_slot(owner)
        return index if index is not None and index != self.worker else None

    def _where_not(self, session_id: str) -> str:
        """Why `session_id` is not here, for `unknown_session`."""
        host = session_host(session_id)
        if host is not None and host != self.settings.host_id:
            return (
                f"it lives on another server, host_id `{host}` (the balancer sent the "
                "resume elsewhere, or that server is down)"
            )
        owner = session_owner(session_id)
        if self.board is not None and owner is not None and not self._other_host(session_id):
            gone = self.board.former_slot(owner)
            if gone is not None:
                return (
                    f"the worker process that held it (worker {gone}) exited, and its "
                    "sessions ended with it"
                )
        return "it never existed, ended, or expired, or it lives on another server"

    def refusal(self) -> ProtocolError | None:
        """Why a new session cannot start now, if it cannot."""
        if not self.ready or self.backend is None:
            why = f" ({self.failure})" if self.failure else ""
            return RemoteProtocolError(
                f"the server is not ready{why}; retry shortly", code=ErrorCode.RESOURCE_EXHAUSTED
            )
        shed = self.overload.refusal()
        if shed is not None:
            self._log_shedding(shed, anyio.current_time())
            self._shed_refused = (self._shed_refused or 0) + 1
            return shed
        if self.slots.in_use >= self.slots.capacity:
            limit = f"the server is at its limit of {self.slots.capacity} sessions"
            if self.workers > 1:
                limit = (
                    f"this worker is at its limit of {self.slots.capacity} sessions "
                    f"(max_sessions {self.settings.limits.max_sessions} over {self.workers} "
                    "workers)"
                )
            return RemoteProtocolError(f"{limit}; retry later", code=ErrorCode.RESOURCE_EXHAUSTED)
        return None

    def reserve(self, session_id: str) -> ProtocolError | None:
        """Take a slot now for the session `serve` runs as `session_id` shortly, or say
        why not. A WebRTC call is answered before its session starts, and offers answered
        together must not all pass admission before any takes its slot; `serve` keeps
        the reserved slot and gives it back when the session ends."""
        refusal = self.refusal()
        if refusal is not None:
            return refusal
        try:
            self.slots.admit(session_id)
        except RemoteProtocolError as exc:
            return exc
        return None

    async def serve(
        self,
        channel: Channel,
        *,
        config: SessionConfig | None = None,
        session_id: str | None = None,
        resumable: bool = False,
    ) -> None:
        """Run one session over `channel` until it ends. The caller checked `refusal()`
        (or took the slot with `reserve(session_id)`).

        `resumable` (D27): a dropped connection detaches the session for
        `limits.resume_grace_s` instead of ending it; it keeps its slot meanwhile.
        """
        session_id = session_id or self.new_session_id()
        assert self.backend is not None
        self.slots.admit(session_id)
        self.overload.admitted()
        self.metrics.session_opened()
        clock = MonotonicClock()
        asr = self.backend.asr
        limits = self.settings.limits
        resume = None
        if resumable:
            resume = Resumption(
                session_id,
                new_token=new_resume_token,
                max_bytes=limits.max_resume_journal_bytes,
                max_age_ms=round(limits.resume_journal_age_s * 1000),
            )
        protocol = SessionProtocol(
            session_id=session_id,
            config=config or self.settings.session_defaults,
            limits=self.settings.limits,
            profile=self.settings.profile,
            now_ms=clock.now_ms(),
            voices=self.backend.tts.voices,
            input_languages=asr.languages if asr is not None else None,
            delegation=self.backend.delegate is not None,
            live_transcripts=asr is not None and asr.live_transcripts,
            punctuated_transcripts=asr is not None and asr.punctuates,
            turn_end_budget_ms=round(self.settings.timeouts.turn_end * 1000),
            resume=resume,
            prepares_frames=self.backend.vlm.prepares_frames,
            function_calling=self.backend.vlm.function_calling,
        )
        runner = SessionRunner(
            protocol,
            self.backend,
            channel,
            clock=clock,
            metrics=self.metrics,
            vad=self._vad,
            max_outbound_events=self.settings.limits.max_outbound_events,
            timeouts=self.settings.timeouts,
            timers=self.timers,
            slow_consumer_s=self.settings.limits.slow_consumer_s,
            resume=self._resume_policy() if resumable else None,
            event_listener=self.event_listener,
        )
        self._runners[session_id] = runner
        self.publish()
        log.info("session %s opened", session_id)
        try:
            await runner.run()
        finally:
            del self._runners[session_id]
            self.slots.release(session_id)
            self.metrics.session_closed()
            self.publish()
            log.info("session %s closed", session_id)
            if not self._runners:
                return_free_heap()  # the peak's buffers back to the system (runtime/heap)
                self._all_closed.set()
                self._all_closed = anyio.Event()

    def _resume_policy(self) -> ResumePolicy:
        return ResumePolicy(grace_s=self.settings.limits.resume_grace_s)

    async def resume(self, channel: Channel, event: SessionResume) -> None:
        """Reattach a live session of this process to `channel` (`session.resume`) and
        serve it there until the session leaves that connection. It uses no new slot.

        Raises:
            ResumeRefused: one subclass per wire code (`spec.errors`); nothing changed.
        """
        runner = self._runners.get(event.session_id)
        try:
            if runner is None:
                raise UnknownSession(
                    f"no session `{event.session_id}` on this server: "
                    f"{self._where_not(event.session_id)}",
                    param="session_id",
                )
            attached = runner.attach(channel, event)
        except ResumeRefused:
            self.metrics.resume_event("refused")
            raise
        log.info("session %s resumed", event.session_id)
        await attached.ended.wait()

    @staticmethod
    def refusal_close_code() -> CloseCode:
        return CloseCode.TRY_AGAIN_LATER
