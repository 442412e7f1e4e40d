"""`SessionDriver`: one offered session, from its connect to the end of the window.

What every session does (one asyncio loop, uvloop when importable, for all of them):

- connects without permessage-deflate, waits for the first server event (`session.created`,
  or an `error` followed by a close when the server refuses the session), then sends one
  `session.update`: input `audio/pcm` at 24 kHz (the openai SDK default) and, with `--vad`
  (the default), `server_vad` turn detection with the values in `TURN_DETECTION`; with
  `--no-vad` the update sets `turn_detection: null` instead;
- streams `input_audio_buffer.append` events in real time, one every `--append-ms`, each
  carrying exactly that many milliseconds of 24 kHz pcm16 (base64). Send times are
  absolute (`start + k * append_ms`), so the stream never drifts; a session that falls
  behind catches up. The JSON text of every append is encoded once before the run
  (`clients.loadgen.payloads`: a small pool of low-level noise chunks at about -60 dBFS,
  so server VAD stays quiet, and the chunks of the speech clip), so sending costs one
  websocket frame;
- sends `session.heartbeat` once a second and times the round trip to the server's
  `session.heartbeat_ack` (a server that does not know the event answers `error`: the
  session then stops sending heartbeats, counted in `heartbeat_unsupported`);
- with `--frames N`, sends a small JPEG camera frame every N ms: it rides on the next
  audio append (`video_frames`, the joyduplex extension), as joyduplex clients send them.

Probe sessions speak the speech clip instead of noise (`clients.loadgen.probe`: when
they speak, and the latencies measured on what they said).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
from typing import TYPE_CHECKING

import msgspec

from clients.loadgen.options import RATE_HZ, TURN_DETECTION
from clients.loadgen.probe import ProbeSpeaker
from clients.loadgen.run_state import bump
from clients.loadgen.schedule import HEARTBEAT_INTERVAL_S, Schedule, now
from clients.loadgen.server_events import DECODER, ErrorBody, refusal_reason
from spec.version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    from websockets.asyncio.client import ClientConnection

    from clients.loadgen.run_state import BenchRun

__all__ = ["CLOSE_TIMEOUT_S", "SETUP_TIMEOUT_S", "SessionDriver"]

SETUP_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0
MAX_FRAME_BYTES = 32 * 1024 * 1024


class SessionDriver:
    """Session `index` of the run `bench`; `probe`: it speaks the run's speech clip."""

    def __init__(self, bench: BenchRun, index: int, probe: bool) -> None:
        self.bench = bench
        self.index = index
        speech = bench.speech
        self.speaker = ProbeSpeaker(bench, speech) if probe and speech is not None else None
        self.ws: ClientConnection | None = None
        self.ready = False
        loop = asyncio.get_running_loop()
        self.first: asyncio.Future[str] = loop.create_future()
        self.updated: asyncio.Future[str] = loop.create_future()
        self.update_id = f"upd_{index}"
        self.heartbeats: collections.deque[float] = collections.deque()
        self.heartbeat_ok = True
        self.heartbeat_n = 0
        self.first_error: str | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        bench = self.bench
        try:
            if await self._set_up():
                await self._stream()
        finally:
            if not self.ready:
                bench.resolved()
            ws = self.ws
            if ws is not None:
                with contextlib.suppress(Exception):
                    await ws.close()

    async def _set_up(self) -> bool:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        bench = self.bench
        await asyncio.sleep(bench.schedule.connect_at(self.index) - now())
        headers = (
            {"Authorization": f"Bearer {bench.options.api_key}"} if bench.options.api_key else {}
        )
        try:
            self.ws = await connect(
                bench.options.url,
                compression=None,
                proxy=None,
                additional_headers=headers,
                user_agent_header=f"joyduplex-bench/{__version__}",
                open_timeout=SETUP_TIMEOUT_S,
                ping_interval=None,
                close_timeout=CLOSE_TIMEOUT_S,
                max_size=MAX_FRAME_BYTES,
            )
        except InvalidStatus as exc:  # refused before the upgrade: 401 unauthorized, 403 origin
            bench.connect_failed(refusal_reason(exc.response.status_code, exc.response.body))
            return False
        except (OSError, TimeoutError, WebSocketException) as exc:
            bench.connect_failed(type(exc).__name__)
            return False
        bench.counts.connected += 1
        bench.tasks.add(asyncio.create_task(self._read()))
        first = await self._wait(self.first)
        if first == "closed" or (first == "error" and await self._closes()):
            self._refused()
            return False
        if not await self._send(self.session_update()):
            await self._closes()
            self._refused()
            return False
        return await self._configured(self._refused)

    def session_update(self) -> str:
        """The one `session.update` every session sends (see the module docstring)."""
        vad = TURN_DETECTION if self.bench.options.vad else None
        audio_input = {"format": {"type": "audio/pcm", "rate": RATE_HZ}, "turn_detection": vad}
        session = {"type": "realtime", "audio": {"input": audio_input}}
        update = {"type": "session.update", "event_id": self.update_id, "session": session}
        return json.dumps(update)

    async def _configured(self, refused: Callable[[], None]) -> bool:
        """Wait for `session.updated`: True once the session is set up; a close calls
        `refused`, a timeout counts as a failed connect."""
        bench = self.bench
        updated = await self._wait(self.updated)
        if updated == "closed":
            refused()
            return False
        if updated == "timeout":
            bench.connect_failed("setup_timeout")
            return False
        self.ready = True
        bench.live += 1
        bench.resolved()
        return True

    async def _wait(self, future: asyncio.Future[str]) -> str:
        try:
            return await asyncio.wait_for(asyncio.shield(future), SETUP_TIMEOUT_S)
        except TimeoutError:
            return "timeout"

    async def _closes(self) -> bool:
        """Whether the server closes the connection within `CLOSE_TIMEOUT_S` (a refusal:
        an `error` event, then the close)."""
        ws = self.ws
        assert ws is not None
        try:
            await asyncio.wait_for(ws.wait_closed(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            return False
        return True

    def _refused(self) -> None:
        ws = self.ws
        assert ws is not None
        counts = self.bench.counts
        counts.refused += 1
        bump(counts.refused_by_close_code, str(ws.close_code))
        if self.first_error is not None:
            bump(counts.refused_by_error_code, self.first_error)

    async def _send(self, data: str | bytes) -> bool:
        from websockets.exceptions import ConnectionClosed

        ws = self.ws
        assert ws is not None
        try:
            await ws.send(data, text=True)
        except ConnectionClosed:
            return False
        return True

    # --- sending -------------------------------------------------------------------------

    async def _stream(self) -> None:
        """Appends, heartbeats and frames at absolute times until the window ends."""
        bench = self.bench
        step = bench.options.append_ms / 1000
        frame_step = (bench.options.frames_ms or 0) / 1000
        start = now()
        index = 0
        next_append = start
        next_heartbeat = Schedule.first_heartbeat_at(self.index, start)
        next_frame = start + frame_step if frame_step else math.inf
        noise = bench.noise
        speaker = self.speaker
        while True:
            due = min(next_append, next_heartbeat)
            await asyncio.sleep(due - now())
            at = now()
            if at >= bench.stop_at:
                return
            if due == next_append:
                if speaker is None:
                    payload = noise[index % len(noise)]
                else:
                    payload = speaker.payload(index, noise, at)
                if at >= next_frame:  # the frame rides on this append
                    payload = payload[:-1] + bench.frame_suffix
                    next_frame += frame_step * max(1, math.ceil((at - next_frame) / frame_step))
                    bench.frames += 1
                if bench.in_window:
                    bench.send_lag.append((at - due) * 1000)
                if speaker is not None:
                    speaker.sent(at)
                if not await self._send(payload):
                    break
                bench.appends += 1
                index += 1
                next_append = start + index * step
            else:
                next_heartbeat += HEARTBEAT_INTERVAL_S
                if not await self._heartbeat(at):
                    break
        self.bench.dropped(self.ws.close_code if self.ws is not None else None)

    async def _heartbeat(self, at: float) -> bool:
        """Send one `session.heartbeat` timed from `at` (none once the server said it does
        not know them); False when the connection is gone."""
        if not self.heartbeat_ok:
            return True
        self.heartbeat_n += 1
        self.heartbeats.append(at)
        hb = f'{{"type":"session.heartbeat","event_id":"hb_{self.heartbeat_n}"}}'
        return await self._send(hb)

    # --- receiving -----------------------------------------------------------------------

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        ws = self.ws
        assert ws is not None
        try:
            async for message in ws:
                if isinstance(message, str):
                    self._on_message(message, now())
        except ConnectionClosed:
            pass
        finally:
            for future in (self.first, self.updated):
                if not future.done():
                    future.set_result("closed")

    def _on_message(self, message: str, at: float) -> None:
        bench = self.bench
        try:
            event = DECODER.decode(message)
        except msgspec.DecodeError:
            bench.error("undecodable_event")
            return
        kind = event.type
        speaker = self.speaker
        if kind == "session.heartbeat_ack":
            if self.heartbeats:
                sent = self.heartbeats.popleft()
                bench.heartbeat_rtt(sent, at)
        elif kind == "error":
            self._on_error(event.error or ErrorBody())
        elif kind == "input_audio_buffer.speech_started":
            if speaker is None or not speaker.speech_started(event.audio_start_ms or 0.0, at):
                bench.unexpected_speech_started += 1  # noise woke the VAD
        elif speaker is None:
            pass  # the events below only matter to a probe's utterances
        elif kind == "input_audio_buffer.speech_stopped":
            speaker.speech_stopped(event.audio_end_ms or 0.0)
        elif kind in ("response.output_audio.delta", "response.audio.delta"):
            speaker.reply_audio(at)
        elif kind in ("response.done", "response.listen"):
            speaker.answered(at)
        if not self.first.done():
            self.first.set_result(kind)
        if kind == "session.updated" and not self.updated.done():
            self.updated.set_result(kind)

    def _on_error(self, error: ErrorBody) -> None:
        code = error.code or error.type or "unknown"
        self.bench.error(code)
        if not self.first.done():
            self.first_error = code
        event_id = error.event_id or ""
        if event_id.startswith("hb_") and self.heartbeat_ok:
            self.heartbeat_ok = False
            self.heartbeats.clear()
            self.bench.heartbeat_unsupported += 1
        if event_id == self.update_id and not self.updated.done():
            self.updated.set_result("error")  # not configured as asked; it streams anyway
