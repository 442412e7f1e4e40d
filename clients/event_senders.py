"""`ClientEventSender`: the typed senders of `DuplexClient`, one client event each, every
one returning the event id it used (from the connection's one allocator).

A base class: the socket, the reader and the requests that wait for an answer
(`update_session`, the resume) are `clients.duplex_client`'s; a sender only needs `send_raw`.
"""

from __future__ import annotations

import abc
import time
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from spec.events import (
    ClientEventT,
    InputAudioBufferAppend,
    InputAudioBufferCommit,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    ResponseCreateParams,
    SessionClose,
)
from transport.codec import encode_client_event

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.statemachines.client_outbox import EventIds

__all__ = ["ClientEventSender"]


class ClientEventSender(abc.ABC):
    """Sends typed client events over `send_raw`; `event_ids` mints their ids."""

    event_ids: EventIds
    #: when the last `commit` / `create_response` was sent (`time.monotonic()`)
    _turn_started: float | None

    @abc.abstractmethod
    async def send_raw(self, data: str | bytes) -> None:
        """Send one text frame as it is.

        Raises:
            ConnectionLost: the socket is closed.
        """

    def next_event_id(self) -> str:
        """The connection's next client event id (`evt_<n>`)."""
        return self.event_ids.next()

    async def send(self, event: ClientEventT) -> None:
        """Send one typed client event as it is.

        Raises:
            ConnectionLost: the socket is closed.
        """
        await self.send_raw(encode_client_event(event).decode())

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
                    await anyio.sleep(delay)
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
