"""`DuplexClient`: an asyncio client of the realtime websocket protocol (tests, the CLI).

    async with DuplexClient.connect("ws://127.0.0.1:8000/v1/realtime", token=...) as client:
        await client.update_session(turn_detection=None)
        await client.stream_audio(pcm16, realtime=True, frames=[jpeg])
        await client.commit(create_response=True)
        result = await client.collect_response(timeout=30)

One reader task reads the socket and decodes every frame with `transport.codec` into a
typed server event; frames it cannot decode (an event type this client does not know,
malformed JSON) are logged and skipped, never fatal. The reader belongs to an anyio task
group that the client's async context manager (`connect`, or `async with client`) opens
and closes: it cannot outlive the block, and a bug in it surfaces there instead of being
lost. Decoded events wait in one queue, consumed by `events()`, `wait_for` and
`collect_response` (use one consumer at a time); `history` keeps every event received.

Resume (docs/session-semantics.md D27): on a resumable session (`/v1/duplex`, or
`/v1/realtime?resumable=1`) the client tracks `resume_state` (session id, current resume
token, last `server_event_seq` received); `DuplexClient.connect(url, resume=state)` opens
a resume-only connection (`?resume=1`), sends `session.resume` and returns once
`session.resumed` arrived; the replayed events then arrive like any others. `drop()`
abandons the socket without a close frame (tests); `ack_events()` trims the journal.

Errors: an `error` event answering a helper's request raises `ServerError` (carrying the
`ErrorDetail`); a closed socket raises `ConnectionLost`; a timeout raises `TimeoutError`.
A handshake the server answers with HTTP instead of the upgrade (401 `unauthorized`, 403
`origin_not_allowed`, ...) raises `HandshakeRefused`, a `ConnectionLost` naming the code.
Client event ids are `evt_<n>`, n from 1 per connection, from one allocator
(`core.statemachines.client_outbox.EventIds`) shared with the client state machines in
lifecycle mode, so no two events of a connection share an id; senders return the id
they used.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import anyio
import msgspec
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from core.client import ClientProtocol
from core.statemachines.client_outbox import EventIds
from spec.events import (
    ClientEventT,
    Error,
    ErrorDetail,
    InputAudioBufferAppend,
    InputAudioBufferCommit,
    InputAudioTranscriptionCompleted,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    ResponseCreated,
    ResponseCreateParams,
    ResponseDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputTextDelta,
    ServerEventT,
    SessionClose,
    SessionCreated,
    SessionEventAck,
    SessionObject,
    SessionPatch,
    SessionResume,
    SessionResumed,
    SessionUpdate,
    SessionUpdated,
)
from spec.tables.client_constants import PLAYBACK_RATE_HZ
from transport.codec import decode_server_event, encode_client_event
from transport.log_redaction import redact

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Mapping
    from types import TracebackType

    from anyio.abc import TaskGroup, TaskStatus
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


class DuplexClientError(Exception):
    """Anything the client raises on purpose (besides `TimeoutError`)."""


class ServerError(DuplexClientError):
    """The server answered with an `error` event."""

    def __init__(self, detail: ErrorDetail) -> None:
        super().__init__(f"{detail.code}: {detail.message}")
        self.detail = detail
        self.code = detail.code
        self.message = detail.message
        self.param = detail.param
        self.event_id = detail.event_id


class ConnectionLost(DuplexClientError):
    """The socket closed (or failed) while the client was sending or waiting."""

    def __init__(self, message: str, *, code: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class HandshakeRefused(ConnectionLost):
    """The server answered the websocket handshake with an HTTP status instead of the
    upgrade. `status` is that status; `error_code` the wire code of its JSON body
    (`unauthorized` for 401, `origin_not_allowed` for 403) when it has one; `detail` the
    whole `error` object."""

    def __init__(self, url: str, status: int, body: bytes) -> None:
        detail = _error_body(body)
        self.status = status
        self.detail = detail
        self.error_code = detail.code if detail is not None else None
        why = f"{detail.code}: {detail.message}" if detail is not None else "no reason given"
        super().__init__(
            f"the server at {redact(url)} refused the connection (HTTP {status}, {why})"
        )


def _error_body(body: bytes) -> ErrorDetail | None:
    """The `error` object of a refusal's JSON body, if it carries one."""
    try:
        return msgspec.json.decode(body, type=_RefusalBody).error
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class _RefusalBody(msgspec.Struct):
    error: ErrorDetail


@dataclass(slots=True)
class ResponseResult:
    """One response as `collect_response` saw it.

    `status` is `completed` / `cancelled` / `failed` from `response.done`, or `listen` for a
    quiet commit answered by `response.listen` without a response. `audio` is the reply
    pcm16 at the session's output rate; `errors` holds `error` events seen after the
    response started (a stage failure); `time_to_first_audio_s` counts from the last
    `commit` / `create_response` this client sent (else from the call).
    """

    response_id: str | None
    status: str
    status_reason: str | None = None
    transcript: str = ""
    audio: bytes = b""
    user_transcripts: list[str] = field(default_factory=list)
    events: list[ServerEventT] = field(default_factory=list)
    errors: list[ErrorDetail] = field(default_factory=list)
    item_id: str | None = None
    time_to_first_audio_s: float | None = None

    def audio_ms(self, sample_rate_hz: int = 24_000) -> float:
        """Duration of `audio` (pcm16 mono) at `sample_rate_hz`."""
        return len(self.audio) / 2 / sample_rate_hz * 1000


@dataclass(slots=True)
class ResumeState:
    """What resuming a session takes: its id, its current token, and the last event
    received (`server_event_seq`, 0 before any)."""

    session_id: str
    resume_token: str
    last_server_event_seq: int = 0


_CLOSED = object()  # queue sentinel: the reader ended


class DuplexClient:
    """A connected session. Build it with `DuplexClient.connect(...)`; a client made
    from an open websocket reads nothing until it is entered (`async with client`)."""

    def __init__(
        self, websocket: ClientConnection, lifecycle: ClientProtocol | None = None
    ) -> None:
        self._ws = websocket
        #: the client state machines (PTT holds, playback, watchdog) when opted in
        self.lifecycle = lifecycle
        #: the connection's one event-id allocator (the state machines' own in lifecycle
        #: mode, so the ids this client mints never collide with theirs)
        self.event_ids = lifecycle.event_ids if lifecycle is not None else EventIds()
        self._played_ms: dict[str, float] = {}
        self._queue: asyncio.Queue[tuple[ServerEventT, float] | object] = asyncio.Queue()
        self._closed: ConnectionLost | None = None
        self._turn_started: float | None = None
        self.history: list[ServerEventT] = []
        self.skipped: list[str | bytes] = []
        self.session: SessionObject | None = None
        self._task_group: TaskGroup | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._reader_done: anyio.Event | None = None
        #: set once the server named a resume token (a resumable session); kept current
        self.resume_state: ResumeState | None = None

    async def __aenter__(self) -> Self:
        """Start the reader in a task group owned by this block."""
        if self._reader_done is not None:
            raise RuntimeError("a DuplexClient is entered once")
        self._reader_done = anyio.Event()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            await task_group.start(self._reader_task)
        except BaseException as exc:
            self._task_group = None
            await _leave(task_group, exc)
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
            await self.aclose()
        except BaseException as error:  # cancelled while closing: still end the reader
            if self._reader_scope is not None:
                self._reader_scope.cancel()
            await _leave(task_group, error)
            raise
        return await _leave(task_group, exc)

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
    ) -> AsyncIterator[Self]:
        """Open a session at `url` (`ws://host:port/v1/realtime`); closes it on exit.

        With `mode` ("ptt" or "vad") the client runs the shared client state machines
        (`core.client.ClientProtocol`, the same tables as the web UI): it sends the mode's
        `session.update`, tracks push-to-talk holds and pending commits by event id, plays
        reply audio instantly (a headless speaker) and acknowledges the played cursor.

        With `resume` it opens no session: it resumes that one (`?resume=1`, then
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
            url += ("&" if "?" in url else "?") + "resume=1"
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
        client = cls(websocket, ClientProtocol(mode) if mode is not None else None)
        try:
            async with client:
                if resume is not None:
                    await client._resume(resume)
                if client.lifecycle is not None:
                    await client._run(client.lifecycle.connected(_now_ms()))
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

    async def _resume(self, state: ResumeState) -> None:
        self.resume_state = ResumeState(
            state.session_id, state.resume_token, state.last_server_event_seq
        )
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

    def next_event_id(self) -> str:
        """The connection's next client event id (`evt_<n>`)."""
        return self.event_ids.next()

    async def send(self, event: ClientEventT) -> None:
        """Send one typed client event as it is.

        Raises:
            ConnectionLost: the socket is closed.
        """
        await self.send_raw(encode_client_event(event).decode())

    async def send_raw(self, data: str | bytes) -> None:
        """Send one text frame as it is (to test how the server answers bad input).

        Raises:
            ConnectionLost: the socket is closed.
        """
        text = data.decode() if isinstance(data, bytes) else data
        try:
            await self._ws.send(text)
        except ConnectionClosed as exc:
            raise _lost(exc) from exc

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

    async def append_audio(
        self,
        pcm16: bytes,
        *,
        frames: Iterable[bytes] = (),
        is_speech: bool | None = None,
        sample_rate_hz: int | None = None,
        event_id: str | None = None,
    ) -> str:
        """Append microphone audio (pcm16 at the session's input rate unless
        `sample_rate_hz` says otherwise) and/or camera frames (JPEG/PNG bytes)."""
        event_id = event_id or self.next_event_id()
        await self.send(
            InputAudioBufferAppend(
                event_id=event_id,
                audio=pcm16,
                video_frames=list(frames),
                is_speech=is_speech,
                sample_rate_hz=sample_rate_hz,
            )
        )
        return event_id

    async def stream_audio(
        self,
        pcm16: bytes,
        *,
        chunk_ms: int = 20,
        realtime: bool = False,
        frames: Iterable[bytes] = (),
        is_speech: bool | None = None,
        sample_rate_hz: int = 16_000,
    ) -> list[str]:
        """Append `pcm16` (mono at `sample_rate_hz`) in `chunk_ms` chunks; `frames` go
        with the first chunk. With `realtime`, chunk k is sent at k * chunk_ms after the
        first (absolute deadlines: no drift). Returns the event ids."""
        step = max(2, sample_rate_hz * chunk_ms // 1000 * 2)
        chunks = [pcm16[i : i + step] for i in range(0, len(pcm16), step)] or [b""]
        first_frames = list(frames)
        start = time.monotonic()
        ids: list[str] = []
        for index, chunk in enumerate(chunks):
            if realtime:
                delay = start + index * chunk_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            ids.append(
                await self.append_audio(
                    chunk,
                    frames=first_frames if index == 0 else (),
                    is_speech=is_speech,
                    sample_rate_hz=sample_rate_hz,
                )
            )
        return ids

    async def commit(
        self, *, create_response: bool | None = None, event_id: str | None = None
    ) -> str:
        """Commit the buffered input as one user turn."""
        event_id = event_id or self.next_event_id()
        self._turn_started = time.monotonic()
        await self.send(InputAudioBufferCommit(event_id=event_id, create_response=create_response))
        return event_id

    async def create_response(self, *, event_id: str | None = None, **params: Any) -> str:
        """Start a response (`params`: `response.create`'s `response` fields)."""
        event_id = event_id or self.next_event_id()
        response = msgspec.convert(params, ResponseCreateParams) if params else None
        self._turn_started = time.monotonic()
        await self.send(ResponseCreate(event_id=event_id, response=response))
        return event_id

    async def cancel_response(
        self, response_id: str | None = None, *, event_id: str | None = None
    ) -> str:
        event_id = event_id or self.next_event_id()
        await self.send(ResponseCancel(event_id=event_id, response_id=response_id))
        return event_id

    async def ack_playback(
        self, response_id: str, item_id: str, played_ms: float, *, event_id: str | None = None
    ) -> str:
        """Report how much of a response's audio was played."""
        event_id = event_id or self.next_event_id()
        await self.send(
            PlaybackAck(
                event_id=event_id, response_id=response_id, item_id=item_id, played_ms=played_ms
            )
        )
        return event_id

    async def close_session(self, reason: str = "client_close") -> str:
        """Ask the server to end the session (`session.closed` follows)."""
        event_id = self.next_event_id()
        await self.send(SessionClose(event_id=event_id, reason=reason))
        return event_id

    # --- receiving ----------------------------------------------------------------------

    async def events(self) -> AsyncIterator[ServerEventT]:
        """Every server event not yet consumed, until the socket closes."""
        while True:
            try:
                event, _ = await self._next(None)
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
        loop = asyncio.get_running_loop()
        started = self._turn_started if self._turn_started is not None else time.monotonic()
        deadline = loop.time() + timeout
        result = ResponseResult(response_id=response_id, status="in_progress")
        text_parts: list[str] = []
        audio_parts: list[bytes] = []
        created = response_id is not None
        while True:
            event, at = await self._next(deadline, "response.done")
            result.events.append(event)
            if isinstance(event, Error):
                if not created:
                    raise ServerError(event.error)
                result.errors.append(event.error)
            elif isinstance(event, InputAudioTranscriptionCompleted):
                result.user_transcripts.append(event.transcript)
            elif isinstance(event, ResponseListen) and event.response_id is None and not created:
                result.status, result.status_reason = "listen", event.reason
                return result
            elif isinstance(event, ResponseCreated) and not created:
                result.response_id, created = event.response.id, True
            elif not created or _response_id_of(event) != result.response_id:
                continue
            elif isinstance(event, ResponseDone):
                details = event.response.status_details
                result.status = event.response.status
                result.status_reason = details.reason if details is not None else None
                result.transcript = "".join(text_parts)
                result.audio = b"".join(audio_parts)
                return result
            elif isinstance(event, ResponseOutputAudioDelta):
                result.item_id = event.item_id
                if result.time_to_first_audio_s is None:
                    result.time_to_first_audio_s = at - started
                audio_parts.append(event.delta)
            elif isinstance(event, ResponseOutputAudioTranscriptDelta | ResponseOutputTextDelta):
                text_parts.append(event.delta)
            elif isinstance(event, ResponseOutputAudioTranscriptDone) and event.transcript:
                text_parts[:] = [event.transcript]

    # --- internals ----------------------------------------------------------------------

    async def _wait(
        self,
        matches: Callable[[ServerEventT], bool],
        description: str,
        timeout: float,
        event_id: str | None,
        errors_raise: bool = True,
    ) -> ServerEventT:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            event, _ = await self._next(deadline, description)
            if matches(event):
                return event
            if errors_raise and isinstance(event, Error) and _answers(event, event_id):
                raise ServerError(event.error)

    async def _next(
        self, deadline: float | None, description: str = "an event"
    ) -> tuple[ServerEventT, float]:
        """The next queued event and its arrival (`time.monotonic()`); `deadline` is on
        the running loop's clock."""
        if self._closed is not None and self._queue.empty():
            raise self._closed
        try:
            if deadline is None:
                item = await self._queue.get()
            else:
                async with asyncio.timeout_at(deadline):
                    item = await self._queue.get()
        except TimeoutError:
            raise TimeoutError(f"timed out waiting for {description}") from None
        if item is _CLOSED:
            assert self._closed is not None
            self._queue.put_nowait(_CLOSED)  # every later wait sees the close too
            raise self._closed
        assert isinstance(item, tuple)
        return item[0], item[1]

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
        try:
            async for message in self._ws:
                at = time.monotonic()
                if self.lifecycle is not None:
                    await self._run(self.lifecycle.server_text(message, _now_ms()))
                event = self._decode(message)
                if event is None:
                    continue
                if isinstance(event, SessionCreated | SessionUpdated):
                    self.session = event.session
                self._track_resume(event)
                self.history.append(event)
                self._queue.put_nowait((event, at))
            self._closed = ConnectionLost(
                f"the connection closed (code {self._ws.close_code})",
                code=self._ws.close_code,
                reason=self._ws.close_reason or "",
            )
        except ConnectionClosed as exc:
            self._closed = _lost(exc)
        except ConnectionLost as exc:  # the state machines' answer found the socket closed
            self._closed = exc
        finally:
            if self._closed is None:
                self._closed = ConnectionLost("the client closed the connection")
            self._queue.put_nowait(_CLOSED)

    def _track_resume(self, event: ServerEventT) -> None:
        if isinstance(event, SessionCreated) and event.resume_token is not None:
            self.resume_state = ResumeState(event.session.id, event.resume_token)
        elif isinstance(event, SessionResumed) and self.resume_state is not None:
            self.resume_state.resume_token = event.resume_token
        seq = event.server_event_seq
        if seq is not None and self.resume_state is not None:
            state = self.resume_state
            state.last_server_event_seq = max(state.last_server_event_seq, seq)

    # --- the client state machines (opt-in) ---------------------------------------------

    async def hold_to_talk(self, pcm16: bytes, *, chunk_ms: int = 20, muted: bool = False) -> None:
        """One push-to-talk hold through the client machines: press, stream, release.

        A muted or empty hold sends no commit (B20); otherwise the release commits with the
        hold's own event id and the watchdog is armed until its reply ends (B23).
        """
        lifecycle = self._require_lifecycle()
        await self._run(lifecycle.set_muted(muted, _now_ms()))
        await self._run(lifecycle.press(_now_ms()))
        step = chunk_ms * 32  # 16 kHz pcm16
        for start in range(0, len(pcm16) - len(pcm16) % 2, step):
            chunk = pcm16[start : start + step]
            encoded = base64.b64encode(chunk).decode()
            await self._run(lifecycle.mic_chunk(encoded, len(chunk) // 2, _now_ms()))
        await self._run(lifecycle.release(_now_ms()))

    def _require_lifecycle(self) -> ClientProtocol:
        if self.lifecycle is None:
            raise RuntimeError("connect with mode='ptt' or mode='vad' to use the client machines")
        return self.lifecycle

    async def _run(self, outputs: list[dict[str, Any]]) -> None:
        """Carry out what the client machines ask for, in order (a headless host)."""
        lifecycle = self.lifecycle
        assert lifecycle is not None
        pending = list(outputs)
        while pending:
            output = pending.pop(0)
            kind = output["kind"]
            if kind == "send":
                await self.send_raw(msgspec.json.encode(output["event"]).decode())
            elif kind == "play":
                rid = output["response_id"]
                first = rid not in self._played_ms
                audio_ms = len(base64.b64decode(output["audio"])) / 2 / PLAYBACK_RATE_HZ * 1000
                self._played_ms[rid] = self._played_ms.get(rid, 0.0) + audio_ms
                if first:
                    pending += lifecycle.playback_started(rid, _now_ms())
            elif kind == "drain":
                rid = output["response_id"]
                played = self._played_ms.pop(rid, 0.0)
                pending += lifecycle.playback_drained(rid, played, _now_ms())
            elif kind == "clear":
                for rid in (
                    [output["response_id"]] if output.get("response_id") else list(self._played_ms)
                ):
                    played = self._played_ms.pop(rid, 0.0)
                    pending += lifecycle.playback_stopped(rid, played, _now_ms())
            elif kind == "close":
                await self._ws.close()

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


def _now_ms() -> float:
    return time.monotonic() * 1000


def _type_of(event: ServerEventT) -> str:
    """The wire `type` of a decoded event (its msgspec tag)."""
    return str(type(event).__struct_config__.tag)


def _answers(error: Error, event_id: str | None) -> bool:
    """Whether an `error` event may answer the client event `event_id` (None: any)."""
    return event_id is None or error.error.event_id in (None, event_id)


def _response_id_of(event: ServerEventT) -> str | None:
    """The response an event belongs to, if any."""
    if isinstance(event, ResponseCreated | ResponseDone):
        return event.response.id
    response_id = getattr(event, "response_id", None)
    return response_id if isinstance(response_id, str) else None


def _lost(exc: ConnectionClosed) -> ConnectionLost:
    frame = exc.rcvd or exc.sent
    code = frame.code if frame is not None else None
    reason = frame.reason if frame is not None else ""
    return ConnectionLost(f"connection closed: {exc}", code=code, reason=reason)
