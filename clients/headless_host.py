"""`HeadlessHost`: the host of the shared client state machines (`core.client_protocol`) inside
`DuplexClient` (its `mode=`): it carries out what they ask for as a client with no
speaker, microphone or screen would.

Sends go on the socket; reply audio is "played" the instant it arrives (a headless
speaker), so a response's playback starts with its first chunk and the played cursor of
a drain or a clear is everything received; a `close` closes the socket. On a WebRTC
call (`media="tracks"`) `mute_reply` and `unmute_reply` set `reply_muted`, which the call
client's reply track obeys. The outputs meant for a person or a camera (transcripts,
notices, latencies, watchdog and fence reports, frame captures) have nobody to reach and
are dropped.
"""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

import msgspec

from core.client_protocol import base64_bytes, wire_event
from spec.tables.client_constants import PLAYBACK_RATE_HZ

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from core.client_protocol import ClientProtocol
    from spec.events import ServerEventT

__all__ = ["HeadlessHost"]


def now_ms() -> float:
    """The machines' clock: `time.monotonic()` in milliseconds."""
    return time.monotonic() * 1000


class HeadlessHost:
    """Runs `machines` for one connection; `send_text` puts a text frame on the socket,
    `close` closes it."""

    def __init__(
        self,
        machines: ClientProtocol,
        send_text: Callable[[str], Awaitable[None]],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self.machines = machines
        self._send_text = send_text
        self._close = close
        self._played_ms: dict[str, float] = {}
        #: on a call: the reply gate is closed (`mute_reply`): the track is not heard
        self.reply_muted = False

    async def connected(self) -> None:
        """The socket opened: the machines send the mode's `session.update`."""
        await self.run(self.machines.connected(now_ms()))

    async def server_event(self, event: ServerEventT) -> None:
        """One server event, decoded once by the client and handed over as it is."""
        await self.run(self.machines.server_event(wire_event(event), now_ms()))

    async def hold_to_talk(self, pcm16: bytes, *, chunk_ms: int, muted: bool) -> None:
        """One push-to-talk hold: press, stream 16 kHz pcm16 in `chunk_ms` chunks, release."""
        machines = self.machines
        await self.run(machines.set_muted(muted, now_ms()))
        await self.run(machines.press(now_ms()))
        step = chunk_ms * 32  # 16 kHz pcm16
        for start in range(0, len(pcm16) - len(pcm16) % 2, step):
            chunk = pcm16[start : start + step]
            encoded = base64.b64encode(chunk).decode()
            await self.run(machines.mic_chunk(encoded, len(chunk) // 2, now_ms()))
        await self.run(machines.release(now_ms()))

    async def run(self, outputs: Iterable[dict[str, Any]]) -> None:
        """Carry out what the machines ask for, in order, with what that causes."""
        machines = self.machines
        pending = list(outputs)
        while pending:
            output = pending.pop(0)
            kind = output["kind"]
            if kind == "send":
                await self._send_text(msgspec.json.encode(output["event"]).decode())
            elif kind == "play":
                rid = output["response_id"]
                first = rid not in self._played_ms
                audio_ms = base64_bytes(output["audio"]) / 2 / PLAYBACK_RATE_HZ * 1000
                self._played_ms[rid] = self._played_ms.get(rid, 0.0) + audio_ms
                if first:
                    pending += machines.playback_started(rid, now_ms())
            elif kind == "drain":
                rid = output["response_id"]
                played = self._played_ms.pop(rid, 0.0)
                pending += machines.playback_drained(rid, played, now_ms())
            elif kind == "clear":
                for rid in (
                    [output["response_id"]] if output.get("response_id") else list(self._played_ms)
                ):
                    played = self._played_ms.pop(rid, 0.0)
                    pending += machines.playback_stopped(rid, played, now_ms())
            elif kind in ("mute_reply", "unmute_reply"):
                self.reply_muted = kind == "mute_reply"
            elif kind == "close":
                await self._close()
