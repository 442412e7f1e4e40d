"""A WebRTC call as its session's channel (`CallChannel`): events from and to the
`oai-events` data channel and the call's sidebands, appends from the microphone and camera
tracks, reply audio to the paced track (`transport/call_media.py`).

The call reports the reply audio its track sent to the session as played before each
microphone packet, and keeps those reports' answers off the wire; its
`output_audio_buffer.started` / `.stopped` events come from its `OutputAudioBuffer`
machine (decision D42, `transport/calls.py`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from core.connection_budget import ConnectionBudget
from core.outbox import Outbox
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from runtime.channel import ChannelClosed
from spec.errors import InvalidEvent
from spec.events import (
    InputAudioBufferAppend,
    OutputAudioBufferCleared,
    PlaybackAck,
    PlaybackAcknowledged,
    ResponseDone,
    ResponseOutputAudioDelta,
    SessionCreated,
    SessionResumed,
    SessionUpdated,
)
from transport.codec import decode_client_event, encode_server_event, refused_event_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine

    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from starlette.websockets import WebSocket

    from spec.errors import ProtocolError
    from spec.events import ClientEvent, ServerEvent
    from spec.limits import Limits

__all__ = ["CallChannel", "Sideband"]

log = logging.getLogger("joyduplex.transport")

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
        self.accept(data, self._budget)

    def accept(self, data: str | bytes, budget: ConnectionBudget | None) -> None:
        """A client event from the data channel or a sideband, charged to `budget`."""
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
        if isinstance(event, ResponseDone):
            self.track.settle()  # a quiet track has played the response out: it stops

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
