"""The WebRTC peer of a call (aiortc): answer an offer, wire its tracks and data channel
to the call's channel, and end the call when the connection fails or goes away.

Imported only when a call comes (`transport/calls.py`), so a server without the
`webrtc` extra still starts and answers calls with 501 `webrtc_unavailable`.

Host candidates: aioice leaves loopback addresses out of the ones it gathers, so a server
and a client on one machine without another interface could never connect. The addresses
of `[webrtc] host_addresses` (loopback by default) are added to what it gathers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import aioice.ice
import aiortc.rtp
import anyio
from aiortc import (
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)

from spec.errors import ErrorCode
from transport.call_jitter import release_audio_at_once
from transport.call_media import audio_level_dbov, camera_appends, microphone_appends
from transport.call_offer import EVENTS_CHANNEL, OfferRefused

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine

    from anyio.abc import TaskGroup

    from transport.settings import WebRtcSettings

__all__ = ["answer", "watch"]

log = logging.getLogger("joyduplex.transport")


class CallChannel(Protocol):
    """What the peer needs of the call's channel (`transport.call_channel.CallChannel`)."""

    call_id: str
    track: Any
    opened: anyio.Event
    ended: anyio.Event

    def open(self, datachannel: Any) -> None: ...
    def on_message(self, data: str | bytes) -> None: ...
    def end(self, reason: str) -> None: ...
    def bind(self, tg: TaskGroup) -> None: ...
    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...
    async def microphone(self, appends: AsyncIterator[bytes]) -> None: ...
    async def camera(self, frames: AsyncIterator[bytes]) -> None: ...


_gather = aioice.ice.get_host_addresses
_extra_addresses: tuple[str, ...] = ()


def _host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    found = _gather(use_ipv4, use_ipv6)
    extra = [
        a
        for a in _extra_addresses
        if a not in found and ((":" in a and use_ipv6) or (":" not in a and use_ipv4))
    ]
    return [*extra, *found]


def _use_host_addresses(addresses: tuple[str, ...]) -> None:
    global _extra_addresses
    _extra_addresses = addresses
    aioice.ice.get_host_addresses = _host_addresses


# aiortc measures every packet it sends with a Python loop over its samples; the same
# number from numpy (transport.call_media.audio_level_dbov)
#: aiortc's own, kept for the test that holds the two equal
AIORTC_AUDIO_LEVEL = aiortc.rtp.compute_audio_level_dbov
aiortc.rtp.compute_audio_level_dbov = audio_level_dbov


def _configuration(settings: WebRtcSettings) -> RTCConfiguration:
    return RTCConfiguration(
        iceServers=[
            RTCIceServer(urls=list(s.urls), username=s.username, credential=s.credential)
            for s in settings.ice_servers
        ]
    )


async def answer(sdp: str, channel: CallChannel, settings: WebRtcSettings) -> tuple[Any, str]:
    """(the peer connection, its SDP answer) for the offer `sdp`; the peer feeds
    `channel`.

    Raises:
        OfferRefused: the offer is not SDP, or offers no audio.
    """
    if "m=audio" not in sdp:
        raise OfferRefused(
            400, ErrorCode.INVALID_OFFER, "the offer has no audio (`m=audio`) section"
        )
    _use_host_addresses(settings.host_addresses)
    peer = RTCPeerConnection(_configuration(settings))
    wire(peer, channel)
    try:
        await peer.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        for transceiver in peer.getTransceivers():
            if transceiver.kind == "audio":
                transceiver.sender.replaceTrack(channel.track)
                transceiver.direction = "sendrecv"
                break
        else:  # pragma: no cover - checked above
            raise ValueError("no audio transceiver")
        await peer.setLocalDescription(await peer.createAnswer())
        release_audio_at_once(peer)
    except Exception as exc:
        await peer.close()
        log.info("a call's offer could not be used: %r", exc)
        raise OfferRefused(
            400, ErrorCode.INVALID_OFFER, f"the offer cannot be used: {exc}"
        ) from None
    return peer, peer.localDescription.sdp


def wire(peer: Any, channel: CallChannel) -> None:
    """The peer's tracks and data channel to `channel`; every task it starts ends with
    the track or the call."""

    def _datachannel(datachannel: Any) -> None:
        if datachannel.label != EVENTS_CHANNEL:
            log.info("call %s: ignored a data channel `%s`", channel.call_id, datachannel.label)
            return

        def _open() -> None:
            channel.open(datachannel)

        if datachannel.readyState == "open":
            _open()
        else:
            datachannel.on("open", _open)
        datachannel.on("message", channel.on_message)
        datachannel.on("close", lambda: channel.end("the data channel closed"))

    def _track(track: Any) -> None:
        if track.kind == "audio":
            channel.spawn(channel.microphone(microphone_appends(track)))
        elif track.kind == "video":
            channel.spawn(channel.camera(camera_appends(track)))

    def _state() -> None:
        state = peer.connectionState
        if state in ("failed", "closed"):
            channel.end(f"the connection {state}")

    peer.on("datachannel", _datachannel)
    peer.on("track", _track)
    peer.on("connectionstatechange", _state)


async def watch(peer: Any, channel: CallChannel, setup_timeout_s: float) -> None:
    """End the call when its data channel has not opened within `setup_timeout_s`
    (ICE never completed, or the peer never opened it); then run the call's media
    tasks until the call ends."""
    async with anyio.create_task_group() as tg:
        channel.bind(tg)
        with anyio.move_on_after(setup_timeout_s) as scope:
            await channel.opened.wait()
        if scope.cancelled_caught and not channel.opened.is_set():
            channel.end(f"its data channel did not open within {setup_timeout_s:g} s")
        await channel.ended.wait()
        tg.cancel_scope.cancel()
