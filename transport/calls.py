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

This module holds the endpoints (`POST /v1/realtime/calls`, its hang-up) and the resume
of a call; the call's parts are each in their own module: its offer
(`transport/call_offer.py`), its channel to the session (`transport/call_channel.py`), the
live calls of a worker (`transport/call_registry.py`), its sidebands
(`transport/call_sideband.py`), its peer (`transport/call_peer.py`) and media
(`transport/call_media.py`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import TYPE_CHECKING, Any

import anyio
from starlette.responses import JSONResponse, Response

from runtime.channel import ChannelClosed
from spec.error_events import refusal_event
from spec.errors import ErrorCode, ResumeExpected, ResumeRefused
from spec.events import SessionResume
from transport.access_policy import handshake_refusal
from transport.call_channel import CallChannel
from transport.call_offer import (
    OfferRefused,
    offer_session_config,
    read_offer,
    refusal_response,
)
from transport.call_registry import Call, new_call_id

if TYPE_CHECKING:
    from starlette.requests import Request

    from runtime.host import SessionHost
    from spec.errors import ProtocolError
    from spec.events import ClientEvent
    from spec.limits import Limits
    from transport.call_registry import CallRegistry
    from transport.settings import ServerSettings, WebRtcSettings

__all__ = ["calls_endpoint", "hangup_endpoint"]

log = logging.getLogger("joyduplex.transport")


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
        config = offer_session_config(offer, settings, host)
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
