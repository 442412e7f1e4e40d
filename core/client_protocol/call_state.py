"""`CallState`: what the client of one call keeps, and the one place its machines are
coupled (B20-B23, B42).

The bottom layer of `ClientProtocol` (`protocol.py`, whose docstring has the theory of
operation): the machines and collaborators of one call (connection, holds, replies,
function calls, watchdog, camera, resume link), the link's liveness, and what every
input ends with (`_finish`): the couplings (`_couple`: the camera by audio flow, the
watchdog by holds, the microphone track by audio flow), trimming what finished, and
draining the outbox. The layers above read server events (`server_events.py`) and the
host's inputs (`protocol.py`); they change the machines only through the methods here
and the collaborators' own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.client_protocol.function_calls import ClientCalls
from core.client_protocol.holds import ClientHolds
from core.client_protocol.replies import ClientReplies
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
    LINK_PROBE_TIMEOUT_MS,
    LINK_QUIET_MS,
    TURN_WATCHDOG_MS,
    session_payload,
)
from spec.tables.client_resume import LinkState
from spec.tables.client_watchdog import WatchdogState

if TYPE_CHECKING:
    from core.statemachines.client_hold import Hold
    from core.statemachines.client_playback import ClientPlayback

__all__ = ["CallState"]


class CallState:
    """The machines of one call and their couplings. See the module docstring."""

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
            "reply_gate": self.replies.gate.snapshot(),
            "link": self.link.snapshot(),
            "held_sends": len(self._out.held),
        }

    # --- helpers ----------------------------------------------------------------------

    def _interrupt(self, response_id: str | None) -> None:
        """Clear local audio of `response_id` (None: every response) at once and settle
        the holds those responses answer."""
        self.replies.interrupt(response_id)
        self.turns.interrupt(response_id)

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

    # --- couplings --------------------------------------------------------------------

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
