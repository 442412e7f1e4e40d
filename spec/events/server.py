"""Server -> client events (OpenAI Realtime GA names plus the duplex extensions).

Events that belong to a session's duplex lifecycle carry its `epoch`: a client that
saw a cancel can drop anything stamped with an older epoch.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from spec.events.base import ServerEvent
from spec.events.objects import (
    ContentPart,
    ConversationItem,
    ErrorDetail,
    Response,
    SessionCapabilities,
    SessionObject,
)

__all__ = [
    "ConversationItemAdded",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemRetrieved",
    "ConversationItemTruncated",
    "Error",
    "InputAudioBufferCleared",
    "InputAudioBufferCommitted",
    "InputAudioBufferSpeechStarted",
    "InputAudioBufferSpeechStopped",
    "InputAudioTranscriptionCompleted",
    "InputAudioTranscriptionDelta",
    "InputAudioTranscriptionFailed",
    "OutputAudioBufferCleared",
    "OutputAudioBufferStarted",
    "OutputAudioBufferStopped",
    "PlaybackAcknowledged",
    "RateLimitsUpdated",
    "ResponseContentPartAdded",
    "ResponseContentPartDone",
    "ResponseCreated",
    "ResponseDone",
    "ResponseFunctionCallArgumentsDelta",
    "ResponseFunctionCallArgumentsDone",
    "ResponseListen",
    "ResponseOutputAudioDelta",
    "ResponseOutputAudioDone",
    "ResponseOutputAudioTranscriptDelta",
    "ResponseOutputAudioTranscriptDone",
    "ResponseOutputItemAdded",
    "ResponseOutputItemDone",
    "ResponseOutputTextDelta",
    "ResponseOutputTextDone",
    "SessionClosed",
    "SessionCreated",
    "SessionHeartbeatAck",
    "SessionReplaced",
    "SessionResumed",
    "SessionResyncRequired",
    "SessionUpdated",
]


class _Duplex(ServerEvent, kw_only=True):
    """A server event stamped with the session epoch."""

    epoch: int = 0


# --- session ---------------------------------------------------------------------------


class SessionCreated(ServerEvent, tag="session.created", kw_only=True):
    """The session exists; its configuration follows.

    A resumable session (D27) also names its first `resume_token` and attachment
    generation (1); other sessions carry neither. `capabilities` (a duplex extension) says
    what the backend can do, such as the languages its speech recognition knows; a server
    that predates it sends none.
    """

    session: SessionObject
    resume_token: str | None = None
    attachment_generation: int | None = None
    capabilities: SessionCapabilities | None = None


class SessionUpdated(ServerEvent, tag="session.updated", kw_only=True):
    """A `session.update` was applied; the whole new configuration follows."""

    session: SessionObject


class SessionClosed(ServerEvent, tag="session.closed", kw_only=True):
    """The last event on the socket: why the session ended."""

    reason: str = "client_close"


class SessionHeartbeatAck(ServerEvent, tag="session.heartbeat_ack", kw_only=True):
    """Answer to `session.heartbeat`."""


# --- resume (D27, D28): events of one connection, never journaled, never numbered ------


class SessionResumed(ServerEvent, tag="session.resumed", kw_only=True):
    """`session.resume` was accepted: this connection now carries the session.

    `resume_token` replaces the one used (which no longer resumes anything). The events
    numbered `replay_from_seq` .. `last_server_event_seq` follow, in order, before any
    new one (none when `replay_from_seq` is larger).
    """

    session_id: str
    resume_token: str
    attachment_generation: int
    replay_from_seq: int
    last_server_event_seq: int


class SessionReplaced(ServerEvent, tag="session.replaced", kw_only=True):
    """The last event on a connection whose session was resumed on another connection."""

    session_id: str
    attachment_generation: int  # the generation of the connection that took over


class SessionResyncRequired(ServerEvent, tag="session.resync_required", kw_only=True):
    """After `session.resumed`: the events the client asked for can no longer be replayed.

    `journal_overflow`: they were dropped from the journal (its byte or age bound);
    `journal_gap`: the client's cursor names events it acknowledged or that never existed.
    The session goes on from `last_server_event_seq`; the client rebuilds its view
    (`conversation.item.retrieve`) or closes.
    """

    session_id: str
    reason: Literal["journal_gap", "journal_overflow"]
    last_server_event_seq: int


# --- input -----------------------------------------------------------------------------


class InputAudioBufferSpeechStarted(_Duplex, tag="input_audio_buffer.speech_started", kw_only=True):
    """Server VAD heard speech start (`audio_start_ms` includes the prefix padding)."""

    audio_start_ms: int
    item_id: str


class InputAudioBufferSpeechStopped(_Duplex, tag="input_audio_buffer.speech_stopped", kw_only=True):
    """Server VAD heard speech end."""

    audio_end_ms: int
    item_id: str


class InputAudioBufferCommitted(_Duplex, tag="input_audio_buffer.committed", kw_only=True):
    """A commit was accepted; `no_response` says it will not be answered."""

    item_id: str
    previous_item_id: str | None = None
    client_event_id: str | None = None
    no_response: bool = False


class InputAudioBufferCleared(_Duplex, tag="input_audio_buffer.cleared", kw_only=True):
    """The uncommitted input was dropped."""


# --- items -----------------------------------------------------------------------------


class ConversationItemAdded(_Duplex, tag="conversation.item.added", kw_only=True):
    """An item entered the conversation."""

    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemDone(_Duplex, tag="conversation.item.done", kw_only=True):
    """An item is complete."""

    item: ConversationItem
    previous_item_id: str | None = None


class ConversationItemDeleted(_Duplex, tag="conversation.item.deleted", kw_only=True):
    """An item was removed."""

    item_id: str


class ConversationItemRetrieved(_Duplex, tag="conversation.item.retrieved", kw_only=True):
    """The server's copy of an item."""

    item: ConversationItem


class ConversationItemTruncated(_Duplex, tag="conversation.item.truncated", kw_only=True):
    """An assistant audio item was cut at what was heard."""

    item_id: str
    content_index: int = 0
    audio_end_ms: int = 0


class InputAudioTranscriptionCompleted(
    _Duplex, tag="conversation.item.input_audio_transcription.completed", kw_only=True
):
    """The transcript of a committed audio part (written to that exact part)."""

    item_id: str
    content_index: int = 0
    transcript: str = ""


class InputAudioTranscriptionDelta(
    _Duplex, tag="conversation.item.input_audio_transcription.delta", kw_only=True
):
    """Live text of an utterance still being spoken (server VAD, B33): the words beyond
    those already sent. A preview only: the `completed` event carries the item's text."""

    item_id: str
    content_index: int = 0
    delta: str = ""


class InputAudioTranscriptionFailed(
    _Duplex, tag="conversation.item.input_audio_transcription.failed", kw_only=True
):
    """Transcription of a committed audio part failed."""

    item_id: str
    content_index: int = 0
    error: ErrorDetail | None = None


# --- responses -------------------------------------------------------------------------


class ResponseCreated(_Duplex, tag="response.created", kw_only=True):
    """A response started."""

    response: Response


class ResponseOutputItemAdded(_Duplex, tag="response.output_item.added", kw_only=True):
    """The response's assistant item was created."""

    response_id: str
    output_index: int = 0
    item: ConversationItem


class ResponseOutputItemDone(_Duplex, tag="response.output_item.done", kw_only=True):
    """The response's assistant item is complete."""

    response_id: str
    output_index: int = 0
    item: ConversationItem


class ResponseContentPartAdded(_Duplex, tag="response.content_part.added", kw_only=True):
    """A content part of the assistant item started."""

    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class ResponseContentPartDone(_Duplex, tag="response.content_part.done", kw_only=True):
    """A content part of the assistant item is complete."""

    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class _ContentRef(_Duplex, kw_only=True):
    response_id: str
    item_id: str
    output_index: int = 0
    content_index: int = 0


class ResponseOutputAudioDelta(_ContentRef, tag="response.output_audio.delta", kw_only=True):
    """A chunk of reply audio (base64 in JSON)."""

    delta: bytes


class ResponseOutputAudioDone(_ContentRef, tag="response.output_audio.done", kw_only=True):
    """No more reply audio for this part."""


class ResponseOutputAudioTranscriptDelta(
    _ContentRef, tag="response.output_audio_transcript.delta", kw_only=True
):
    """Text of the reply audio, as it is spoken."""

    delta: str


class ResponseOutputAudioTranscriptDone(
    _ContentRef, tag="response.output_audio_transcript.done", kw_only=True
):
    """The whole text of the reply audio."""

    transcript: str = ""


class ResponseOutputTextDelta(_ContentRef, tag="response.output_text.delta", kw_only=True):
    """A chunk of reply text (text-only responses)."""

    delta: str


class ResponseOutputTextDone(_ContentRef, tag="response.output_text.done", kw_only=True):
    """The whole reply text."""

    text: str = ""


class ResponseFunctionCallArgumentsDelta(
    _Duplex, tag="response.function_call_arguments.delta", kw_only=True
):
    """A piece of the JSON arguments of a function call the model is making (B38)."""

    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    delta: str


class ResponseFunctionCallArgumentsDone(
    _Duplex, tag="response.function_call_arguments.done", kw_only=True
):
    """A function call's arguments are final (B38); also sent when the response was
    interrupted during them, with the arguments that came, and the item `incomplete`."""

    response_id: str
    item_id: str
    output_index: int = 0
    call_id: str
    name: str
    arguments: str


class ResponseDone(_Duplex, tag="response.done", kw_only=True):
    """A response ended: `completed`, `cancelled` or `failed` (with a reason)."""

    response: Response


class ResponseListen(_Duplex, tag="response.listen", kw_only=True):
    """The model or the policy chose not to speak; the session keeps listening."""

    response_id: str | None = None
    response: Response | None = None
    reason: str = "silence_or_noise"


class OutputAudioBufferCleared(_Duplex, tag="output_audio_buffer.cleared", kw_only=True):
    """Queued reply audio must be dropped by the client now."""

    response_id: str | None = None


class OutputAudioBufferStarted(ServerEvent, tag="output_audio_buffer.started", kw_only=True):
    """WebRTC calls: the server began playing a response's audio on the media track."""

    response_id: str


class OutputAudioBufferStopped(ServerEvent, tag="output_audio_buffer.stopped", kw_only=True):
    """WebRTC calls: a response is done and its audio has all been played on the track."""

    response_id: str


class PlaybackAcknowledged(_Duplex, tag="playback.acknowledged", kw_only=True):
    """The played cursor of a response moved."""

    response_id: str
    item_id: str
    played_ms: float


class RateLimitsUpdated(ServerEvent, tag="rate_limits.updated", kw_only=True):
    """Rate limits (always empty; kept for OpenAI client compatibility)."""

    rate_limits: list[dict[str, Any]] = msgspec.field(default_factory=list)


class Error(ServerEvent, tag="error", kw_only=True):
    """A request was refused or a stage failed; the session goes on."""

    error: ErrorDetail
