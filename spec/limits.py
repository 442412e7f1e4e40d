"""Per-server limits, with defaults and overrides from config (the table of every limit:
docs/architecture.md section 6; how a session enforces them: docs/session-semantics.md
section 10).

Every limit that a client can hit is reported with a documented error code:
`input_backpressure` for pending bytes and commits, `event_too_large` for frames,
`invalid_video_frames` for frames per append, `resource_exhausted` for sessions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MIB", "Limits"]

MIB = 1024 * 1024

_Positive = Annotated[int, msgspec.Meta(ge=1)]
_NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Server limits; every field can be overridden in the `[limits]` table of the config."""

    #: audio bytes plus frame bytes held for one session before commit
    max_pending_input_bytes: _Positive = 16 * MIB
    #: commits accepted but not yet answered
    max_pending_commits: _Positive = 4
    #: largest client websocket frame
    max_event_bytes: _Positive = 15 * MIB
    #: camera frames in one append
    max_video_frames_per_append: _Positive = 2
    #: largest single camera frame, decoded
    max_video_frame_bytes: _Positive = 4_000_000
    #: images kept in the model context
    max_context_images: _Positive = 8
    #: bytes of images kept in the model context
    max_context_image_bytes: _Positive = 4 * MIB
    #: a session with no client event for this long is closed
    idle_timeout_s: _NonNegative = 300.0
    #: how long a detached session may be resumed
    resume_grace_s: _NonNegative = 30.0
    #: concurrent sessions per process
    max_sessions: _Positive = 64
    #: queued outbound events per session before audio deltas are dropped
    max_outbound_events: _Positive = 512
    #: new sessions are refused (resource_exhausted, close 1013) while the event loop wakes
    #: later than this for a second (four watcher periods in a row); 0 switches shedding off
    shed_loop_lag_ms: _NonNegative = 50.0
    #: ... or while one batched VAD call takes longer than this
    shed_vad_batch_ms: _NonNegative = 80.0

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Limits:
        """Build limits from a config table; unknown keys and bad values raise `ValueError`."""
        try:
            return msgspec.convert(dict(values), cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"invalid [limits]: {exc}") from None
