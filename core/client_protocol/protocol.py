"""`ClientProtocol`: the client side of a realtime session, sans-IO (B20-B23, B42).

    p = ClientProtocol(mode="ptt")          # or "vad"
    outputs = p.connected(now_ms)           # -> [{"kind": "send", "event": session.update}]
    outputs = p.server_event(event, now_ms) # a decoded server event (a JSON object)
    outputs = p.press(now_ms); p.mic_chunk(b64, samples, now_ms); p.release(now_ms)
    outputs = p.playback_started(response_id, now_ms)   # reports of the playback worklet
    p.next_deadline() / p.handle_timeout(now_ms)
    p.snapshot()                            # every machine's state, as JSON data

It never touches a socket, a clock, a microphone or a speaker: inputs carry `now_ms`, and
each call returns outputs (plain JSON objects, see `core.statemachines.client_outbox`)
that the host executes in order: send an event, queue/drain/clear audio in the playback
worklet, capture a camera frame, show a transcript or notice, end the call. The browser
runs a line-by-line port (`web/js/client_protocol.js`) over the same tables exported to
`web/spec/*.json`; recorded traces (`tests/web/traces`) prove both produce the same
outputs and states.

Theory of operation. Seven kinds of machine, built from `spec/tables/client_*.py`:
- connection: handshake, then ready; only fatal paths end the call; `error` events after
  the handshake become notices (or the rejection of the commit they name).
- holds (`core.client_protocol.holds`): one per push-to-talk hold or server-VAD commit; an
  acknowledgement, `no_response` or `error` finishes exactly the hold whose id it carries.
- playbacks (`core.client_protocol.replies`): one per response with audio, fenced by response id.
- reply gate (`client_reply_gate`, on a WebRTC call): a cut reply mutes the call's reply
  track (`mute_reply`) until a reply that was not cut starts (`unmute_reply`).
- watchdog (`client_watchdog`): armed iff some hold awaits a reply (B23).
- camera (`client_camera`): frames ride with audio appends while audio is uploaded, else
  go alone at the camera cadence (B22).
- resume link (`client_resume`): a resumable session's socket that fails once the call is
  ready drops the link instead of ending the call (B42): the connection is `resuming`
  (so no audio, frame, press or commit goes out: the couplings see it not ready, a live
  hold is cut, other sends wait), attempts follow a bounded backoff whose jitter the host
  draws (`disconnected(..., jitter=)`), `reconnect` asks the host for a new socket,
  `session.resume` carries the cursor, and `session.resumed` makes the call ready again:
  held sends go out, a cut push-to-talk hold's audio is cleared from the server's input
  buffer, and the replay arrives as ordinary events. An event numbered at or below the
  cursor was applied already and is skipped (`duplicate`). A replay the server cannot
  give (`session.resync_required`) cuts the replies in flight; a refusal or the end of
  the attempts loses the call (`session_lost`).
Couplings live in one place, `CallState._couple` (`call_state.py`), run after every
input: it moves the camera between off/standalone/riding and arms or disarms the watchdog
from the holds' states.

Layers (one class, one module per seam, as the oracle `spec/reference/` is built):
`call_state.CallState` (the machines, the resume link's drop and return, the couplings),
`server_events.ServerEventReader` (the server's events), and `ClientProtocol` here (the
host's inputs, the deadlines, recorded traces).

Media (`media`): `events` on a websocket (microphone and camera as appends, reply audio
as deltas the host plays), or `tracks` on a WebRTC call: the call's tracks carry the
microphone and the camera, so `mic_chunk` only counts a hold's samples (the audio clock)
and sends nothing, the camera asks for no capture, and the server plays the reply: its
`output_audio_buffer.started` / `.stopped` are the playback's started / drained reports
(no `play`, `drain` or `playback.ack`). The microphone track is sent only while audio
flows (the `microphone` output: ready, unmuted, and under push-to-talk inside a hold), as
appends are on a websocket, so no idle audio fills the server's input buffer; a
push-to-talk press still first sends `input_audio_buffer.clear`, so a commit holds the
hold's audio only.

Interrupts: VAD `speech_started` (when the session interrupts responses), an
`output_audio_buffer.cleared` (for its response, or for all without an id), a cancelled
`response.done` (its response), and the stop button (all) clear playback; the first two
and the stop button also settle the holds their responses answer.

Invariants (tests/core/test_client_protocol.py, tests/conformance/test_b20..b23):
- a muted or empty hold sends no commit and never arms the watchdog;
- each commit acknowledgement finishes only its own hold;
- the watchdog is armed iff some hold is submitted, acknowledged or answering;
- nothing of a cleared or drained response is queued for playback again;
- after the call closed no input produces an output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.client_protocol.replies import base64_bytes
from core.client_protocol.server_events import ServerEventReader
from core.client_protocol.wire import send_events, wire_event
from core.statemachines.client_outbox import Output
from spec.tables.client_connection import ConnectionState
from spec.tables.client_constants import HANDSHAKE_TIMEOUT_MS
from spec.tables.client_resume import LinkState
from spec.tables.client_watchdog import WatchdogState

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["ClientProtocol", "Output", "base64_bytes", "send_events", "wire_event"]


class ClientProtocol(ServerEventReader):
    """The client of one call: the host's inputs, its deadlines and its recorded traces,
    over the server events (`ServerEventReader`) and the call's state and couplings
    (`CallState`). See the module docstring."""

    # --- host inputs ------------------------------------------------------------------

    def connected(self, now_ms: float) -> list[Output]:
        """The socket opened: send the mode's `session.update`, or on a socket opened to
        resume (`reconnect`) the `session.resume`."""
        if self.connection.state is ConnectionState.CONNECTING:
            self.connection.fire("open")
            self._handshake_deadline = now_ms + HANDSHAKE_TIMEOUT_MS
        elif self._link_is(LinkState.RECONNECTING):
            self.link.fire("opened")
        return self._finish(now_ms)

    def disconnected(
        self, now_ms: float, reason: str = "socket_closed", jitter: float = 0.5
    ) -> list[Output]:
        """The socket closed (or failed). A resumable session's call that was ready drops
        its link and tries to resume; `jitter` (in [0, 1), drawn by the host) scales the
        backoff before the next attempt."""
        state = self.connection.state
        if state is ConnectionState.READY and self.link.resumable():
            self._drop(now_ms, jitter)
        elif state is ConnectionState.RESUMING:
            if self.link.state is LinkState.RECONNECTING:  # this attempt's socket failed
                self.link.fire("fail", now_ms=now_ms, jitter=jitter, why="out_of_time")
                self._lose_if_lost()
            # dropped: a socket already given up on (attempt timeout) closed; nothing new
        elif state is not ConnectionState.CLOSED:
            self._tear_down("lost", reason)
        return self._finish(now_ms)

    def hang_up(self, now_ms: float) -> list[Output]:
        """The person ended the call (also while its link is down: no resume follows). A
        resumable session is closed first (`session.close`): a call's data channel that
        closes only detaches it, and it would hold its slot for the server's grace."""
        if self._ready() and self.link.resumable():
            self._out.send({"type": "session.close"})
        if self.connection.state is not ConnectionState.CLOSED:
            self._tear_down("lost", "client_hangup")
        return self._finish(now_ms)

    def press(self, now_ms: float) -> list[Output]:
        """The push-to-talk button (or space bar) went down."""
        if self.mode == "ptt" and self._ready() and self.turns.live() is None:
            if self.on_tracks:
                # the track streamed since the last commit: the hold's audio starts now
                self._out.send({"type": "input_audio_buffer.clear"})
            self.turns.press(muted=self.muted)
        return self._finish(now_ms)

    def release(self, now_ms: float) -> list[Output]:
        """The push-to-talk button went up: commit what the hold uploaded, if anything."""
        if self.turns.release(now_ms):
            self._restart_watchdog = True
        return self._finish(now_ms)

    def set_muted(self, muted: bool, now_ms: float) -> list[Output]:
        if muted != self.muted:
            self.muted = muted
            self.turns.mute(muted)
        return self._finish(now_ms)

    def set_camera(self, on: bool, now_ms: float) -> list[Output]:
        self.camera_wanted = on
        return self._finish(now_ms)

    def function_output(self, call_id: str, output: str, now_ms: float) -> list[Output]:
        """The host ran the function a `function_call` output asked for: its output goes
        back, and the follow-up response is asked for once the call's response is done and
        all its calls are answered (B39)."""
        if self._ready():
            self.calls.answer(call_id, output)
        return self._finish(now_ms)

    def stop_reply(self, now_ms: float) -> list[Output]:
        """The user asked the assistant to stop: clear local audio now, tell the server."""
        if self._ready():
            self._interrupt(None)
            self._out.send({"type": "output_audio_buffer.clear"})
        return self._finish(now_ms)

    def mic_chunk(self, audio_b64: str, samples: int, now_ms: float) -> list[Output]:
        """Microphone audio (pcm16 at the capture rate, base64) from the capture worklet;
        on tracks only its sample count matters (the track carries the audio)."""
        if self._audio_flowing() and samples > 0:
            if self.mode == "ptt":
                self.turns.upload(samples)
            if self.on_tracks:
                return self._finish(now_ms)
            event: dict[str, Any] = {"type": "input_audio_buffer.append", "audio": audio_b64}
            frames = self.camera.take_stashed()
            if frames:
                event["video_frames"] = frames
            self._out.send(event)
        return self._finish(now_ms)

    def camera_frame(self, jpeg_b64: str, now_ms: float) -> list[Output]:
        """A captured camera frame (base64 JPEG), answering `capture_frame`."""
        if self.connection.state is not ConnectionState.CLOSED:
            self.camera.fire("frame", jpeg=jpeg_b64)
        return self._finish(now_ms)

    def playback_started(self, response_id: str, now_ms: float) -> list[Output]:
        """The playback worklet made the first sample of `response_id` audible."""
        if self.connection.state is not ConnectionState.CLOSED:
            self.replies.started(response_id, now_ms)
        return self._finish(now_ms)

    def playback_stopped(self, response_id: str, played_ms: float, now_ms: float) -> list[Output]:
        """The worklet dropped `response_id`'s audio on a clear, having played `played_ms`."""
        return self._report(response_id, "stopped", played_ms, now_ms)

    def playback_drained(self, response_id: str, played_ms: float, now_ms: float) -> list[Output]:
        """The worklet played out everything of `response_id` after a drain request."""
        return self._report(response_id, "drained", played_ms, now_ms)

    def handle_timeout(self, now_ms: float) -> list[Output]:
        """Fire every deadline at or before `now_ms`."""
        state = self.connection.state
        if state is ConnectionState.HANDSHAKING and self._due(self._handshake_deadline, now_ms):
            self._notice(
                "error", "handshake_timeout", "the server did not answer session.update in time"
            )
            self._tear_down("lost", "handshake_timeout")
        elif state is ConnectionState.RESUMING:
            link = self.link
            if link.state is LinkState.DROPPED and self._due(link.next_attempt_ms, now_ms):
                link.fire("attempt", now_ms=now_ms, why="out_of_time")
                self._lose_if_lost()
            elif link.state is LinkState.RECONNECTING and self._due(
                link.attempt_deadline_ms, now_ms
            ):
                self._out.emit({"kind": "abandon_socket"})
                link.fire("fail", now_ms=now_ms, why="out_of_time")
                self._lose_if_lost()
        elif state is ConnectionState.READY and self._due(self._link_deadline(), now_ms):
            if self._probe_ms is None:
                self._out.send({"type": "session.heartbeat"})
                self._probe_ms = now_ms
            else:  # no answer: the link died without a close reaching us
                self._out.emit({"kind": "abandon_socket"})
                self._drop(now_ms, self.link.jitter)
        elif state is ConnectionState.READY:
            if self.watchdog.state is WatchdogState.ARMED and self._due(
                self.watchdog.deadline_ms, now_ms
            ):
                self.watchdog.fire("expire")
                self._tear_down("lost", "turn_watchdog")
            elif self._due(self._next_capture, now_ms):
                self._out.emit({"kind": "capture_frame"})
                self._next_capture = now_ms + self.camera_interval_ms
        return self._finish(now_ms)

    def next_deadline(self) -> float | None:
        """The earliest time `handle_timeout` has something to do, or None."""
        candidates = [self._next_capture]
        if self.connection.state is ConnectionState.HANDSHAKING:
            candidates.append(self._handshake_deadline)
        if self.watchdog.state is WatchdogState.ARMED:
            candidates.append(self.watchdog.deadline_ms)
        if self.connection.state is ConnectionState.RESUMING:
            candidates += [self.link.next_attempt_ms, self.link.attempt_deadline_ms]
        candidates.append(self._link_deadline())
        present = [c for c in candidates if c is not None]
        return min(present) if present else None

    def step(self, entry: Mapping[str, Any]) -> list[Output]:
        """Apply one recorded input (`{"kind": ..., "now_ms": ..., ...}`, the trace format
        of tests/web/traces) and return its outputs."""
        kind, now = entry["kind"], entry["now_ms"]
        apply = _RECORDED_INPUTS.get(kind)
        if apply is None:
            raise ValueError(f"unknown input kind `{kind}`")
        return apply(self, entry, now)

    def _report(
        self, response_id: str, trigger: str, played_ms: float, now_ms: float
    ) -> list[Output]:
        if self.connection.state is not ConnectionState.CLOSED:
            self.replies.report(response_id, trigger, played_ms)
        return self._finish(now_ms)


#: how `ClientProtocol.step` applies each kind of recorded input
_RECORDED_INPUTS: dict[str, Callable[[ClientProtocol, Mapping[str, Any], float], list[Output]]] = {
    "connected": lambda p, e, now: p.connected(now),
    "disconnected": lambda p, e, now: p.disconnected(
        now, e.get("reason", "socket_closed"), e.get("jitter", 0.5)
    ),
    "hang_up": lambda p, e, now: p.hang_up(now),
    "server": lambda p, e, now: p.server_event(e["event"], now),
    "server_text": lambda p, e, now: p.server_text(e["text"], now),
    "press": lambda p, e, now: p.press(now),
    "release": lambda p, e, now: p.release(now),
    "mute": lambda p, e, now: p.set_muted(bool(e["muted"]), now),
    "camera": lambda p, e, now: p.set_camera(bool(e["on"]), now),
    "stop_reply": lambda p, e, now: p.stop_reply(now),
    "mic": lambda p, e, now: p.mic_chunk(e["audio"], int(e["samples"]), now),
    "frame": lambda p, e, now: p.camera_frame(e["jpeg"], now),
    "playback_started": lambda p, e, now: p.playback_started(e["response_id"], now),
    "playback_stopped": lambda p, e, now: p.playback_stopped(e["response_id"], e["played_ms"], now),
    "playback_drained": lambda p, e, now: p.playback_drained(e["response_id"], e["played_ms"], now),
    "function_output": lambda p, e, now: p.function_output(e["call_id"], e["output"], now),
    "timeout": lambda p, e, now: p.handle_timeout(now),
}
