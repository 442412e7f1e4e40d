"""An audio receiver of a call that hands each packet on as soon as it is whole.

aiortc holds each incoming audio packet until four more have arrived (80 ms), a prefetch
that smooths playback. Neither end of our calls plays through that buffer: the server
feeds the packets to the VAD and the ASR, and the Python clients (`clients.webrtc_call`,
`joyduplex bench --transport webrtc`) record and time them. There the hold is only
latency: on the server, speech_started came about 90 ms later than on the websocket.
Without it a packet still waits for the next one (that is how aiortc knows it is whole);
loss and reordering are handled as before.
"""

from __future__ import annotations

import logging
from typing import Any

from aiortc.jitterbuffer import JitterBuffer

__all__ = ["release_audio_at_once"]

log = logging.getLogger("joyduplex.transport")

_ATTRIBUTE = "_RTCRtpReceiver__jitter_buffer"  # aiortc keeps it private


def release_audio_at_once(peer: Any) -> None:
    """Give the audio receivers of `peer` (an `RTCPeerConnection`) a jitter buffer without
    prefetch. Call it before media flows: after both descriptions are set."""
    for transceiver in peer.getTransceivers():
        if transceiver.kind != "audio":
            continue
        receiver = transceiver.receiver
        current = getattr(receiver, _ATTRIBUTE, None)
        if not isinstance(current, JitterBuffer):  # another aiortc: keep its own
            log.warning("a call's audio keeps aiortc's jitter buffer (no %s here)", _ATTRIBUTE)
            continue
        setattr(receiver, _ATTRIBUTE, JitterBuffer(capacity=current.capacity, prefetch=0))
