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

Theory of operation. Six kinds of machine, built from `spec/tables/client_*.py`:
- connection: handshake, then ready; only fatal paths end the call; `error` events after
  the handshake become notices (or the rejection of the commit they name).
- holds (`core.client_protocol.holds`): one per push-to-talk hold or server-VAD commit; an
  acknowledgement, `no_response` or `error` finishes exactly the hold whose id it carries.
- playbacks (`core.client_protocol.replies`): one per response with audio, fenced by response id.
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
Couplings live in one place, `_couple`, run after every input: it moves the camera
between off/standalone/riding and arms or disarms the watchdog from the holds' states.

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

import json
from typing import TYPE_CHECKING, Any

import msgspec

from core.client_protocol.function_calls import ClientCalls
from core.client_protocol.holds import ClientHolds
from core.client_protocol.replies import ClientReplies, base64_bytes
from core.statemachines.client_camera import Camera
from core.statemachines.client_connection import Connection
from core.statemachines.client_outbox import ClientOutbox, EventIds, Output
from core.statemachines.client_resume import ResumeLink
from core.statemachines.client_watchdog import Watchdog
from spec.tables.client_camera import CameraState
from spec.tables.client_connection import ConnectionState
from spec.tables.client_constants import (
    CAMERA_INTERVAL_MS,
    CLIENT_MEDIA,
    CLIENT_MODES,
    HANDSHAKE_TIMEOUT_MS,
    LINK_PROBE_TIMEOUT_MS,
    LINK_QUIET_MS,
    TURN_WATCHDOG_MS,
    session_payload,
)
from spec.tables.client_resume import RESUME_REFUSALS, LinkState
from spec.tables.client_watchdog import WatchdogState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from core.statemachines.client_hold import Hold
    from core.statemachines.client_playback import ClientPlayback
    from spec.events import ServerEvent

__all__ = ["ClientProtocol", "Output", "base64_bytes", "send_events", "wire_event"]


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
        media: str = "events",
    ) -> None:
        if mode not in CLIENT_MODES:
            raise ValueError(f"unknown client mode `{mode}`; expected one of {CLIENT_MODES}")
        if media not in CLIENT_MEDIA:
            raise ValueError(f"unknown media `{media}`; expected one of {CLIENT_MEDIA}")
        self.mode = mode
        self.on_tracks = media == "tracks"
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
        #: the function calls the host runs and answers (B38, B39)
        self.calls = ClientCalls(self._out)
        self.watchdog = Watchdog(self._out, watchdog_ms)
        self.camera = Camera(self._out, captures=not self.on_tracks)
        self.turns = ClientHolds(self._out)
        self.replies = ClientReplies(self._out, on_track=self.on_tracks)
        self.link = ResumeLink(self._out)
        #: a push-to-talk hold was cut by the drop after it uploaded audio: the resume
        #: clears the server's input buffer, so the next hold's commit is its own audio only
        self._clear_on_resume = False
        #: the link's liveness (B42): when a server event last arrived, when the client
        #: last sent, and when the heartbeat probing a quiet link went out
        self._heard_ms: float | None = None
        self._sent_ms: float | None = None
        self._probe_ms: float | None = None
        self.user_speaking = False
        self._restart_watchdog = False
        #: on tracks: whether the page sends the microphone track (the last `microphone`)
        self.microphone_sending = False
        self._handshake_deadline: float | None = None
        self._next_capture: float | None = None

    @property
    def holds(self) -> list[Hold]:
        return self.turns.holds

    @property
    def pending_commits(self) -> dict[str, Hold]:
        return self.turns.pending_commits

    @property
    def playbacks(self) -> dict[str, ClientPlayback]:
        return self.replies.playbacks

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

    def server_text(self, text: str | bytes, now_ms: float) -> list[Output]:
        """One websocket text frame from the server."""
        if self.connection.state is ConnectionState.CLOSED:
            return []
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._notice(
                "warning",
                "malformed_event",
                "the server sent a frame that is not a JSON event; skipped",
            )
            return self._finish(now_ms)
        return self.server_event(event, now_ms)

    def server_event(self, event: Mapping[str, Any], now_ms: float) -> list[Output]:
        """One decoded server event (a JSON object with `type`). An event numbered at or
        below the cursor (a replay of one already applied) is skipped."""
        if self.connection.state is ConnectionState.CLOSED:
            return []
        self._heard_ms, self._probe_ms = now_ms, None
        if self.link.take(event):
            self._on_server_event(event, now_ms)
        else:
            self._out.emit({"kind": "duplicate", "server_event_seq": event["server_event_seq"]})
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
            "link": self.link.snapshot(),
            "held_sends": len(self._out.held),
        }

    # --- server events ----------------------------------------------------------------

    def _on_server_event(self, event: Mapping[str, Any], now_ms: float) -> None:
        self.calls.server_event(event)  # function calls to run and answer (B38, B39)
        kind = event.get("type")
        if kind == "session.updated":
            self.connection.fire("ready")
            self._handshake_deadline = None
        elif kind == "session.resumed":
            self._on_resumed(now_ms)
        elif kind == "session.resync_required":
            # the events of the drop are gone: what was in flight is cut, not continued
            self._notice(
                "warning",
                "resync_required",
                "some events of the drop could not be replayed "
                f"({_id(event.get('reason')) or 'unknown'}); replies in flight were cut",
            )
            self._interrupt(None)
        elif kind == "session.replaced":
            # another connection resumed this session: it is that one's now
            self._notice("warning", "session_replaced", "the session continues elsewhere")
            self._tear_down("lost", "session_replaced")
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
                self.turns.speech_stopped(item_id, now_ms)
        elif kind == "input_audio_buffer.committed":
            self._on_committed(event, now_ms)
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._user_text(event, _id(event.get("transcript")) or "", final=True)
        elif kind == "conversation.item.input_audio_transcription.delta":
            # live text while the person still speaks (B33); the completed event replaces it
            self._user_text(event, _id(event.get("delta")) or "", final=False)
        elif kind == "conversation.item.input_audio_transcription.failed":
            self._notice(
                "warning", "transcription_failed", f"no transcript for {_id(event.get('item_id'))}"
            )
        elif kind == "response.created":
            response_id = _id(_object(event.get("response")).get("id"))
            if response_id is not None:
                ended = self.turns.answer(response_id)
                if ended is not None:
                    self.replies.turn_ended(response_id, ended)
        elif kind == "response.output_audio.delta":
            response_id = _id(event.get("response_id"))
            if response_id is not None:
                audio = _id(event.get("delta")) or ""
                self.replies.audio(response_id, _id(event.get("item_id")), audio)
        elif kind == "response.output_audio.done":
            self.replies.audio_done(_id(event.get("response_id")))
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
        elif kind == "output_audio_buffer.started" and self.on_tracks:
            response_id = _id(event.get("response_id"))
            if response_id is not None:
                self.replies.track_started(response_id, _id(event.get("item_id")), now_ms)
        elif kind == "output_audio_buffer.stopped" and self.on_tracks:
            response_id = _id(event.get("response_id"))
            if response_id is not None:
                self.replies.track_stopped(response_id)

    def _on_error(self, error: Mapping[str, Any]) -> None:
        event_id = _id(error.get("event_id"))
        code = _id(error.get("code")) or "error"
        message = _id(error.get("message")) or ""
        if self._link_is(LinkState.RECONNECTING) and code in RESUME_REFUSALS:
            self.link.fire("refused", why=code)
            self._lose_if_lost()
            return
        if self.connection.state is ConnectionState.HANDSHAKING and event_id in (
            None,
            self.connection.update_event_id,
        ):
            self._notice("error", code, message)
            self._tear_down("refused", f"handshake_refused:{code}")
            return
        if self.turns.rejected(event_id, code, message):
            return
        self._notice("error", code, message)

    def _on_committed(self, event: Mapping[str, Any], now_ms: float) -> None:
        if self.turns.committed(
            _id(event.get("client_event_id")),
            _id(event.get("item_id")),
            no_response=event.get("no_response") is True,
            now_ms=now_ms,
        ):
            self._restart_watchdog = True

    def _on_response_done(self, response: Mapping[str, Any]) -> None:
        response_id = _id(response.get("id"))
        status = response.get("status")
        if response_id is None:
            return
        self.replies.done(response_id, cancelled=status == "cancelled")
        self.turns.settle(response_id)
        if status == "failed":
            reason = _id(_object(response.get("status_details")).get("reason"))
            self._notice(
                "error", "response_failed", f"the reply failed ({reason or 'no reason given'})"
            )

    def _user_text(self, event: Mapping[str, Any], text: str, *, final: bool) -> None:
        item_id = _id(event.get("item_id"))
        self._out.emit(
            {"kind": "transcript", "role": "user", "item_id": item_id, "text": text, "final": final}
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
        self.replies.interrupt(response_id)
        self.turns.interrupt(response_id)

    def _report(
        self, response_id: str, trigger: str, played_ms: float, now_ms: float
    ) -> list[Output]:
        if self.connection.state is not ConnectionState.CLOSED:
            self.replies.report(response_id, trigger, played_ms)
        return self._finish(now_ms)

    def _notice(self, level: str, code: str, message: str) -> None:
        self._out.emit({"kind": "notice", "level": level, "code": code, "message": message})

    def _tear_down(self, trigger: str, reason: str) -> None:
        self.connection.fire(trigger, reason=reason)
        self.replies.interrupt(None)
        self._handshake_deadline = None
        self._out.discard_held()

    # --- resume (B42) -----------------------------------------------------------------

    def _link_is(self, state: LinkState) -> bool:
        return self.connection.state is ConnectionState.RESUMING and self.link.state is state

    def _drop(self, now_ms: float, jitter: float) -> None:
        """The socket of a ready, resumable call failed: keep the call, resume it."""
        self.connection.fire("drop")
        self.link.fire("drop", now_ms=now_ms, jitter=jitter)
        self._out.hold_sends()
        self._probe_ms = None
        if self.turns.cut():
            self._clear_on_resume = True
        self.user_speaking = False  # the server's VAD verdicts of the drop come in the replay

    def _on_resumed(self, now_ms: float) -> None:
        if not self._link_is(LinkState.RECONNECTING):
            return
        self.link.fire("resumed", now_ms=now_ms)
        self.connection.fire("resumed")
        self._out.release_sends()
        if self._clear_on_resume:
            self._clear_on_resume = False
            self._out.send({"type": "input_audio_buffer.clear"})

    def _link_deadline(self) -> float | None:
        """When a ready, resumable link that has heard nothing while the client sends is
        probed (`session.heartbeat`), or, once probed without an answer, dropped."""
        if not (self._ready() and self.link.resumable()) or self._heard_ms is None:
            return None
        if self._probe_ms is not None:
            return self._probe_ms + LINK_PROBE_TIMEOUT_MS
        if self._sent_ms is None or self._sent_ms < self._heard_ms:
            return None  # nothing sent since the last event: nothing to hear back
        return self._heard_ms + LINK_QUIET_MS

    def _lose_if_lost(self) -> None:
        if self.link.state is LinkState.LOST:
            self._tear_down("lost", "resume_lost")

    def _ready(self) -> bool:
        return self.connection.state is ConnectionState.READY

    def _audio_flowing(self) -> bool:
        if not self._ready() or self.muted:
            return False
        if self.mode == "vad":
            return True
        return self.turns.uploading()

    @staticmethod
    def _due(deadline: float | None, now_ms: float) -> bool:
        return deadline is not None and now_ms >= deadline

    def _couple(self, now_ms: float) -> None:
        """The one place machines are coupled: camera by audio flow, watchdog by holds."""
        camera = self.camera
        want_camera = self.camera_wanted and self._ready()
        flowing = self._audio_flowing()
        if want_camera and camera.state is CameraState.OFF:
            camera.fire("enable", audio_flowing=flowing)
            if not self.on_tracks:  # a video track carries the camera
                self._next_capture = now_ms + self.camera_interval_ms
        elif not want_camera and camera.state is not CameraState.OFF:
            camera.fire("disable")
            self._next_capture = None
        elif flowing and camera.state is CameraState.STANDALONE:
            camera.fire("audio_starts")
        elif not flowing and camera.state is CameraState.RIDING:
            camera.fire("audio_stops")

        awaiting = (
            self.connection.state is not ConnectionState.CLOSED and self.turns.awaiting_reply()
        )
        watchdog = self.watchdog
        if watchdog.state is not WatchdogState.EXPIRED:
            if awaiting and (watchdog.state is WatchdogState.DISARMED or self._restart_watchdog):
                watchdog.fire("arm", now_ms=now_ms)
            elif not awaiting and watchdog.state is WatchdogState.ARMED:
                watchdog.fire("disarm")
        self._restart_watchdog = False
        if self.on_tracks and flowing != self.microphone_sending:
            # the track is sent only while audio flows (ready, unmuted, in a hold under
            # push-to-talk): a streaming track would fill the input buffer between holds
            self.microphone_sending = flowing
            self._out.emit({"kind": "microphone", "sending": flowing})

    def _prune(self) -> None:
        self.turns.prune()
        self.replies.prune()

    def _finish(self, now_ms: float) -> list[Output]:
        self._couple(now_ms)
        self._prune()
        outputs = self._out.drain()
        if any(out["kind"] == "send" for out in outputs):
            self._sent_ms = now_ms
        return outputs


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
