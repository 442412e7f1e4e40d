"""Client -> server events (OpenAI Realtime GA names plus the duplex extensions).

Audio and camera frames are `bytes` fields: msgspec decodes their base64 in C.
Semantic checks that need session state (frame format, sizes, ids) happen in the
session, which answers them with their own error codes.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from spec.events.base import ClientEvent
from spec.events.objects import AudioFormat, ConversationItem, ResponseCreateParams, SessionPatch

__all__ = [
    "AudioPlaybackAckAlias",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "ConversationItemTruncate",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCommit",
    "InputCommitAlias",
    "OutputAudioBufferClear",
    "PlaybackAck",
    "ResponseCancel",
    "ResponseCreate",
    "SessionClose",
    "SessionEventAck",
    "SessionHeartbeat",
    "SessionResume",
    "SessionUpdate",
]

_NonNegativeMs = Annotated[float, msgspec.Meta(ge=0)]


class SessionUpdate(ClientEvent, tag="session.update", kw_only=True, frozen=True):
    """Open the session (first event) or patch its configuration."""

    session: SessionPatch = msgspec.field(default_factory=SessionPatch)


class InputAudioBufferAppend(
    ClientEvent, tag="input_audio_buffer.append", kw_only=True, frozen=True
):
    """Append microphone audio and/or up to two camera frames (JPEG or PNG)."""

    audio: bytes = b""
    video_frames: list[bytes] = msgspec.field(default_factory=list)
    is_speech: bool | None = None
    format: str | AudioFormat | None = None
    input_audio_format: str | AudioFormat | None = None
    sample_rate_hz: Annotated[int, msgspec.Meta(gt=0)] | None = None
    sample_rate: Annotated[int, msgspec.Meta(gt=0)] | None = None
    duration_ms: _NonNegativeMs | None = None
    audio_start_ms: _NonNegativeMs | None = None
    audio_end_ms: _NonNegativeMs | None = None
    speech_probability: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class InputAudioBufferCommit(
    ClientEvent, tag="input_audio_buffer.commit", kw_only=True, frozen=True
):
    """Commit the buffered input as one user turn."""

    final: bool = True
    create_response: bool | None = None
    response_create: bool | None = None
    is_speech: bool | None = None

    def wants_response(self, default: bool) -> bool:
        """The commit's response flag: explicit `create_response` / `response_create`
        win, else the session default."""
        if self.create_response is not None:
            return self.create_response
        if self.response_create is not None:
            return self.response_create
        return default


class InputCommitAlias(InputAudioBufferCommit, tag="input.commit", kw_only=True, frozen=True):
    """Upstream alias of `input_audio_buffer.commit`; asks for a response by default."""

    def wants_response(self, default: bool) -> bool:
        return super().wants_response(True)


class InputAudioBufferClear(ClientEvent, tag="input_audio_buffer.clear", kw_only=True, frozen=True):
    """Drop the buffered, uncommitted input."""


class ConversationItemCreate(
    ClientEvent, tag="conversation.item.create", kw_only=True, frozen=True
):
    """Add an item to the conversation."""

    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemDelete(
    ClientEvent, tag="conversation.item.delete", kw_only=True, frozen=True
):
    """Remove an item; its id may later be created again as a new version."""

    item_id: str


class ConversationItemRetrieve(
    ClientEvent, tag="conversation.item.retrieve", kw_only=True, frozen=True
):
    """Ask for the server's copy of an item."""

    item_id: str


class ConversationItemTruncate(
    ClientEvent, tag="conversation.item.truncate", kw_only=True, frozen=True
):
    """Cut an assistant audio item at the audio the user actually heard."""

    item_id: str
    content_index: Annotated[int, msgspec.Meta(ge=0)] = 0
    audio_end_ms: Annotated[int, msgspec.Meta(ge=0)]


class ResponseCreate(ClientEvent, tag="response.create", kw_only=True, frozen=True):
    """Start a response from the committed input."""

    response: ResponseCreateParams | None = None


class ResponseCancel(ClientEvent, tag="response.cancel", kw_only=True, frozen=True):
    """Cancel the active response (or the named one)."""

    response_id: str | None = None


class OutputAudioBufferClear(
    ClientEvent, tag="output_audio_buffer.clear", kw_only=True, frozen=True
):
    """Stop the reply audio that may still be queued for playback."""

    response_id: str | None = None


class PlaybackAck(ClientEvent, tag="playback.ack", kw_only=True, frozen=True):
    """Report how much of a response's audio was played (a monotonic cursor)."""

    played_ms: _NonNegativeMs
    response_id: str | None = None
    item_id: str | None = None
    committed_ms: _NonNegativeMs | None = None
    truncate: bool | None = None


class AudioPlaybackAckAlias(PlaybackAck, tag="audio.playback_ack", kw_only=True, frozen=True):
    """Upstream alias of `playback.ack`."""


class SessionHeartbeat(ClientEvent, tag="session.heartbeat", kw_only=True, frozen=True):
    """Keep an otherwise quiet session alive."""


class SessionClose(ClientEvent, tag="session.close", kw_only=True, frozen=True):
    """End the session."""

    reason: str = "client_close"


class SessionResume(ClientEvent, tag="session.resume", kw_only=True, frozen=True):
    """Reattach to a detached session within its grace period."""

    session_id: str
    resume_token: str | None = None
    last_received_server_event_seq: Annotated[int, msgspec.Meta(ge=0)] | None = None


class SessionEventAck(ClientEvent, tag="session.event_ack", kw_only=True, frozen=True):
    """Confirm receipt of server events up to a sequence number (trims the resume journal)."""

    server_event_seq: Annotated[int, msgspec.Meta(ge=0)]
