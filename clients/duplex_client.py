"""`DuplexClient`: an anyio client of the realtime websocket protocol (tests, the CLI).

    async with DuplexClient.connect("ws://127.0.0.1:8000/v1/realtime", token=...) as client:
        await client.update_session(turn_detection=None)
        await client.stream_audio(pcm16, realtime=True, frames=[jpeg])
        await client.commit(create_response=True)
        result = await client.collect_response(timeout=30)

One reader task reads the socket and decodes every frame once, with `transport.codec`,
into a typed server event; frames it cannot decode (an event type this client does not
know, malformed JSON) are logged and skipped, never fatal. The reader belongs to an anyio
task group that the client's async context manager (`connect`, or `async with client`)
opens and closes: it cannot outlive the block, and a bug in it surfaces there instead of
being lost. Decoded events wait in one memory object stream, consumed by `events()`,
`wait_for` and `collect_response` (use one consumer at a time); `history` keeps every
event received. Its own waiting is anyio's (streams, events, cancel scopes); the socket
is websockets' asyncio implementation, so it runs on asyncio (uvloop included).

With `mode=` the client also runs the shared client state machines
(`clients.headless_host.HeadlessHost`): each event the reader decoded goes to them
as it is, before it is queued for the caller, so both see the same events.

Resume (docs/session-semantics.md D27): on a resumable session (`/v1/duplex`, or
`/v1/realtime?resumable=1`) the client tracks `resume_state` (session id, current resume
token, last `server_event_seq` received); `DuplexClient.connect(url, resume=state)` opens
a resume-only connection (`?resume=1&session_id=<id>`: the server reads only `resume`,
the id is there for a load balancer to route the resume to the host that holds the
session, docs/deploy.md "Resume behind a load balancer"), sends `session.resume` and
returns once `session.resumed` arrived; the replayed events then arrive like any others.
The cursor, the token and the rule that an event numbered at or below the cursor was
received already (and is skipped, so a replay is applied once) are the shared client
resume link's (`core.statemachines.client_resume.ResumeLink`, B42), the browser's too,
kept by `clients.resume_state.ResumeTracker`; `clients.reconnect.resume_after_drop`
retries a resume on that link's backoff. `drop()` abandons the socket without a close
frame (tests); `ack_events()` trims the journal.

The typed senders (`commit`, `append_audio`, ...) are `clients.event_senders`'.

Errors (`clients.errors`): an `error` event answering a helper's request raises
`ServerError` (carrying the `ErrorDetail`); a closed socket raises `ConnectionLost`; a
timeout raises `TimeoutError`. A handshake the server answers with HTTP instead of the
upgrade (401 `unauthorized`, 403 `origin_not_allowed`, ...) raises `HandshakeRefused`, a
`ConnectionLost` naming the code. Client event ids are `evt_<n>`, n from 1 per
connection, from one allocator (`core.statemachines.client_outbox.EventIds`) shared with
the client state machines in lifecycle mode, so no two events of a connection share an
id; senders return the id they used.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlencode

import anyio
import msgspec
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from clients.errors import (
    ConnectionLost,
    DuplexClientError,
    HandshakeRefused,
    ServerError,
    connection_lost,
)
from clients.event_senders import ClientEventSender
from clients.function_runner import FunctionRunner
from clients.headless_host import HeadlessHost
from clients.responses import ResponseAssembler, ResponseResult
from clients.resume_state import ResumeState, ResumeTracker
from core.client_protocol import ClientProtocol
from core.statemachines.client_outbox import EventIds
from spec.events import (
    Error,
    ServerEventT,
    SessionCreated,
    SessionEventAck,
    SessionObject,
    SessionPatch,
    SessionResume,
    SessionResumed,
    SessionUpdate,
    SessionUpdated,
)
from transport.codec import decode_server_event
from transport.log_redaction import redact

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from websockets.asyncio.client import ClientConnection

__all__ = [
    "ConnectionLost",
    "DuplexClient",
    "DuplexClientError",
    "HandshakeRefused",
    "ResponseResult",
    "ResumeState",
    "ServerError",
]

log = logging.getLogger("joyduplex.client")

#: largest server frame accepted (reply audio deltas are small; be generous)
MAX_FRAME_BYTES = 32 * 1024 * 1024

#: a received event and its arrival (`time.monotonic()`)
_Received = tuple[ServerEventT, float]


class DuplexClient(ClientEventSender):
    """A connected session. Build it with `DuplexClient.connect(...)`; a client made
    from an open websocket reads nothing until it is entered (`async with client`)."""

    def __init__(
        self,
        websocket: ClientConnection,
        lifecycle: ClientProtocol | None = None,
        functions: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None,
    ) -> None:
        self._ws = websocket
        #: the client state machines (PTT holds, playback, watchdog) when opted in
        self.lifecycle = lifecycle
        self._host = (
            HeadlessHost(lifecycle, self.send_raw, websocket.close)
            if lifecycle is not None
            else None
        )
        #: the connection's one event-id allocator (the state machines' own in lifecycle
        #: mode, so the ids this client mints never collide with theirs)
        self.event_ids = lifecycle.event_ids if lifecycle is not None else EventIds()
        #: the functions this client answers the model's calls with (B38, B39)
        self._functions = (
            FunctionRunner(functions, self.event_ids, self.send_raw) if functions else None
        )
        # made on entering: a stream left unclosed warns when it is collected
        self._inbox_writer: MemoryObjectSendStream[_Received] | None = None
        self._inbox: MemoryObjectReceiveStream[_Received] | None = None
        self._closed: ConnectionLost | None = None
        self._turn_started: float | None = None
        self.history: list[ServerEventT] = []
        self.skipped: list[str | bytes] = []
        self.session: SessionObject | None = None
        self._task_group: TaskGroup | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._reader_done: anyio.Event | None = None
        #: the session's resume state, kept current from the events read
        self._resume_tracker = ResumeTracker()

    async def __aenter__(self) -> Self:
        """Start the reader in a task group owned by this block."""
        if self._reader_done is not None:
            raise RuntimeError("a DuplexClient is entered once")
        self._reader_done = anyio.Event()
        # unbounded: the reader never waits for the caller (events are small and the
        # caller consumes them, or the block ends)
        self._inbox_writer, self._inbox = anyio.create_memory_object_stream[_Received](math.inf)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await task_group.start(self._reader_task)
        except BaseException as exc:
            self._task_group = None
            try:
                await _leave(task_group, exc)
            finally:
                self._inbox_writer.close()  # the reader closes it, when it ran at all
                self._inbox.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Close the socket, stop the reader and wait for it (nothing outlives the block)."""
        task_group, self._task_group = self._task_group, None
        assert task_group is not None, "__aexit__ without __aenter__"
        try:
            try:
                await self.aclose()
            except BaseException as error:  # cancelled while closing: still end the reader
                if self._reader_scope is not None:
                    self._reader_scope.cancel()
                await _leave(task_group, error)
                raise
            return await _leave(task_group, exc)
        finally:
            assert self._inbox is not None
            self._inbox.close()  # nobody consumes after the block: waits raise ConnectionLost

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        open_timeout: float = 10.0,
        ping_timeout: float | None = 20.0,
        mode: str | None = None,
        resume: ResumeState | None = None,
        functions: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None,
    ) -> AsyncIterator[Self]:
        """Open a session at `url` (`ws://host:port/v1/realtime`); closes it on exit.

        With `mode` ("ptt" or "vad") the client runs the shared client state machines
        (`core.client_protocol.ClientProtocol`, the same tables as the web UI): it sends the mode's
        `session.update`, tracks push-to-talk holds and pending commits by event id, plays
        reply audio instantly (a headless speaker) and acknowledges the played cursor.

        With `functions` (name -> a callable or coroutine function of the call's JSON
        arguments) it answers the model's function calls itself: each called function
        runs in the client's task group, its result goes back as the call's
        `function_call_output` (a string as it is, else JSON; a missing function or an
        exception as `{"error": ...}`), and once a response's calls are all answered and
        it is done, `response.create` asks for the follow-up (B39). Declare the tools in
        the session (`update_session(tools=[...])`).

        With `resume` it opens no session: it resumes that one (`?resume=1` and
        `session_id=<id>`, URL-encoded, for a balancer to route by; then
        `session.resume`) and returns after `session.resumed`.

        The client pings the server every 20 s and drops the connection (close 1011,
        `ConnectionLost`) when a pong takes longer than `ping_timeout` seconds (None:
        never): a client sharing a starved machine with the server may want it longer.

        Raises:
            HandshakeRefused: the server answered the handshake with an HTTP status (401
                `unauthorized`: a missing or wrong `token`; 403 `origin_not_allowed`).
            ConnectionLost: the connection could not be opened (refused, timeout).
            ServerError: the resume was refused (`unknown_session`,
                `invalid_resume_token`, ...).
        """
        if resume is not None:
            query = urlencode({"resume": "1", "session_id": resume.session_id})
            url += ("&" if "?" in url else "?") + query
        extra = dict(headers or {})
        if token is not None:
            extra["Authorization"] = f"Bearer {token}"
        try:
            websocket = await ws_connect(
                url,
                additional_headers=extra,
                max_size=MAX_FRAME_BYTES,
                open_timeout=open_timeout,
                ping_timeout=ping_timeout,
            )
        except InvalidStatus as exc:  # an HTTP answer instead of the upgrade
            response = exc.response
            raise HandshakeRefused(url, response.status_code, bytes(response.body or b"")) from exc
        except (OSError, TimeoutError, WebSocketException) as exc:  # refused, bad URI
            raise ConnectionLost(f"cannot connect to {redact(url)}: {redact(str(exc))}") from exc
        client = cls(websocket, ClientProtocol(mode) if mode is not None else None, functions)
        try:
            async with client:
                if resume is not None:
                    await client._resume(resume)
                if client._host is not None:
                    await client._host.connected()
                yield client
        finally:
            await websocket.close()  # idempotent; covers a client that failed to enter

    async def aclose(self) -> None:
        """Close the socket and stop reading (idempotent); the reader has ended when this
        returns."""
        await self._ws.close()
        if self._reader_scope is not None and self._reader_done is not None:
            self._reader_scope.cancel()
            await self._reader_done.wait()

    async def drop(self) -> None:
        """Abandon the connection without a close frame, as a network failure does."""
        transport = self._ws.transport
        transport.abort()
        if self._reader_done is not None:
            await self._reader_done.wait()

    @property
    def resume_state(self) -> ResumeState | None:
        """What resuming this session takes, once the server named a resume token (a
        resumable session); kept current as events arrive."""
        return self._resume_tracker.state

    async def _resume(self, state: ResumeState) -> None:
        self._resume_tracker.resume_from(state)
        event_id = self.next_event_id()
        await self.send(
            SessionResume(
                event_id=event_id,
                session_id=state.session_id,
                resume_token=state.resume_token,
                last_received_server_event_seq=state.last_server_event_seq,
            )
        )
        await self._wait(lambda e: isinstance(e, SessionResumed), "session.resumed", 10.0, event_id)

    async def ack_events(self, seq: int | None = None) -> None:
        """Confirm every event up to `seq` (default: the last received): the server may
        forget them (`session.event_ack`)."""
        state = self.resume_state
        if seq is None:
            seq = state.last_server_event_seq if state is not None else 0
        await self.send(SessionEventAck(event_id=self.next_event_id(), server_event_seq=seq))

    # --- sending ------------------------------------------------------------------------

    async def send_raw(self, data: str | bytes) -> None:
        """Send one text frame as it is (to test how the server answers bad input).

        Raises:
            ConnectionLost: the socket is closed.
        """
        text = data.decode() if isinstance(data, bytes) else data
        try:
            await self._ws.send(text)
        except ConnectionClosed as exc:
            raise connection_lost(exc) from exc

    async def update_session(self, **session_fields: Any) -> SessionObject:
        """Send `session.update` with these `session` fields; wait for `session.updated`.

        Raises:
            ServerError: the update was refused.
            TimeoutError: no answer within 10 s.
        """
        event_id = self.next_event_id()
        patch = msgspec.convert(session_fields, SessionPatch)
        await self.send(SessionUpdate(event_id=event_id, session=patch))
        event = await self._wait(
            lambda e: isinstance(e, SessionUpdated), "session.updated", 10.0, event_id
        )
        assert isinstance(event, SessionUpdated)
        return event.session

    # --- receiving ----------------------------------------------------------------------

    async def events(self) -> AsyncIterator[ServerEventT]:
        """Every server event not yet consumed, until the socket closes."""
        while True:
            try:
                event, _ = await self._next()
            except ConnectionLost:
                return
            yield event

    async def wait_for(
        self, type_name: str, *, timeout: float = 10.0, raise_on_error: bool = True
    ) -> ServerEventT:
        """The next event of `type_name`; events before it are consumed (see `history`).

        Raises:
            TimeoutError: none arrived within `timeout` seconds (the client stays usable).
            ServerError: an `error` event came first (unless `raise_on_error` is false or
                `type_name` is "error").
            ConnectionLost: the socket closed first.
        """
        errors_raise = raise_on_error and type_name != "error"
        return await self._wait(
            lambda e: _type_of(e) == type_name, type_name, timeout, None, errors_raise
        )

    async def collect_response(
        self, timeout: float = 30.0, *, response_id: str | None = None
    ) -> ResponseResult:
        """Consume events until the response (`response_id`, else the next one created)
        is done, and assemble it.

        Raises:
            ServerError: an `error` event came before the response was created.
            TimeoutError: it did not finish within `timeout` seconds.
            ConnectionLost: the socket closed first.
        """
        started = self._turn_started if self._turn_started is not None else time.monotonic()
        assembler = ResponseAssembler(response_id, started)
        with _deadline(timeout, "response.done"):
            while True:
                event, at = await self._next()
                if assembler.add(event, at):
                    return assembler.result

    # --- internals ----------------------------------------------------------------------

    async def _wait(
        self,
        matches: Callable[[ServerEventT], bool],
        description: str,
        timeout: float,
        event_id: str | None,
        errors_raise: bool = True,
    ) -> ServerEventT:
        with _deadline(timeout, description):
            while True:
                event, _ = await self._next()
                if matches(event):
                    return event
                if errors_raise and isinstance(event, Error) and _answers(event, event_id):
                    raise ServerError(event.error)

    async def _next(self) -> _Received:
        """The next received event and its arrival (`time.monotonic()`).

        Raises:
            ConnectionLost: the reader ended and every event before the end was consumed
                (or the block ended).
        """
        inbox = self._inbox
        if inbox is None:
            raise RuntimeError("enter the client (`async with`) before waiting for events")
        try:
            return await inbox.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise self._closed or ConnectionLost("the client closed the connection") from None

    async def _reader_task(self, *, task_status: TaskStatus[None]) -> None:
        """The reader, in its own cancel scope so `aclose` stops it and nothing else."""
        try:
            with anyio.CancelScope() as scope:
                self._reader_scope = scope
                task_status.started()
                await self._read()
        finally:
            assert self._reader_done is not None
            self._reader_done.set()

    async def _read(self) -> None:
        writer = self._inbox_writer
        assert writer is not None
        try:
            async for message in self._ws:
                at = time.monotonic()
                event = self._decode(message)
                if event is None:
                    continue
                if not self._resume_tracker.take(event):
                    log.debug("skipping event %s: received before", event.server_event_seq)
                    continue
                if self._host is not None:  # the machines first, as a browser would
                    await self._host.server_event(event)
                if self._functions is not None:
                    for call in await self._functions.server_event(event):
                        assert self._task_group is not None  # the reader runs inside it
                        self._task_group.start_soon(self._functions.run, call)
                if isinstance(event, SessionCreated | SessionUpdated):
                    self.session = event.session
                self.history.append(event)
                writer.send_nowait((event, at))
            self._closed = ConnectionLost(
                f"the connection closed (code {self._ws.close_code})",
                code=self._ws.close_code,
                reason=self._ws.close_reason or "",
            )
        except ConnectionClosed as exc:
            self._closed = connection_lost(exc)
        except ConnectionLost as exc:  # the state machines' answer found the socket closed
            self._closed = exc
        finally:
            if self._closed is None:
                self._closed = ConnectionLost("the client closed the connection")
            writer.close()  # what was sent stays readable; then every wait sees the close

    # --- the client state machines (opt-in) ---------------------------------------------

    async def hold_to_talk(self, pcm16: bytes, *, chunk_ms: int = 20, muted: bool = False) -> None:
        """One push-to-talk hold through the client machines: press, stream, release.

        A muted or empty hold sends no commit (B20); otherwise the release commits with the
        hold's own event id and the watchdog is armed until its reply ends (B23).
        """
        if self._host is None:
            raise RuntimeError("connect with mode='ptt' or mode='vad' to use the client machines")
        await self._host.hold_to_talk(pcm16, chunk_ms=chunk_ms, muted=muted)

    def _decode(self, message: str | bytes) -> ServerEventT | None:
        try:
            return decode_server_event(message)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self.skipped.append(message)
            log.warning(
                "skipping a server frame this client cannot read (%s): %.200r", exc, message
            )
            return None


async def _leave(task_group: TaskGroup, exc: BaseException | None) -> bool | None:
    """Exit `task_group` after the block raised `exc` (or nothing).

    Only a cancellation is handed to the task group (it may be the group's own, after
    the reader failed). Any other error of the block (a `ServerError`, a timeout) is
    withheld, so it propagates as it is instead of wrapped in an exception group; the
    group still raises what the reader raised.
    """
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return await task_group.__aexit__(type(exc), exc, exc.__traceback__)
    await task_group.__aexit__(None, None, None)
    return None


@contextmanager
def _deadline(timeout: float, description: str) -> Iterator[None]:
    """Raise `TimeoutError` naming `description` when the block outlasts `timeout`
    seconds (the event being received then stays queued)."""
    try:
        with anyio.fail_after(timeout):
            yield
    except TimeoutError:
        raise TimeoutError(f"timed out waiting for {description}") from None


def _type_of(event: ServerEventT) -> str:
    """The wire `type` of a decoded event (its msgspec tag)."""
    return str(type(event).__struct_config__.tag)


def _answers(error: Error, event_id: str | None) -> bool:
    """Whether an `error` event may answer the client event `event_id` (None: any)."""
    return event_id is None or error.error.event_id in (None, event_id)
