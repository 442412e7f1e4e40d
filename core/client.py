"""`ClientProtocol`: the client side of a realtime session, sans-IO (B20-B23).

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

Theory of operation. Five machines, built from `spec/tables/client_*.py`:
- connection: handshake, then ready; only fatal paths end the call; `error` events after
  the handshake become notices (or the rejection of the commit they name).
- holds (`client_hold`): one per push-to-talk hold, and one per server-VAD commit. Pending
  commits are keyed by their client event id; an acknowledgement, `no_response` or an
  `error` finishes exactly the hold whose id it carries (B15, B20). `response.created`
  binds every acknowledged hold; that response's `response.done` settles them.
- playbacks (`client_playback`): one per response with audio; interrupts clear queued
  audio at once, also after generation completed; drained or cleared responses fence
  their late audio by response id; every cursor report is acknowledged (B19, B21).
- watchdog (`client_watchdog`): armed iff some hold awaits a reply (B23).
- camera (`client_camera`): frames ride with audio appends while audio is uploaded, else
  go alone at the camera cadence (B22).
Couplings live in one place, `_couple`, run after every input: it moves the camera
between off/standalone/riding and arms or disarms the watchdog from the holds' states.

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

import json
from typing import TYPE_CHECKING, Any

import msgspec

from core.statemachines.client_camera import Camera
from core.statemachines.client_connection import Connection
from core.statemachines.client_hold import Hold
from core.statemachines.client_outbox import ClientOutbox, EventIds, Output
from core.statemachines.client_playback import ClientPlayback
from core.statemachines.client_watchdog import Watchdog
from spec.tables.client_camera import CameraState
from spec.tables.client_connection import ConnectionState
from spec.tables.client_constants import (
    CAMERA_INTERVAL_MS,
    CLIENT_MODES,
    FENCE_MEMORY,
    FINISHED_HOLD_MEMORY,
    HANDSHAKE_TIMEOUT_MS,
    PLAYBACK_RATE_HZ,
    TURN_WATCHDOG_MS,
    session_payload,
)
from spec.tables.client_hold import (
    AWAITING_REPLY_STATES,
    CLIENT_HOLD,
    LIVE_HOLD_STATES,
    UPLOADING_HOLD_STATES,
    HoldState,
)
from spec.tables.client_playback import LIVE_PLAYBACK_STATES
from spec.tables.client_watchdog import WatchdogState

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from spec.events import ServerEvent

__all__ = ["ClientProtocol", "Output", "base64_bytes", "send_events", "wire_event"]


def base64_bytes(text: str) -> int:
    """Decoded length of standard base64 `text`, without decoding it."""
    if not text:
        return 0
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return len(text) * 3 // 4 - padding


def wire_event(event: ServerEvent) -> dict[str, Any]:
    """A typed server event (as `transport.codec` decodes it) as the JSON object that
    `ClientProtocol.server_event` takes (bytes become base64, the tag becomes `type`)."""
    data = msgspec.to_builtins(event)
    assert isinstance(data, dict)
    return data


def send_events(outputs: Iterable[Output]) -> list[dict[str, Any]]:
    """The client events among `outputs`, in order (what a host puts on the socket)."""
    return [out["event"] for out in outputs if out["kind"] == "send"]


def _id(value: object) -> str | None:
    """`value` if it is a string, else None (wire fields are read defensively)."""
    return value if isinstance(value, str) else None


def _object(value: object) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


class ClientProtocol:
    """The client of one call. See the module docstring."""

    def __init__(
        self,
        mode: str = "vad",
        *,
        muted: bool = False,
        camera: bool = False,
        watchdog_ms: int = TURN_WATCHDOG_MS,
        camera_interval_ms: int = CAMERA_INTERVAL_MS,
        event_ids: EventIds | None = None,
        turn_detection: str = "server_vad",
    ) -> None:
        if mode not in CLIENT_MODES:
            raise ValueError(f"unknown client mode `{mode}`; expected one of {CLIENT_MODES}")
        self.mode = mode
        self.muted = muted
        self.camera_wanted = camera
        self.camera_interval_ms = camera_interval_ms
        payload = session_payload(mode, turn_detection)
        detection = payload["audio"]["input"]["turn_detection"]
        self.interrupt_on_speech = bool(detection and detection.get("interrupt_response"))
        self._out = ClientOutbox(event_ids)
        #: the connection's client event ids; a host that sends events of its own takes
        #: its ids from here too, so none collides with the protocol's
        self.event_ids = self._out.event_ids
        self.connection = Connection(self._out, payload)
        self.watchdog = Watchdog(self._out, watchdog_ms)
        self.camera = Camera(self._out)
        self.holds: list[Hold] = []
        self.playbacks: dict[str, ClientPlayback] = {}
        self.pending_commits: dict[str, Hold] = {}
        self.user_speaking = False
        self._hold_counter = 0
        self._restart_watchdog = False
        self._handshake_deadline: float | None = None
        self._next_capture: float | None = None
        self._speech_stopped_at: dict[str, float] = {}
        self._turn_end: dict[str, float] = {}
        self._latency_reported: set[str] = set()

    # --- host inputs ------------------------------------------------------------------

    def connected(self, now_ms: float) -> list[Output]:
        """The socket opened: send the mode's `session.update`."""
        if self.connection.state is ConnectionState.CONNECTING:
            self.connection.fire("open")
            self._handshake_deadline = now_ms + HANDSHAKE_TIMEOUT_MS
        return self._finish(now_ms)

    def disconnected(self, now_ms: float, reason: str = "socket_closed") -> list[Output]:
        """The socket closed (or failed)."""
        if self.connection.state is not ConnectionState.CLOSED:
            self._tear_down("lost", reason)
        return self._finish(now_ms)

    def server_text(self, text: str | bytes, now_ms: float) -> list[Output]:
        """One websocket text frame from the server."""
        if self.connection.state is ConnectionState.CLOSED:
            return []
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._out.emit(
                {
                    "kind": "notice",
                    "level": "warning",
                    "code": "malformed_event",
                    "message": "the server sent a frame that is not a JSON event; skipped",
                }
            )
            return self._finish(now_ms)
        return self.server_event(event, now_ms)

    def server_event(self, event: Mapping[str, Any], now_ms: float) -> list[Output]:
        """One decoded server event (a JSON object with `type`)."""
        if self.connection.state is ConnectionState.CLOSED:
            return []
        self._on_server_event(event, now_ms)
        return self._finish(now_ms)

    def press(self, now_ms: float) -> list[Output]:
        """The push-to-talk button (or space bar) went down."""
        if self.mode == "ptt" and self._ready() and self._live_hold() is None:
            self._hold_counter += 1
            hold = Hold(self._out, f"hold_{self._hold_counter}")
            self.holds.append(hold)
            hold.fire("press", muted=self.muted)
        return self._finish(now_ms)

    def release(self, now_ms: float) -> list[Output]:
        """The push-to-talk button went up: commit what the hold uploaded, if anything."""
        hold = self._live_hold()
        if hold is not None:
            hold.ended_ms = now_ms
            hold.fire("release")
            if hold.state is HoldState.SUBMITTED and hold.commit_event_id is not None:
                self.pending_commits[hold.commit_event_id] = hold
                self._restart_watchdog = True
        return self._finish(now_ms)

    def set_muted(self, muted: bool, now_ms: float) -> list[Output]:
        if muted != self.muted:
            self.muted = muted
            hold = self._live_hold()
            if hold is not None:
                hold.fire("mute" if muted else "unmute")
        return self._finish(now_ms)

    def set_camera(self, on: bool, now_ms: float) -> list[Output]:
        self.camera_wanted = on
        return self._finish(now_ms)

    def stop_reply(self, now_ms: float) -> list[Output]:
        """The user asked the assistant to stop: clear local audio now, tell the server."""
        if self._ready():
            self._interrupt(None)
            self._out.send({"type": "output_audio_buffer.clear"})
        return self._finish(now_ms)

    def mic_chunk(self, audio_b64: str, samples: int, now_ms: float) -> list[Output]:
        """Microphone audio (pcm16 at the capture rate, base64) from the capture worklet."""
        if self._audio_flowing() and samples > 0:
            if self.mode == "ptt":
                hold = self._live_hold()
                assert hold is not None  # audio flows in PTT mode only during a hold
                if hold.state is HoldState.PRESSED:
                    hold.fire("upload")
                hold.uploaded_samples += samples
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
        playback = self.playbacks.get(response_id)
        if playback is not None and self.connection.state is not ConnectionState.CLOSED:
            playback.fire("started")
            end = self._turn_end.get(response_id)
            if end is not None and response_id not in self._latency_reported:
                self._latency_reported.add(response_id)
                self._out.emit(
                    {"kind": "latency", "response_id": response_id, "first_audio_ms": now_ms - end}
                )
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
            self._out.emit(
                {
                    "kind": "notice",
                    "level": "error",
                    "code": "handshake_timeout",
                    "message": "the server did not answer session.update in time",
                }
            )
            self._tear_down("lost", "handshake_timeout")
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
        present = [c for c in candidates if c is not None]
        return min(present) if present else None

    def step(self, entry: Mapping[str, Any]) -> list[Output]:
        """Apply one recorded input (`{"kind": ..., "now_ms": ..., ...}`, the trace format
        of tests/web/traces) and return its outputs."""
        kind, now = entry["kind"], entry["now_ms"]
        if kind == "connected":
            return self.connected(now)
        if kind == "disconnected":
            return self.disconnected(now, entry.get("reason", "socket_closed"))
        if kind == "server":
            return self.server_event(entry["event"], now)
        if kind == "server_text":
            return self.server_text(entry["text"], now)
        if kind == "press":
            return self.press(now)
        if kind == "release":
            return self.release(now)
        if kind == "mute":
            return self.set_muted(bool(entry["muted"]), now)
        if kind == "camera":
            return self.set_camera(bool(entry["on"]), now)
        if kind == "stop_reply":
            return self.stop_reply(now)
        if kind == "mic":
            return self.mic_chunk(entry["audio"], int(entry["samples"]), now)
        if kind == "frame":
            return self.camera_frame(entry["jpeg"], now)
        if kind == "playback_started":
            return self.playback_started(entry["response_id"], now)
        if kind == "playback_stopped":
            return self.playback_stopped(entry["response_id"], entry["played_ms"], now)
        if kind == "playback_drained":
            return self.playback_drained(entry["response_id"], entry["played_ms"], now)
        if kind == "timeout":
            return self.handle_timeout(now)
        raise ValueError(f"unknown input kind `{kind}`")

    def snapshot(self) -> dict[str, Any]:
        """Every machine's state, as JSON data (compared across runtimes by the traces)."""
        return {
            "mode": self.mode,
            "muted": self.muted,
            "camera_wanted": self.camera_wanted,
            "connection": self.connection.state.value,
            "camera": self.camera.state.value,
            "frame_waiting": self.camera.stashed is not None,
            "next_capture_ms": self._next_capture,
            "watchdog": self.watchdog.state.value,
            "watchdog_deadline_ms": self.watchdog.deadline_ms,
            "user_speaking": self.user_speaking,
            "pending_commits": list(self.pending_commits),
            "holds": [hold.snapshot() for hold in self.holds],
            "playbacks": [playback.snapshot() for playback in self.playbacks.values()],
        }

    # --- server events ----------------------------------------------------------------

    def _on_server_event(self, event: Mapping[str, Any], now_ms: float) -> None:
        kind = event.get("type")
        if kind == "session.updated":
            self.connection.fire("ready")
            self._handshake_deadline = None
        elif kind == "session.closed":
            self._tear_down("lost", f"session_closed:{_id(event.get('reason')) or 'unknown'}")
        elif kind == "error":
            self._on_error(_object(event.get("error")))
        elif kind == "input_audio_buffer.speech_started":
            self.user_speaking = True
            if self.interrupt_on_speech:
                self._interrupt(None)
        elif kind == "input_audio_buffer.speech_stopped":
            self.user_speaking = False
            item_id = _id(event.get("item_id"))
            if item_id is not None:
                self._speech_stopped_at[item_id] = now_ms
                self._trim(self._speech_stopped_at)
        elif kind == "input_audio_buffer.committed":
            self._on_committed(event, now_ms)
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._out.emit(
                {
                    "kind": "transcript",
                    "role": "user",
                    "item_id": _id(event.get("item_id")),
                    "text": _id(event.get("transcript")) or "",
                    "final": True,
                }
            )
        elif kind == "conversation.item.input_audio_transcription.delta":
            # live text while the person still speaks (B33); the completed event replaces it
            self._out.emit(
                {
                    "kind": "transcript",
                    "role": "user",
                    "item_id": _id(event.get("item_id")),
                    "text": _id(event.get("delta")) or "",
                    "final": False,
                }
            )
        elif kind == "conversation.item.input_audio_transcription.failed":
            self._out.emit(
                {
                    "kind": "notice",
                    "level": "warning",
                    "code": "transcription_failed",
                    "message": f"no transcript for {_id(event.get('item_id'))}",
                }
            )
        elif kind == "response.created":
            response_id = _id(_object(event.get("response")).get("id"))
            if response_id is not None:
                self._on_response_created(response_id)
        elif kind == "response.output_audio.delta":
            self._on_audio_delta(event)
        elif kind == "response.output_audio.done":
            playback = self._playback_of(event.get("response_id"))
            if playback is not None:
                playback.fire("finish")
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            self._assistant_text(event, _id(event.get("delta")) or "", final=False)
        elif kind == "response.output_audio_transcript.done":
            self._assistant_text(event, _id(event.get("transcript")) or "", final=True)
        elif kind == "response.output_text.done":
            self._assistant_text(event, _id(event.get("text")) or "", final=True)
        elif kind == "response.done":
            self._on_response_done(_object(event.get("response")))
        elif kind == "output_audio_buffer.cleared":
            self._interrupt(_id(event.get("response_id")))

    def _on_error(self, error: Mapping[str, Any]) -> None:
        event_id = _id(error.get("event_id"))
        code = _id(error.get("code")) or "error"
        message = _id(error.get("message")) or ""
        if self.connection.state is ConnectionState.HANDSHAKING and event_id in (
            None,
            self.connection.update_event_id,
        ):
            self._out.emit({"kind": "notice", "level": "error", "code": code, "message": message})
            self._tear_down("refused", f"handshake_refused:{code}")
            return
        hold = self.pending_commits.pop(event_id, None) if event_id is not None else None
        if hold is not None:
            hold.fire("rejected", code=code, message=message)
            return
        self._out.emit({"kind": "notice", "level": "error", "code": code, "message": message})

    def _on_committed(self, event: Mapping[str, Any], now_ms: float) -> None:
        client_event_id = _id(event.get("client_event_id"))
        no_response = event.get("no_response") is True
        item_id = _id(event.get("item_id"))
        if client_event_id is not None:
            hold = self.pending_commits.pop(client_event_id, None)
            if hold is not None:
                hold.item_id = item_id
                hold.fire("committed_no_response" if no_response else "committed")
        elif not no_response:  # a commit the server's VAD made
            self._hold_counter += 1
            hold = Hold(self._out, f"hold_{self._hold_counter}")
            hold.item_id = item_id
            hold.ended_ms = (
                self._speech_stopped_at.pop(item_id, now_ms) if item_id is not None else now_ms
            )
            self.holds.append(hold)
            hold.fire("server_commit")
            self._restart_watchdog = True

    def _on_response_created(self, response_id: str) -> None:
        ends: list[float] = []
        for hold in self.holds:
            if hold.state is HoldState.ACKNOWLEDGED:
                hold.response_id = response_id
                hold.fire("answer")
                if hold.ended_ms is not None:
                    ends.append(hold.ended_ms)
        if ends:
            self._turn_end[response_id] = min(ends)
            self._trim(self._turn_end)

    def _on_audio_delta(self, event: Mapping[str, Any]) -> None:
        response_id = _id(event.get("response_id"))
        audio = _id(event.get("delta")) or ""
        if response_id is None:
            return
        audio_ms = base64_bytes(audio) // 2 / (PLAYBACK_RATE_HZ / 1000)
        playback = self.playbacks.get(response_id)
        if playback is None:
            playback = ClientPlayback(self._out, response_id, _id(event.get("item_id")))
            self.playbacks[response_id] = playback
        playback.fire("audio", audio=audio, audio_ms=audio_ms)

    def _on_response_done(self, response: Mapping[str, Any]) -> None:
        response_id = _id(response.get("id"))
        status = response.get("status")
        if response_id is None:
            return
        playback = self.playbacks.get(response_id)
        if playback is not None:
            playback.fire("clear" if status == "cancelled" else "finish")
        for hold in self.holds:
            if hold.state is HoldState.ANSWERING and hold.response_id == response_id:
                hold.fire("settle")
        if status == "failed":
            reason = _id(_object(response.get("status_details")).get("reason"))
            self._out.emit(
                {
                    "kind": "notice",
                    "level": "error",
                    "code": "response_failed",
                    "message": f"the reply failed ({reason or 'no reason given'})",
                }
            )

    def _assistant_text(self, event: Mapping[str, Any], text: str, *, final: bool) -> None:
        self._out.emit(
            {
                "kind": "transcript",
                "role": "assistant",
                "response_id": _id(event.get("response_id")),
                "text": text,
                "final": final,
            }
        )

    # --- helpers ----------------------------------------------------------------------

    def _interrupt(self, response_id: str | None) -> None:
        """Clear local audio of `response_id` (None: every response) at once and settle
        the holds those responses answer."""
        for playback in self.playbacks.values():
            if response_id in (None, playback.response_id) and playback.state in (
                LIVE_PLAYBACK_STATES
            ):
                playback.fire("clear")
        for hold in self.holds:
            if hold.state is HoldState.ANSWERING and response_id in (None, hold.response_id):
                hold.fire("interrupt")

    def _report(
        self, response_id: str, trigger: str, played_ms: float, now_ms: float
    ) -> list[Output]:
        playback = self.playbacks.get(response_id)
        if (
            playback is not None
            and self.connection.state is not ConnectionState.CLOSED
            and playback.accepts(trigger)
        ):
            playback.fire(trigger, played_ms=played_ms)
        return self._finish(now_ms)

    def _tear_down(self, trigger: str, reason: str) -> None:
        self.connection.fire(trigger, reason=reason)
        for playback in self.playbacks.values():
            if playback.state in LIVE_PLAYBACK_STATES:
                playback.fire("clear")
        self._handshake_deadline = None

    def _playback_of(self, response_id: object) -> ClientPlayback | None:
        key = _id(response_id)
        return self.playbacks.get(key) if key is not None else None

    def _ready(self) -> bool:
        return self.connection.state is ConnectionState.READY

    def _live_hold(self) -> Hold | None:
        for hold in self.holds:
            if hold.state in LIVE_HOLD_STATES:
                return hold
        return None

    def _audio_flowing(self) -> bool:
        if not self._ready() or self.muted:
            return False
        if self.mode == "vad":
            return True
        hold = self._live_hold()
        return hold is not None and hold.state in UPLOADING_HOLD_STATES

    @staticmethod
    def _due(deadline: float | None, now_ms: float) -> bool:
        return deadline is not None and now_ms >= deadline

    @staticmethod
    def _trim(table: dict[str, float]) -> None:
        while len(table) > FENCE_MEMORY:
            del table[next(iter(table))]

    def _couple(self, now_ms: float) -> None:
        """The one place machines are coupled: camera by audio flow, watchdog by holds."""
        camera = self.camera
        want_camera = self.camera_wanted and self._ready()
        flowing = self._audio_flowing()
        if want_camera and camera.state is CameraState.OFF:
            camera.fire("enable", audio_flowing=flowing)
            self._next_capture = now_ms + self.camera_interval_ms
        elif not want_camera and camera.state is not CameraState.OFF:
            camera.fire("disable")
            self._next_capture = None
        elif flowing and camera.state is CameraState.STANDALONE:
            camera.fire("audio_starts")
        elif not flowing and camera.state is CameraState.RIDING:
            camera.fire("audio_stops")

        awaiting = self.connection.state is not ConnectionState.CLOSED and any(
            hold.state in AWAITING_REPLY_STATES for hold in self.holds
        )
        watchdog = self.watchdog
        if watchdog.state is not WatchdogState.EXPIRED:
            if awaiting and (watchdog.state is WatchdogState.DISARMED or self._restart_watchdog):
                watchdog.fire("arm", now_ms=now_ms)
            elif not awaiting and watchdog.state is WatchdogState.ARMED:
                watchdog.fire("disarm")
        self._restart_watchdog = False

    def _prune(self) -> None:
        finished = [h for h in self.holds if h.state in CLIENT_HOLD.terminal]
        for hold in finished[: max(0, len(finished) - FINISHED_HOLD_MEMORY)]:
            self.holds.remove(hold)
        done = [p for p in self.playbacks.values() if p.state not in LIVE_PLAYBACK_STATES]
        for playback in done[: max(0, len(done) - FENCE_MEMORY)]:
            del self.playbacks[playback.response_id]

    def _finish(self, now_ms: float) -> list[Output]:
        self._couple(now_ms)
        self._prune()
        return self._out.drain()
