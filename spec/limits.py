"""Per-server limits, with defaults and overrides from config (the table of every limit:
docs/architecture.md section 6; how a session enforces them: docs/session-semantics.md
section 10).

Every limit that a client can hit is reported with a documented error code:
`input_backpressure` for pending bytes and commits, `event_too_large` for frames and for
the audio of one append,
`invalid_video_frames` for frames per append, `resource_exhausted` for sessions,
`rate_limit_exceeded` for a connection's events and bytes a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "MAX_FUNCTION_ARGUMENTS_BYTES",
    "MAX_FUNCTION_OUTPUT_BYTES",
    "MAX_IDLE_TIMEOUT_S",
    "MAX_OUTPUT_TOKENS",
    "MAX_TOOLS",
    "MAX_TOOLS_BYTES",
    "MAX_TOOL_BYTES",
    "MAX_TOOL_NESTING",
    "MIB",
    "Limits",
]

MIB = 1024 * 1024
#: the largest idle timeout anyone may configure (one week): the operator here, a session
#: in `session.update` (which can only lower the operator's, docs/session-semantics.md 7)
MAX_IDLE_TIMEOUT_S = 7 * 86_400.0
#: the largest integer `max_output_tokens` a session may ask for (the OpenAI Realtime
#: bound); `"inf"` instead leaves the reply to the VLM backend's own cap
MAX_OUTPUT_TOKENS = 4_096
#: function tools one session may declare (`session.tools`, B37): OpenAI's own bound; a
#: session is echoed whole in every `session.updated`, so its size must stay small
MAX_TOOLS = 128
#: the encoded JSON of one tool (name, description, parameters schema)
MAX_TOOL_BYTES = 32 * 1024
#: the encoded JSON of all of a session's tools together
MAX_TOOLS_BYTES = 256 * 1024
#: how deeply one tool's `parameters` schema may nest objects and lists
MAX_TOOL_NESTING = 32
#: the arguments of one function call, as the model streams them or a client creates
#: them: a call whose arguments grow past this is ended `incomplete` (B38)
MAX_FUNCTION_ARGUMENTS_BYTES = 64 * 1024
#: the `output` of one `function_call_output` item (B39): it enters history and the
#: follow-up prompt, so it is bounded well below `max_history_bytes`
MAX_FUNCTION_OUTPUT_BYTES = 256 * 1024

_Positive = Annotated[int, msgspec.Meta(ge=1)]
_Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_IDLE_TIMEOUT_S)]
_Milliseconds = Annotated[float, msgspec.Meta(ge=0, le=3_600_000)]
_Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
_Rate = Annotated[float, msgspec.Meta(ge=0, le=1e12)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Server limits; every field can be overridden in the `[limits]` table of the config."""

    #: audio bytes plus frame bytes held for one session before commit
    max_pending_input_bytes: _Positive = 16 * MIB
    #: commits accepted but not yet answered
    max_pending_commits: _Positive = 4
    #: largest client websocket frame
    max_event_bytes: _Positive = 15 * MIB
    #: audio in one append, in milliseconds once converted to 16 kHz (checked before any
    #: conversion: an inflated append cannot monopolize the loop or the shared VAD batch)
    max_append_audio_ms: _Positive = 15_000
    #: camera frames in one append
    max_video_frames_per_append: _Positive = 2
    #: largest single camera frame, decoded
    max_video_frame_bytes: _Positive = 4_000_000
    #: images kept in the model context: by a capturing input buffer, and of earlier turns
    #: for history (the newest, for the whole session, B29)
    max_context_images: _Positive = 8
    #: bytes of the images of earlier turns kept for history (B29)
    max_context_image_bytes: _Positive = 4 * MIB
    #: live conversation items of one session; beyond it the oldest completed items leave
    #: the conversation (and history), oldest first, like OpenAI's `truncation: auto`
    max_items: _Positive = 4_096
    #: responses one session remembers (for cancel, playback acks, truncate and history);
    #: beyond it the oldest finished ones whose audio cannot be playing are forgotten
    max_responses: _Positive = 256
    #: UTF-8 bytes of the texts and transcripts of a session's completed items; beyond
    #: it the oldest completed items are deleted, like `max_items`
    max_history_bytes: _Positive = 4 * MIB
    #: content parts of one `conversation.item.create`
    max_content_parts: _Positive = 64
    #: a session with no client event for this long is closed
    idle_timeout_s: _Seconds = 300.0
    #: how long a detached session (its client's connection dropped; resume enabled, see
    #: docs/session-semantics.md D27) lives on waiting for `session.resume` before it ends
    resume_grace_s: _Seconds = 30.0
    #: encoded bytes of server events a resumable session keeps for replay; beyond it the
    #: oldest unacknowledged events are dropped and a resume from before them is answered
    #: `session.resync_required {reason: journal_overflow}`
    max_resume_journal_bytes: _Positive = 8 * MIB
    #: how long a journaled event is kept for replay (seconds), acknowledged or not
    resume_journal_age_s: _Seconds = 60.0
    #: concurrent sessions of the whole server (each of N workers admits ceil(max / N)): a
    #: ceiling for memory, set above what one machine's CPU holds, which admission measures
    #: (`shed_loop_busy`, `shed_vad_busy`: about 450 listening sessions per worker on a
    #: 2-core machine with 100 ms appends)
    max_sessions: _Positive = 1024
    #: queued outbound events per session before audio deltas are dropped
    max_outbound_events: _Positive = 512
    #: new sessions are refused (resource_exhausted, close 1013) while the event loop wakes
    #: later than this for a second (four watcher periods in a row); 0 switches shedding off
    shed_loop_lag_ms: _Milliseconds = 50.0
    #: ... or while audio waits longer than this for its VAD verdict (queued to scored)
    shed_vad_wait_ms: _Milliseconds = 100.0
    #: ... and a new session is refused when the event-loop thread's measured CPU share
    #: plus the predicted cost of the sessions admitted since would pass this share of
    #: one core (the measured capacity: a burst of connections is not all admitted before
    #: the lag shows it); 0 switches the prediction off
    shed_loop_busy: _Share = 0.9
    #: ... or the VAD's measured share of wall time spent scoring would pass this share
    shed_vad_busy: _Share = 0.72
    #: the largest HTTP request head (request line and headers) the server reads; a larger
    #: one is answered 400 and the connection closed (uvicorn/h11)
    max_header_bytes: _Positive = 16 * 1024
    #: a connection whose first request head is not complete after this long is closed
    #: (slowloris); 0 disables it
    header_timeout_s: _Seconds = 10.0
    #: a connection that must send its first event before a session exists
    #: (`?autostart=0`, `?resume=1`) is closed 1008 after this long without one; 0 disables
    first_event_timeout_s: _Seconds = 30.0
    #: a client that takes longer than this to accept one event (it stopped reading), or
    #: whose outbound queue stays full this long, is closed with 1008 "slow consumer" and
    #: its session slot freed; 0 disables it
    slow_consumer_s: _Seconds = 10.0
    # One connection's budget (core/connection_budget.py, D38): token buckets charged for
    # every client frame as it arrives, malformed ones included; a frame over budget is not
    # decoded but answered `rate_limit_exceeded`. The defaults are more than 4x a normal
    # client's peak: 20 ms appends (50 a second) plus, in the duplex dialect, a
    # `session.event_ack` per server event (a reply streams ~50 audio deltas a second; with
    # transcript deltas and turn events ~75 in all), a playback ack per delta played (50)
    # and heartbeats: ~180 events a second; 24 kHz pcm16 in base64 (64 KB a second) with
    # camera frames riding (a 300 KB JPEG is 400 KB in base64; two in one append): ~0.9 MB
    # a second (docs/architecture.md section 6).
    #: client frames one connection may send a second, sustained; 0 disables the budget
    max_events_per_s: _Rate = 1_000.0
    #: ... and at once: a client that stalled and catches up, or acks the replay of a
    #: resumed session (30 s of a reply's events)
    event_burst: _Positive = 4_000
    #: bytes of client frames one connection may send a second, sustained; 0 disables it
    max_bytes_per_s: _Rate = 8.0 * MIB
    #: ... and at once (above `max_event_bytes`: two of the largest frames pass at once)
    byte_burst: _Positive = 32 * MIB
    #: a connection refused this many times within `rate_refusal_window_s` is closed with
    #: 1008 "rate limit"; 0 never closes one (its frames over budget are still refused)
    max_rate_refusals: _Count = 100
    rate_refusal_window_s: _Seconds = 10.0

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Limits:
        """Build limits from a config table; unknown keys and bad values raise `ValueError`."""
        try:
            return msgspec.convert(dict(values), cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"invalid [limits]: {exc}") from None
