"""The typed channel a session runs over.

The transport adapts its websocket to this (decoding frames into client events or typed
decode errors, encoding server events); tests use an in-memory pair. The runtime never
sees raw frames, so it needs no codec.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import anyio

from spec.errors import ProtocolError
from spec.events import ClientEvent, ServerEvent

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["Channel", "ChannelClosed", "MemoryChannel", "memory_channel_pair"]


class ChannelClosed(Exception):
    """The peer went away while we were sending."""


class Channel(Protocol):
    #: the close code the peer sent, once it has gone (None: no close frame, or not yet)
    peer_close_code: int | None

    async def receive(self) -> ClientEvent | ProtocolError | None:
        """The next client event, a typed decode error, or None once the peer has gone."""
        ...

    async def send(self, event: ServerEvent) -> None:
        """Send one server event; raises ChannelClosed if the peer has gone."""
        ...

    async def close(self, code: int, reason: str = "") -> None: ...


class MemoryChannel:
    """The server end of an in-memory channel (tests, benchmarks)."""

    def __init__(
        self,
        inbox: MemoryObjectReceiveStream[ClientEvent | ProtocolError],
        outbox: MemoryObjectSendStream[ServerEvent],
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self.close_code: int | None = None
        self.close_reason = ""
        self.peer_close_code: int | None = None

    async def receive(self) -> ClientEvent | ProtocolError | None:
        try:
            return await self._inbox.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None

    async def send(self, event: ServerEvent) -> None:
        try:
            await self._outbox.send(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ChannelClosed from exc

    async def close(self, code: int, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
        await self._outbox.aclose()
        await self._inbox.aclose()


def memory_channel_pair(
    buffer: float = math.inf,
) -> tuple[
    MemoryChannel,
    MemoryObjectSendStream[ClientEvent | ProtocolError],
    MemoryObjectReceiveStream[ServerEvent],
]:
    """(server channel, client sender, client receiver); `buffer` bounds server->client."""
    c_send, c_recv = anyio.create_memory_object_stream[ClientEvent | ProtocolError](math.inf)
    s_send, s_recv = anyio.create_memory_object_stream[ServerEvent](buffer)
    return MemoryChannel(c_recv, s_send), c_send, s_recv
