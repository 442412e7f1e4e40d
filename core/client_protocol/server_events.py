"""`ServerEventReader`: how the client of one call reads the server's events (B19-B23,
B38, B39, B42).

The middle layer of `ClientProtocol` (`protocol.py`): one server event (a JSON object
with `type`, or a websocket text frame) goes to the collaborator it concerns: the
handshake and the resume to the connection and the link, commits and VAD verdicts to the
holds, reply audio and the server's playback reports to the replies, transcripts and
notices to the host, function calls to the calls. Wire fields are read defensively: a
field of the wrong type reads as absent, a frame that is not a JSON event is a notice.
An event numbered at or below the resume cursor was applied already and is skipped.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from core.client_protocol.call_state import CallState
from spec.tables.client_connection import ConnectionState
from spec.tables.client_resume import RESUME_REFUSALS, LinkState

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.statemachines.client_outbox import Output

__all__ = ["ServerEventReader"]


def _id(value: object) -> str | None:
    """`value` if it is a string, else None (wire fields are read defensively)."""
    return value if isinstance(value, str) else None


def _object(value: object) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


class ServerEventReader(CallState):
    """The server's events, read into the call's machines. See the module docstring."""

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
