"""Runs one `SessionProtocol` over its connections against a backend: it only executes.

One task group per session holds, per connection, a reader (channel -> decode ->
`receive`) and a writer (bounded outbound queue -> channel), and the stage requests
(`runtime.stage_executor`). The protocol's deadlines go to the process's one `Timers`
heap; results go back through `backend_event`, which fences anything late. Server VAD is
batched across sessions (`runtime.vad_feed`): appends and heartbeats are applied while
earlier audio waits for its verdict, every other client event only after, so a commit
never races its own audio's verdict. When the session ends (with its connection, unless
it is resumable), the task group is cancelled and nothing outlives it. Every choice of
what to send, run, reuse or drop is the protocol's.

Resume: a resumable session numbers and journals every event it emits (`core.resume`);
which connection serves it, and for how long it waits for one, is `runtime.handoff`'s.

Crash boundary: an unexpected exception anywhere in one session (the protocol, an effect,
the timer, the writer) is logged once with its cause and ends only that session, with an
`error` event (`server_error`, `internal_error`) and close 1011; nothing of that session
runs afterwards, so it can neither loop nor close with 1000 as if all were well.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import TYPE_CHECKING

import anyio

from runtime.channel import ChannelClosed
from runtime.clock import loop_clock
from runtime.handoff import Attached, ConnectionHandoff, ResumePolicy
from runtime.metrics import FirstAudioClock
from runtime.outbound import OutboundOverflow, OutboundQueue
from runtime.stage_executor import StageExecutor, StageTimeouts
from runtime.timers import SessionDeadline, Timers
from runtime.vad_feed import VadFeed
from spec.effects import Abort, CloseSession, ScoreVad
from spec.errors import CloseCode, ProtocolError, RemoteProtocolError
from spec.events import (
    Error,
    InputAudioBufferAppend,
    ServerEvent,
    SessionClose,
    SessionEventAck,
    SessionHeartbeat,
    SessionResume,
)
from spec.stage_results import StageResult, VadScores

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from anyio.abc import TaskGroup

    from backends.base import Backend
    from core.session import SessionProtocol
    from runtime.channel import Channel
    from runtime.clock import Clock
    from runtime.metrics import Metrics
    from runtime.vad_batcher import VadBatcher
    from spec.effects import Effect

__all__ = ["Attached", "ResumePolicy", "SessionRunner"]

log = logging.getLogger("joyduplex.runtime")

#: frames of audio that may wait for their VAD verdict before the reader waits too (about
#: 0.8 s of audio): the backpressure that keeps a session that outruns the VAD bounded
MAX_VAD_BACKLOG_FRAMES = 25
#: events applied without waiting for the verdict on earlier audio: more audio, and a
#: liveness probe that changes nothing
_UNORDERED = (InputAudioBufferAppend, SessionHeartbeat)
#: after a crash, how long the writer may take to deliver the error and the 1011 close
CRASH_FLUSH_S = 2.0


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
        event_listener: Callable[[ServerEvent], None] | None = None,
    ) -> None:
        self.protocol = protocol
        self.backend = backend
        self.channel = channel
        self._conn: Attached | None = Attached(channel)  # the connection served now
        self.handoff = ConnectionHandoff(protocol, resume, clock=clock, metrics=metrics)
        self.clock = clock
        self.metrics = metrics
        self.timeouts = timeouts or StageTimeouts()
        self.stages = StageExecutor(
            backend,
            protocol.session_id,
            timeouts=self.timeouts,
            metrics=metrics,
            feed=self._feed,
        )
        self.vad = VadFeed(vad, self._vad_scored) if vad is not None else None
        self.outbound = OutboundQueue(max_outbound_events, slow_after_s=slow_consumer_s)
        self.slow_consumer_s = slow_consumer_s
        self._loop_time = loop_clock()  # anyio.current_time(), bound once (hot path)
        self._tg: TaskGroup | None = None
        self._first_audio = FirstAudioClock(metrics, clock)
        #: sees every server event as it is sent (`SessionHost.event_listener`)
        self._event_listener = event_listener
        self._timers = timers  # the process's; a private one when it is not running
        self._deadline = SessionDeadline(self._loop_time, clock)
        self._ended = False
        self._closing = False
        self._close_code = CloseCode.NORMAL
        self.crashed: BaseException | None = None  # the cause, once the session crashed

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
            self._deadline.cancel()  # the heap must not keep this session alive
            self._tg = None
            if self.vad is not None:
                self.vad.discard()
            self.stages.close()
            await self._abort_everything()
            if self._conn is not None:
                why = "slow consumer" if self._close_code is CloseCode.POLICY_VIOLATION else ""
                await self.handoff.close(self._conn, self._close_code, why)
            if self.handoff.next is not None:
                self.handoff.next.ended.set()

    async def _serve(self, conn: Attached) -> Attached | None:
        """Run the reader and the writer of one connection until it ends; the connection
        the session goes on over (resumed, or replacing this one), if any."""
        self._conn, self.channel = conn, conn.channel
        handoff = self.handoff
        async with anyio.create_task_group() as connection:
            handoff.serving = connection.cancel_scope
            connection.start_soon(self._writer, conn)
            await self._reader(conn.channel)
            connection.cancel_scope.cancel()
        handoff.serving = None
        if handoff.next is not None:  # replaced while attached: tell the old connection
            await handoff.replaced(conn)
        elif not self._may_detach(conn):
            return None  # the session ends; `run` closes this connection
        else:
            await handoff.release(conn)  # its peer is gone
            self._conn = None
            self.outbound.clear()  # what it held waits in the journal
            await handoff.detach()
        return handoff.take_next()

    def _may_detach(self, conn: Attached) -> bool:
        """A resumable session outlives a connection that failed or went away without
        saying goodbye; a close frame with 1000 (normal closure) ends it (D28)."""
        return (
            conn.channel.peer_close_code != CloseCode.NORMAL
            and self.handoff.resumable
            and not self._closing
            and self.crashed is None
            and not self.protocol.closed
        )

    def attach(self, channel: Channel, resume: SessionResume) -> Attached:
        """Hand the session to a new connection (`ConnectionHandoff.attach`)."""
        return self.handoff.attach(channel, resume, ended=self._ended)

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
        await self.stages.abort_all(aborts)

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
            vad = self.vad
            if vad is not None and vad.backlog > MAX_VAD_BACKLOG_FRAMES:
                held_since = self._loop_time()  # the VAD is behind: an overload signal
                await vad.settled()
                vad.batcher.note_wait(self._loop_time() - held_since)
            elif vad is not None and not isinstance(received, _UNORDERED):
                await vad.settled()  # a commit never races its own audio's verdict
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

    async def _writer(self, conn: Attached) -> None:
        if conn.after is not None:
            # the connection it replaced is gone: every event up to now is in the replay
            # (or the client has it), every later one comes through the outbound queue
            replay = self.handoff.replay(conn.after)
            self.outbound.clear()
            for event in replay:
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
        if not self._deadline.due(at) or self._ended or self.crashed is not None:
            return  # stale: rescheduled earlier meanwhile, or the session is over
        with self._boundary("timer"):
            self.protocol.handle_timeout(self.clock.now_ms())
            self._pump()

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
        if self.vad is not None:  # a reader waiting for verdicts gives up
            self.vad.stop()
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
            self.outbound.put(event, self._loop_time)
        except OutboundOverflow as exc:
            self._slow_consumer(str(exc))
        self.metrics.audio_deltas_dropped(self.outbound.dropped_audio_deltas - before)

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
                self._first_audio.observe(out)  # metrics only: effects say what to run
                if self._event_listener is not None:
                    self._event_listener(out)
                self._emit(out)
            else:
                self._execute(out)
        if self._timers is not None:
            self._deadline.schedule(self, self._timers, self.protocol.next_deadline())

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
        """Carry out one effect: the connection's own, the VAD's, or a stage's."""
        tg = self._tg
        if isinstance(effect, CloseSession):
            self._emit(effect)
        elif isinstance(effect, ScoreVad):
            if self.vad is not None and tg is not None:
                self.vad.submit(effect.pcm16, tg)
        elif tg is not None:  # once the connection ended, no backend work starts
            self.stages.execute(effect, tg)

    def _vad_scored(self, probabilities: list[float], levels: list[float]) -> None:
        """The tick's verdicts on the next of this session's frames, in order, with the
        frames' levels."""
        if not self._ended:
            self._feed(VadScores(tuple(probabilities), tuple(levels)))
