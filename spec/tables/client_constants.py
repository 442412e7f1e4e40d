"""Constants of the client side (web UI and `ClientProtocol`), and its session payloads.

Exported with the client tables to `web/spec/client_constants.json`, so the browser and
the Python client read the same numbers. Values are those of the upstream duplex server's
own web UI, so both clients pace audio, frames and timeouts alike, unless a comment says
otherwise. The client behaviours they serve are B20-B23 and B42 (docs/session-semantics.md
section 9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from spec.tables.client_camera import CLIENT_CAMERA
from spec.tables.client_connection import CLIENT_CONNECTION
from spec.tables.client_hold import CLIENT_HOLD
from spec.tables.client_playback import CLIENT_PLAYBACK
from spec.tables.client_reply_gate import CLIENT_REPLY_GATE
from spec.tables.client_resume import CLIENT_RESUME, RESUME_REFUSALS
from spec.tables.client_watchdog import CLIENT_WATCHDOG

if TYPE_CHECKING:
    from spec.tables.base import Table

__all__ = [
    "CAMERA_INTERVAL_MS",
    "CAMERA_MAX_SIDE_PX",
    "CAPTURE_RATE_HZ",
    "CLIENT_CONSTANTS",
    "CLIENT_MEDIA",
    "CLIENT_MODES",
    "CLIENT_TABLES",
    "FENCE_MEMORY",
    "FINISHED_HOLD_MEMORY",
    "HANDSHAKE_TIMEOUT_MS",
    "INITIAL_PLAYBACK_BUFFER_MS",
    "JPEG_QUALITY",
    "LINK_PROBE_TIMEOUT_MS",
    "LINK_QUIET_MS",
    "MIC_CHUNK_MS",
    "PLAYBACK_RATE_HZ",
    "RESUME_ATTEMPT_TIMEOUT_MS",
    "RESUME_BACKOFF_FIRST_MS",
    "RESUME_BACKOFF_MAX_MS",
    "RESUME_GIVE_UP_MS",
    "RESUME_MAX_ATTEMPTS",
    "TURN_WATCHDOG_MS",
    "session_payload",
]

#: microphone audio is resampled to this rate and sent as pcm16
CAPTURE_RATE_HZ: Final = 16_000
#: reply audio (pcm16) is played at this rate
PLAYBACK_RATE_HZ: Final = 24_000
#: a turn that awaits a reply for this long ends the call
TURN_WATCHDOG_MS: Final = 120_000
#: camera cadence: one frame per interval
CAMERA_INTERVAL_MS: Final = 1_000
#: JPEG quality of camera frames (canvas.toBlob quality)
JPEG_QUALITY: Final = 0.7
#: longest side of a camera frame, in pixels
CAMERA_MAX_SIDE_PX: Final = 448
#: session.updated must answer session.update within this time
HANDSHAKE_TIMEOUT_MS: Final = 15_000
#: microphone audio per append (upstream sends 200 ms; smaller ends turns sooner): 20 ms,
#: as a call's Opus packets and the server VAD's own tick; a push-to-talk release sends the
#: partial chunk at once (web/js/capture_worklet.js `flush`), so no hold waits for it
MIC_CHUNK_MS: Final = 20
#: audio buffered before a response starts playing (upstream 400 ms; our TTS streams whole
#: sentences, so a short buffer only guards the first chunk)
INITIAL_PLAYBACK_BUFFER_MS: Final = 100
#: finished responses remembered for response-id fencing
FENCE_MEMORY: Final = 32
#: finished holds kept for the UI and the snapshot
FINISHED_HOLD_MEMORY: Final = 8
#: resume (B42, ours: upstream's page does not resume): the first attempt's backoff; each
#: later one doubles up to the cap. A backoff is scaled by 0.5 + jitter / 2 (jitter in
#: [0, 1), drawn by the host), so clients cut by one outage do not return in step. The cap
#: bounds how long a resume waits after the network is back (a 2 s cap: about 2 s).
RESUME_BACKOFF_FIRST_MS: Final = 250
RESUME_BACKOFF_MAX_MS: Final = 2_000
#: at most this many attempts, and none starting later than RESUME_GIVE_UP_MS after the
#: drop (the server's default `resume_grace_s`: it forgets the session then anyway)
RESUME_MAX_ATTEMPTS: Final = 20
RESUME_GIVE_UP_MS: Final = 30_000
#: an attempt whose socket neither opens and gets `session.resumed` within this long failed
RESUME_ATTEMPT_TIMEOUT_MS: Final = 5_000
#: a silent drop (no reset reaches the client: a tunnel, a dead route) shows no close for
#: minutes; so while the client sends and hears nothing for LINK_QUIET_MS it sends
#: `session.heartbeat`, and a link whose answer does not come within LINK_PROBE_TIMEOUT_MS
#: is dropped (B42). Only a client that is sending probes: its sends already keep the
#: session from idling out, so the probe never changes the server's idle timeout.
LINK_QUIET_MS: Final = 4_000
LINK_PROBE_TIMEOUT_MS: Final = 4_000
#: push-to-talk and server VAD
CLIENT_MODES: Final = ("ptt", "vad")
#: where the media go: `events` (a websocket: microphone and camera as appends, reply audio
#: as deltas the client plays) or `tracks` (a WebRTC call: the call's audio and video
#: tracks carry them, the server plays the reply and says so with output_audio_buffer.*)
CLIENT_MEDIA: Final = ("events", "tracks")

#: every client machine table, in documentation order
CLIENT_TABLES: tuple[Table, ...] = (
    CLIENT_CONNECTION,
    CLIENT_HOLD,
    CLIENT_PLAYBACK,
    CLIENT_REPLY_GATE,
    CLIENT_WATCHDOG,
    CLIENT_CAMERA,
    CLIENT_RESUME,
)

_VAD_TURN_DETECTION: Final = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "min_speech_duration_ms": 96,
    "create_response": True,
    "interrupt_response": True,
}


#: the turn detections the hands-free mode offers: server VAD, or semantic VAD (B32) at
#: each eagerness; the first is the default
TURN_DETECTIONS: Final[dict[str, dict[str, Any]]] = {
    "server_vad": _VAD_TURN_DETECTION,
    **{
        f"semantic_vad_{eagerness}": {
            "type": "semantic_vad",
            "eagerness": eagerness,
            "create_response": True,
            "interrupt_response": True,
        }
        for eagerness in ("auto", "low", "medium", "high")
    },
}


def session_payload(mode: str, turn_detection: str = "server_vad") -> dict[str, Any]:
    """The `session` object of the client's `session.update` in `mode` (B9: it passes
    `spec.session_config.validate_session`); `turn_detection` names the hands-free mode's
    entry of `TURN_DETECTIONS` (push-to-talk has none).

    Raises:
        ValueError: an unknown mode or turn detection.
    """
    if mode not in CLIENT_MODES:
        raise ValueError(f"unknown client mode `{mode}`; expected one of {CLIENT_MODES}")
    if turn_detection not in TURN_DETECTIONS:
        raise ValueError(
            f"unknown turn detection `{turn_detection}`; expected one of {list(TURN_DETECTIONS)}"
        )
    detection = dict(TURN_DETECTIONS[turn_detection]) if mode == "vad" else None
    return {
        "type": "realtime",
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": CAPTURE_RATE_HZ},
                "turn_detection": detection,
            },
            "output": {"format": {"type": "audio/pcm", "rate": PLAYBACK_RATE_HZ}},
        },
    }


CLIENT_CONSTANTS: Final[dict[str, Any]] = {
    "capture_rate_hz": CAPTURE_RATE_HZ,
    "playback_rate_hz": PLAYBACK_RATE_HZ,
    "turn_watchdog_ms": TURN_WATCHDOG_MS,
    "camera_interval_ms": CAMERA_INTERVAL_MS,
    "jpeg_quality": JPEG_QUALITY,
    "camera_max_side_px": CAMERA_MAX_SIDE_PX,
    "handshake_timeout_ms": HANDSHAKE_TIMEOUT_MS,
    "mic_chunk_ms": MIC_CHUNK_MS,
    "initial_playback_buffer_ms": INITIAL_PLAYBACK_BUFFER_MS,
    "fence_memory": FENCE_MEMORY,
    "finished_hold_memory": FINISHED_HOLD_MEMORY,
    "resume_backoff_first_ms": RESUME_BACKOFF_FIRST_MS,
    "resume_backoff_max_ms": RESUME_BACKOFF_MAX_MS,
    "resume_max_attempts": RESUME_MAX_ATTEMPTS,
    "resume_give_up_ms": RESUME_GIVE_UP_MS,
    "resume_attempt_timeout_ms": RESUME_ATTEMPT_TIMEOUT_MS,
    "resume_refusals": sorted(RESUME_REFUSALS),
    "link_quiet_ms": LINK_QUIET_MS,
    "link_probe_timeout_ms": LINK_PROBE_TIMEOUT_MS,
    "modes": list(CLIENT_MODES),
    "media": list(CLIENT_MEDIA),
    "session_payloads": {mode: session_payload(mode) for mode in CLIENT_MODES},
    "turn_detections": TURN_DETECTIONS,
}
