"""WebRTC calls: `POST /v1/realtime/calls`, as OpenAI's GA Realtime API defines it.

A call is a session whose media ride WebRTC and whose events ride the `oai-events` data
channel (JSON, the same events as the websocket). It is served by the same
`SessionProtocol` through the same runner: `CallChannel` is only another `Channel`.

Order of a call: the origin and the key are checked (`transport/access_policy.py`, the
key as `Authorization: Bearer`, as OpenAI's SDKs send it) and the session's admission
(`SessionHost.refusal`), all before any media is set up; then the offer is read
(`application/sdp`, or `multipart/form-data` with `sdp` and an optional `session` object,
validated as a `session.update` would be), answered `201` with the SDP answer and a
`Location: /v1/realtime/calls/{call_id}`. A refusal is an HTTP status whose JSON body is
the wire's `error` object: 400 `invalid_offer` (or the session's own code), 401, 403,
503 `resource_exhausted`.

What differs from the websocket (decision D42):
- the microphone is the offer's audio track (Opus), made into 16 kHz appends; the camera is
  its video track, sampled at the web client's cadence (`transport/call_media.py`);
- reply audio goes out on the answer's audio track, paced by the server in real time, and
  never as `response.output_audio.delta` on the data channel. What was sent is what was
  played: the call reports it to the session as its playback position before each
  microphone packet, so a barge-in truncates to the audio actually sent, and those
  internal reports get no `playback.acknowledged` echo;
- `output_audio_buffer.started` / `.stopped` are the call's own events, decided by its
  `OutputAudioBuffer` machine; `.cleared` and the client's `output_audio_buffer.clear`
  are the session's, as on the websocket.

A call whose ICE fails, whose data channel does not open within `[webrtc] setup_timeout_s`
or whose peer goes away ends its session (the slot is freed) and closes the peer
connection; `POST /v1/realtime/calls/{call_id}/hangup` ends it on purpose.

Resume (B42, docs/session-semantics.md 10.3): a call placed with `?resumable=1` is a
resumable session (7.1): when its peer goes away the session is detached, not ended, and
a new call placed with `?resume=1` (and `session_id=<id>` for a balancer) opens no
session: the first event on its data channel must be `session.resume`, and the session
then goes on over the new call (replay on its data channel, reply audio on its track),
and the sidebands of the call it took over follow it (they end with the session). A
resume call that reaches another worker than its session's is relayed there (D39).
aiortc has no ICE restart, so a new call is how a call survives a network change. A websocket to
`/v1/realtime?call_id=...` (sideband, `attach_sideband`) sees the call's events from then
on and may send it client events.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from starlette.responses import JSONResponse, Response

from core.connection_budget import ConnectionBudget
from core.outbox import Outbox
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from runtime.channel import ChannelClosed
from spec.error_events import refusal_event
from spec.errors import (
    ErrorCode,
    InvalidEvent,
    InvalidSessionConfig,
    ProtocolError,
    ResumeExpected,
    ResumeRefused,
    UnknownCall,
)
from spec.events import (
    InputAudioBufferAppend,
    OutputAudioBufferCleared,
    PlaybackAck,
    PlaybackAcknowledged,
    ResponseDone,
    ResponseOutputAudioDelta,
    SessionCreated,
    SessionResume,
    SessionResumed,
    SessionUpdated,
)
from spec.session_config import validate_session
from transport.access_policy import handshake_refusal
from transport.call_offer import EVENTS_CHANNEL, OfferRefused, refusal_response
from transport.codec import decode_client_event, encode_server_event, refused_event_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine

    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from starlette.datastructures import UploadFile
    from starlette.requests import Request
    from starlette.websockets import WebSocket

    from runtime.host import SessionHost
    from spec.events import ClientEvent, ServerEvent
    from spec.limits import Limits
    from spec.session_config import SessionConfig
    from transport.settings import ServerSettings, WebRtcSettings

__all__ = [
    "EVENTS_CHANNEL",
    "CallChannel",
    "CallRegistry",
    "attach_sideband",
    "calls_endpoint",
    "hangup_endpoint",
]

log = logging.getLogger("joyduplex.transport")

#: largest offer read (a browser's offer is a few KB)
MAX_OFFER_BYTES = 64 * 1024
#: client events (data channel, microphone, camera, sidebands) queued for the session;
#: a data channel peer that outruns it is closed like a flood
_INBOX_EVENTS = 1024
#: server events held while the data channel is not open yet
_HELD_EVENTS = 512
#: bytes the data channel may hold unsent before its peer counts as gone (slow consumer)
_MAX_BUFFERED_BYTES = 8 * 1024 * 1024
#: the prefix of the call's own event ids (its session's are `event_N`)
_CALL_EVENT_PREFIX = "event_call"
#: the prefix of the playback reports a call makes for its session
_ACK_PREFIX = "call_ack"


@dataclass(frozen=True, slots=True)
class CallOffer:
    sdp: str
    session: dict[str, Any] | None


async def read_offer(request: Request) -> CallOffer:
    """The offer of a call request: `application/sdp`, or a form with `sdp` and an
    optional `session` (JSON).

    Raises:
        OfferRefused: what is wrong with it (400 `invalid_offer`, 413).
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_OFFER_BYTES:
        raise OfferRefused(
            413, ErrorCode.INVALID_OFFER, f"an offer is at most {MAX_OFFER_BYTES} bytes"
        )
    if ctype == "application/sdp":
        body = await request.body()
        if len(body) > MAX_OFFER_BYTES:
            raise OfferRefused(
                413, ErrorCode.INVALID_OFFER, f"an offer is at most {MAX_OFFER_BYTES} bytes"
            )
        return CallOffer(_text(body, "the body"), None)
    if ctype == "multipart/form-data":
        async with request.form(max_files=2, max_fields=4, max_part_size=MAX_OFFER_BYTES) as form:
            sdp = await _form_text(form.get("sdp"), "sdp")
            if sdp is None:
                raise OfferRefused(400, ErrorCode.INVALID_OFFER, "the form has no `sdp` part")
            raw = await _form_text(form.get("session"), "session")
        session = None
        if raw is not None:
            try:
                session = json.loads(raw)
            except ValueError:
                raise OfferRefused(
                    400, ErrorCode.INVALID_OFFER, "the `session` part is not JSON"
                ) from None
            if not isinstance(session, dict):
                raise OfferRefused(
                    400, ErrorCode.INVALID_OFFER, "the `session` part is not an object"
                )
        return CallOffer(sdp, session)
    raise OfferRefused(
        400,
        ErrorCode.INVALID_OFFER,
        f"an offer is `application/sdp` or `multipart/form-data`, not `{ctype or 'none'}`",
    )


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise OfferRefused(400, ErrorCode.INVALID_OFFER, f"{what} is not UTF-8") from None


async def _form_text(value: UploadFile | str | None, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _text(await value.read(), f"the `{what}` part")


def _session_config(offer: CallOffer, settings: ServerSettings, host: SessionHost) -> SessionConfig:
    """The call's session configuration: the server's defaults, then the offer's session
    object, checked as the first `session.update` would be."""
    config = settings.session_defaults
    if offer.session is None:
        return config
    patch = {k: v for k, v in offer.session.items() if k != "type"}  # `realtime`: implied
    backend = host.backend
    try:
        return validate_session(
            patch,
            config,
            voices=backend.tts.voices if backend is not None else None,
            languages=backend.asr.languages if backend is not None and backend.asr else None,
        )
    except InvalidSessionConfig as exc:
        where = f"session.{exc.param}" if exc.param else "session"
        raise OfferRefused(400, exc.code, f"{where}: {exc.message}") from None


class Sideband:
    """A websocket attached to a live call: it sees the call's events from the moment it
    attached, and its client events go to the call's session."""

    def __init__(self, websocket: WebSocket, budget: ConnectionBudget | None) -> None:
        self.websocket = websocket
        self.budget = budget
        self.outbox: MemoryObjectSendStream[str]
        self.inbox: MemoryObjectReceiveStream[str]
        self.outbox, self.inbox = anyio.create_memory_object_stream[str](_HELD_EVENTS)


class CallChannel:
    """A WebRTC call as the session's channel: events from and to the data channel (and
    any sideband), appends from the microphone and camera tracks, reply audio to the
    paced track."""

    peer_close_code: int | None = None

    def __init__(self, call_id: str, limits: Limits) -> None:
        from transport.call_media import ReplyTrack

        self.call_id = call_id
        self.max_bytes = limits.max_event_bytes
        self.limits = limits
        self._budget = ConnectionBudget.from_limits(limits, anyio.current_time())
        send, receive = anyio.create_memory_object_stream[Any](_INBOX_EVENTS)
        self._inbox_send, self._inbox = send, receive
        self._outbox = Outbox(event_prefix=_CALL_EVENT_PREFIX)
        self.buffer = OutputAudioBuffer(self._outbox)
        self.track = ReplyTrack(self.buffer, self._flush_call_events)
        self._datachannel: Any = None
        self._held: list[str] = []
        self._acks = 0
        self._output_format = ("pcm16", 24_000)
        self.sidebands: list[Sideband] = []
        #: set when the call's session ended; a call that resumes the session shares it
        #: (and the sidebands), so a sideband follows a resumable session from call to call
        self.session_over = anyio.Event()
        #: the call that resumed this one's session, if any (a sideband's events go there)
        self.successor: CallChannel | None = None
        self.on_resumed: Any = None
        self.opened = anyio.Event()
        self.ended = anyio.Event()
        self.end_reason = ""
        self._tg: TaskGroup | None = None
        self._pending: list[Coroutine[Any, Any, None]] = []

    # --- the call's media tasks ---------------------------------------------------------

    def bind(self, tg: TaskGroup) -> None:
        """Run the call's media tasks in `tg` (those that came before it, too)."""
        self._tg = tg
        pending, self._pending = self._pending, []
        for coro in pending:
            tg.start_soon(_await, coro)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` (a track's pump) until it or the call ends."""
        if self._tg is None:
            self._pending.append(coro)
        else:
            self._tg.start_soon(_await, coro)

    # --- the data channel --------------------------------------------------------------

    def open(self, datachannel: Any) -> None:
        """The `oai-events` data channel opened: what was held goes out, in order."""
        self._datachannel = datachannel
        self.opened.set()
        held, self._held = self._held, []
        for text in held:
            self._send_text(text)

    def on_message(self, data: str | bytes) -> None:
        """A data channel message: charged to the call's budget, decoded, queued."""
        self._accept(data, self._budget)

    def _accept(self, data: str | bytes, budget: ConnectionBudget | None) -> None:
        if self.ended.is_set():
            return
        item: ClientEvent | ProtocolError
        refusal = None
        if budget is not None and budget.enabled:
            refusal = budget.refusal(len(data), anyio.current_time())
            if budget.abusive:
                self.end(
                    f"rate limit: {budget.max_refusals} events refused within "
                    f"{budget.refusal_window_s:g} s"
                )
                return
        if refusal is not None:
            refusal.event_id = refused_event_id(data)
            item = refusal
        else:
            try:
                item = decode_client_event(data, max_bytes=self.max_bytes)
            except InvalidEvent as exc:
                item = exc
        try:
            self._inbox_send.send_nowait(item)
        except anyio.WouldBlock:
            self.end("the peer sent events faster than its session handles them")

    # --- media -------------------------------------------------------------------------

    async def put(self, event: ClientEvent) -> None:
        """An event the call makes for its session (an append, a playback report)."""
        if not self.ended.is_set():
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._inbox_send.send(event)

    async def microphone(self, appends: AsyncIterator[bytes]) -> None:
        async for pcm in appends:
            due = self.buffer.ack_due()
            if due is not None:
                # AMBIGUITY (docs/session-semantics.md, decision D42): on a call the
                # server plays the reply, so it reports the audio it sent as played
                self._acks += 1
                response_id, played_ms = due
                await self.put(
                    PlaybackAck(
                        event_id=f"{_ACK_PREFIX}_{self._acks}",
                        played_ms=played_ms,
                        response_id=response_id,
                    )
                )
            await self.put(InputAudioBufferAppend(audio=pcm, format="pcm16", sample_rate_hz=16_000))

    async def camera(self, frames: AsyncIterator[bytes]) -> None:
        async for jpeg in frames:
            await self.put(InputAudioBufferAppend(video_frames=[jpeg]))

    # --- Channel ----------------------------------------------------------------------

    async def receive(self) -> ClientEvent | ProtocolError | None:
        await anyio.lowlevel.checkpoint()  # fairness, as the websocket channel
        if self.ended.is_set():
            return None
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def _ended() -> None:
                    await self.ended.wait()
                    scope.cancel()

                tg.start_soon(_ended)
                try:
                    item = await self._inbox.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    item = None
                tg.cancel_scope.cancel()
                return item  # type: ignore[no-any-return]
        return None

    async def send(self, event: ServerEvent) -> None:
        if self.ended.is_set():
            raise ChannelClosed
        if isinstance(event, ResponseOutputAudioDelta):
            self._play(event)
            return
        if isinstance(event, PlaybackAcknowledged):
            return  # the answer to the call's own playback report
        if _answers_call_ack(event):
            log.debug("call %s: a playback report was refused: %s", self.call_id, event)
            return
        if isinstance(event, SessionResumed) and self.on_resumed is not None:
            self.on_resumed()  # the session is this call's now: take over its sidebands
        if isinstance(event, (SessionCreated, SessionUpdated)):
            self._output_format = _output_format(event)
        elif isinstance(event, ResponseDone):
            self.buffer.finished(event.response.id)
        elif isinstance(event, OutputAudioBufferCleared):
            if self.buffer.cleared(event.response_id):
                self.track.drop(event.response_id)
            self._flush_call_events()
        self._forward(encode_server_event(event).decode())  # type: ignore[arg-type]

    async def close(self, code: int, reason: str = "") -> None:
        self.end(reason or f"closed {code}")

    # --- helpers -----------------------------------------------------------------------

    def end(self, reason: str) -> None:
        if not self.ended.is_set():
            self.end_reason = reason
            log.info("call %s ended: %s", self.call_id, reason)
            self.ended.set()
            self.track.stop()
            self._inbox_send.close()
            self._inbox.close()
            for coro in self._pending:
                coro.close()
            self._pending = []

    def _play(self, event: ResponseOutputAudioDelta) -> None:
        from transport.call_media import reply_pcm

        fmt, rate = self._output_format
        samples = reply_pcm(event.delta, fmt, rate)
        self.buffer.queued(event.response_id, samples.size * 1000 / 48_000)
        self.track.enqueue(event.response_id, samples)

    def _flush_call_events(self) -> None:
        for item in self._outbox.drain():
            self._forward(encode_server_event(item).decode())  # type: ignore[arg-type]

    def _forward(self, text: str) -> None:
        self._send_text(text)
        for sideband in list(self.sidebands):
            try:
                sideband.outbox.send_nowait(text)
            except anyio.WouldBlock:
                log.warning("call %s: a sideband that does not read was detached", self.call_id)
                self.sidebands.remove(sideband)
                sideband.outbox.close()

    def _send_text(self, text: str) -> None:
        dc = self._datachannel
        if dc is None:
            if len(self._held) >= _HELD_EVENTS:
                self.end("the data channel never opened and the events before it overflowed")
                return
            self._held.append(text)
            return
        if dc.readyState != "open":
            self.end("the data channel closed")
            return
        if dc.bufferedAmount > _MAX_BUFFERED_BYTES:
            self.end("the peer does not read its events (slow consumer)")
            return
        dc.send(text)


async def _await(coro: Coroutine[Any, Any, None]) -> None:
    await coro


def _answers_call_ack(event: ServerEvent) -> bool:
    error = getattr(event, "error", None)
    source = getattr(error, "event_id", None)
    return isinstance(source, str) and source.startswith(f"{_ACK_PREFIX}_")


def _output_format(event: SessionCreated | SessionUpdated) -> tuple[str, int]:
    fmt = event.session.audio.get("output", {}).get("format", {})
    if isinstance(fmt, dict):
        name = {"audio/pcm": "pcm16"}.get(fmt.get("type", "audio/pcm"), fmt.get("type"))
        return str(name), int(fmt.get("rate") or 24_000)
    return "pcm16", 24_000


@dataclass
class Call:
    id: str
    channel: CallChannel
    peer: Any
    session_id: str


def new_call_id(session_id: str) -> str:
    """`rtc_<the session id's own part>_<random>`: the id names the worker process that
    holds the call (as a session id does, D39), so that a sideband that reaches another
    worker is relayed to it; the random part keeps it unguessable."""
    return f"rtc_{session_id.removeprefix('sess_')}_{secrets.token_hex(8)}"


def call_session_id(call_id: str) -> str | None:
    """The session id a call id names (None: not a call id this server issues)."""
    if not call_id.startswith("rtc_") or "_" not in call_id[4:]:
        return None
    return "sess_" + call_id[4:].rsplit("_", 1)[0]


class CallRegistry:
    """The live calls of this worker process, and the task group their sessions run in
    (the app's lifespan runs it)."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        #: the call serving each resumable session now (B42)
        self.serving: dict[str, CallChannel] = {}
        self._tg: TaskGroup | None = None
        self._started = anyio.Event()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._started.set()
            try:
                await anyio.sleep_forever()
            finally:
                for call in list(self.calls.values()):
                    call.channel.end("the server is stopping")

    def start(self, call: Call, serve: Any) -> None:
        if self._tg is None:
            raise RuntimeError("the call registry is not running")
        self.calls[call.id] = call
        self._tg.start_soon(self._run, call, serve)

    async def _run(self, call: Call, serve: Any) -> None:
        try:
            await serve()
        finally:
            self.calls.pop(call.id, None)
            call.channel.end("its session ended")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await call.peer.close()


def _webrtc_settings(request: Request) -> WebRtcSettings:
    settings: ServerSettings = request.app.state.settings
    return settings.webrtc


async def calls_endpoint(request: Request) -> Response:
    """`POST /v1/realtime/calls`: answer an offer and start its session."""
    host: SessionHost = request.app.state.host
    settings: ServerSettings = request.app.state.settings
    denial = handshake_refusal(
        api_key=settings.api_key,
        allowed_origins=settings.allowed_origins,
        headers=request.headers,
        subprotocols=(),
        query={},  # a call's key is a header, never a query (it would be logged)
    )
    if denial is not None:
        host.metrics.session_refused()
        log.info("refused a call: %d %s", denial.status, denial.code.value)
        return JSONResponse(denial.body(), status_code=denial.status, headers=denial.headers())
    query = request.query_params
    resume_only = query.get("resume", "").lower() in _YES
    if resume_only:
        # as a websocket resume (D39's relay): a resume call that reaches a worker that
        # does not hold its session is relayed there, offer and answer
        relayed = await _relay_resume_call(request, host, query.get("session_id", ""))
        if relayed is not None:
            return relayed
    refusal = None if resume_only else host.refusal()  # a resumed session has its slot
    if refusal is not None:
        host.metrics.session_refused()
        log.info("refused a call: %s", refusal.message)
        return refusal_response(503, refusal.code, refusal.message)
    try:
        offer = await read_offer(request)
        config = _session_config(offer, settings, host)
    except OfferRefused as exc:
        log.info("refused a call's offer: %d %s: %s", exc.status, exc.code.value, exc.message)
        return exc.response()
    try:
        from transport import call_peer
    except ImportError as exc:  # the `webrtc` extra is not installed
        return refusal_response(
            501,
            ErrorCode.WEBRTC_UNAVAILABLE,
            f"this server cannot take WebRTC calls: install joyduplex[webrtc] ({exc.name})",
        )
    registry: CallRegistry = request.app.state.calls
    # a resume names the session it resumes (its call id then routes a sideband as the
    # session's own would); only the token of its `session.resume` attaches it
    session_id = query.get("session_id", "") if resume_only else ""
    session_id = session_id or host.new_session_id()
    call_id = new_call_id(session_id)
    channel = CallChannel(call_id, settings.limits)
    try:
        peer, answer = await call_peer.answer(offer.sdp, channel, _webrtc_settings(request))
    except OfferRefused as exc:
        channel.end("its offer was refused")
        log.info("refused a call's offer: %s", exc.message)
        return exc.response()
    setup_timeout_s = _webrtc_settings(request).setup_timeout_s
    if resume_only:
        resuming = Call(call_id, channel, peer, session_id)

        async def serve_resume() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch_then_close, peer, channel, setup_timeout_s)
                try:
                    await _resume_call(host, channel, settings.limits, registry)
                finally:
                    tg.cancel_scope.cancel()

        registry.start(resuming, serve_resume)
        log.info("call %s opened to resume session %s", call_id, session_id)
        return _answered(answer, call_id)
    # the slot is taken before the answer leaves: another call or socket may have taken
    # the last one meanwhile, and offers answered together would all pass a mere check
    refusal = host.reserve(session_id)
    if refusal is not None:
        host.metrics.session_refused()
        log.info("refused a call: %s", refusal.message)
        channel.end("refused: no slot left")
        with anyio.CancelScope(shield=True):
            await peer.close()
        return refusal_response(503, refusal.code, refusal.message)
    call = Call(call_id, channel, peer, session_id)

    resumable = query.get("resumable", "").lower() in _YES or settings.duplex

    if resumable:
        registry.serving[session_id] = channel

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_then_close, peer, channel, setup_timeout_s)
            try:
                await host.serve(channel, config=config, session_id=session_id, resumable=resumable)
            except Exception:
                log.exception("call %s: its session crashed", call_id)
            finally:
                tg.cancel_scope.cancel()
                registry.serving.pop(session_id, None)
                channel.session_over.set()  # its sidebands end with it

    registry.start(call, serve)
    log.info("call %s opened (session %s)", call_id, session_id)
    return _answered(answer, call_id)


_YES = ("1", "true", "on", "yes")


def _answered(answer: str, call_id: str) -> Response:
    return Response(
        answer,
        status_code=201,
        media_type="application/sdp",
        headers={"Location": f"/v1/realtime/calls/{call_id}"},
    )


async def _watch_then_close(peer: Any, channel: CallChannel, setup_timeout_s: float) -> None:
    """Run the call's media until it ends, then close its peer connection at once: a
    resumable session outlives its call (detached), and the dead peer must not wait for
    the session's end to be closed."""
    from transport import call_peer

    try:
        await call_peer.watch(peer, channel, setup_timeout_s)
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await peer.close()


async def _resume_call(
    host: SessionHost, channel: CallChannel, limits: Limits, registry: CallRegistry
) -> None:
    """A call placed to resume: its first event must be `session.resume`; then it carries
    that session until the session leaves it, and the sidebands of the call it took over
    follow it. A refusal is an `error` event on its data channel, then the call ends."""
    first: ClientEvent | ProtocolError | None = None
    with anyio.move_on_after(limits.first_event_timeout_s or math.inf):
        first = await channel.receive()
    if first is None:
        channel.end("no first event")
        return
    try:
        if not isinstance(first, SessionResume):
            raise ResumeExpected(
                "a resume call (`?resume=1`) must begin with session.resume",
                param="type",
                event_id=getattr(first, "event_id", None),
            )
        session_id = first.session_id

        def took_over() -> None:
            previous = registry.serving.get(session_id)
            if previous is not None and previous is not channel:
                channel.sidebands = previous.sidebands
                channel.session_over = previous.session_over
                previous.successor = channel
            registry.serving[session_id] = channel

        channel.on_resumed = took_over
        await host.resume(channel, first)
    except ResumeRefused as exc:
        exc.event_id = exc.event_id or getattr(first, "event_id", None)
        with contextlib.suppress(ChannelClosed):
            await channel.send(refusal_event(exc))
        with anyio.move_on_after(2.0):  # the peer reads the refusal and hangs up
            await channel.ended.wait()
        channel.end(f"resume refused: {exc.code.value}")


async def _relay_resume_call(
    request: Request, host: SessionHost, session_id: str
) -> Response | None:
    """Hand a resume call whose session lives in another worker process of this server to
    that worker over its Unix socket (D39's relay, for an offer): the owner answers the
    offer, so the call's media and data channel are its own. None: no other worker holds
    the session (this worker answers, `unknown_session` if it has none)."""
    from transport.worker_relay import relay_socket_path

    run_dir = getattr(request.app.state, "run_dir", None)
    owner = host.owner_elsewhere(session_id) if session_id else None
    if owner is None or run_dir is None:
        return None
    body = await request.body()
    forwarded = {
        name: value
        for name, value in request.headers.items()
        if name.lower() in ("host", "authorization", "origin", "content-type")
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in forwarded.items())
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    chunks: list[bytes] = []
    try:
        with anyio.fail_after(30):
            async with await anyio.connect_unix(relay_socket_path(run_dir, owner)) as stream:
                await stream.send(
                    f"POST {target} HTTP/1.1\r\n{head}"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )
                with contextlib.suppress(anyio.EndOfStream):
                    while True:
                        chunks.append(await stream.receive())
    except (OSError, TimeoutError) as exc:
        log.warning("a resume call for %s: worker %d did not take it (%r)", session_id, owner, exc)
        return None
    head_bytes, _, answer = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    keep = {k: v for k, v in headers.items() if k.lower() in ("location", "content-type")}
    host.metrics.resume_event("relayed")
    log.info("a resume call for %s relayed to worker %d", session_id, owner)
    return Response(answer, status_code=status, headers=keep)


def _serving(channel: CallChannel) -> CallChannel:
    """The call that serves `channel`'s session now: itself, or the last that resumed it."""
    while channel.successor is not None:
        channel = channel.successor
    return channel


async def hangup_endpoint(request: Request) -> Response:
    """`POST /v1/realtime/calls/{call_id}/hangup`: end a live call."""
    settings: ServerSettings = request.app.state.settings
    denial = handshake_refusal(
        api_key=settings.api_key,
        allowed_origins=settings.allowed_origins,
        headers=request.headers,
        subprotocols=(),
        query={},
    )
    if denial is not None:
        return JSONResponse(denial.body(), status_code=denial.status, headers=denial.headers())
    registry: CallRegistry = request.app.state.calls
    call = registry.calls.get(request.path_params["call_id"])
    if call is None:
        return refusal_response(
            404, ErrorCode.UNKNOWN_CALL, "no live call of that id on this worker"
        )
    call.channel.peer_close_code = 1000  # a hang-up ends even a resumable session (D28)
    call.channel.end("hung up")
    return Response(status_code=200)


async def _relay_sideband(websocket: WebSocket, call_id: str) -> bool:
    """Carry a sideband whose call lives in another worker process of this server to
    that worker (D39's relay); False when no other worker holds it."""
    from transport.worker_relay import carry_frames, open_worker_socket, relay_socket_path

    host: SessionHost = websocket.app.state.host
    session_id = call_session_id(call_id)
    run_dir = getattr(websocket.app.state, "run_dir", None)
    owner = host.owner_elsewhere(session_id) if session_id is not None else None
    if owner is None or run_dir is None:
        return False
    settings: ServerSettings = websocket.app.state.settings
    query = list(websocket.query_params.multi_items())
    try:
        owner_ws = await open_worker_socket(
            websocket, relay_socket_path(run_dir, owner), query, settings.limits.max_event_bytes
        )
    except Exception as exc:  # the owner did not take it: answered as an unknown call
        log.warning("sideband of call %s: worker %d did not take it (%r)", call_id, owner, exc)
        return False
    log.info("sideband of call %s relayed to worker %d", call_id, owner)
    await carry_frames(websocket, owner_ws)
    return True


async def attach_sideband(websocket: WebSocket, call_id: str) -> None:
    """An accepted websocket that names a live call: copy the call's events to it and
    its events to the call's session until either ends."""
    registry: CallRegistry = websocket.app.state.calls
    settings: ServerSettings = websocket.app.state.settings
    call = registry.calls.get(call_id)
    if call is None and await _relay_sideband(websocket, call_id):
        return
    if call is None:
        from transport.codec import error_event

        exc = UnknownCall(f"no live call `{call_id}` on this worker", param="call_id")
        with contextlib.suppress(Exception):
            await websocket.send_text(
                encode_server_event(error_event(exc, event_id="event_0")).decode()
            )
            await websocket.close(1008, "unknown call")
        return
    budget = ConnectionBudget.from_limits(settings.limits, anyio.current_time())
    sideband = Sideband(websocket, budget if budget.enabled else None)
    channel = call.channel
    channel.sidebands.append(sideband)
    log.info("call %s: a sideband attached", call_id)
    async with anyio.create_task_group() as tg:

        async def events_out() -> None:
            async with sideband.inbox:
                async for text in sideband.inbox:
                    await websocket.send_text(text)
            tg.cancel_scope.cancel()

        async def events_in() -> None:
            with contextlib.suppress(Exception):
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    data = message.get("text")
                    _serving(channel)._accept(
                        data if data is not None else message.get("bytes") or b"", sideband.budget
                    )
            tg.cancel_scope.cancel()

        async def call_ended() -> None:
            # a resumable session outlives its call: the sideband follows it to the call
            # that resumes it (B42), and ends with the session
            await channel.session_over.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(events_out)
        tg.start_soon(events_in)
        tg.start_soon(call_ended)
    with contextlib.suppress(ValueError):
        _serving(channel).sidebands.remove(sideband)
    sideband.outbox.close()
    sideband.inbox.close()
    with contextlib.suppress(Exception):
        await websocket.close(1000, "call ended" if channel.ended.is_set() else "")
    log.info("call %s: a sideband detached", call_id)
