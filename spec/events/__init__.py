"""Wire events: one tagged union per direction (`ClientEventT`, `ServerEventT`).

A test asserts each union holds exactly the concrete subclasses of its base, so an
event that is defined but not registered here fails the build.
"""

from __future__ import annotations

from typing import TypeAlias

from spec.events.base import ClientEvent, ServerEvent
from spec.events.client import (
    AudioPlaybackAckAlias,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    InputCommitAlias,
    OutputAudioBufferClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionEventAck,
    SessionHeartbeat,
    SessionResume,
    SessionUpdate,
)
from spec.events.objects import (
    AudioFormat,
    AudioInputConfig,
    AudioOutputConfig,
    ContentPart,
    ConversationItem,
    ErrorDetail,
    Response,
    ResponseCreateParams,
    ResponseStatusDetails,
    SessionAudio,
    SessionCapabilities,
    SessionObject,
    SessionPatch,
)
from spec.events.server import (
    ConversationItemAdded,
    ConversationItemDeleted,
    ConversationItemDone,
    ConversationItemRetrieved,
    ConversationItemTruncated,
    Error,
    InputAudioBufferCleared,
    InputAudioBufferCommitted,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionCompleted,
    InputAudioTranscriptionDelta,
    InputAudioTranscriptionFailed,
    OutputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
    PlaybackAcknowledged,
    RateLimitsUpdated,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseCreated,
    ResponseDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    SessionClosed,
    SessionCreated,
    SessionHeartbeatAck,
    SessionReplaced,
    SessionResumed,
    SessionResyncRequired,
    SessionUpdated,
)

ClientEventT: TypeAlias = (
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputCommitAlias
    | InputAudioBufferClear
    | ConversationItemCreate
    | ConversationItemDelete
    | ConversationItemRetrieve
    | ConversationItemTruncate
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | PlaybackAck
    | AudioPlaybackAckAlias
    | SessionHeartbeat
    | SessionClose
    | SessionResume
    | SessionEventAck
)

ServerEventT: TypeAlias = (
    SessionCreated
    | SessionUpdated
    | SessionClosed
    | SessionHeartbeatAck
    | SessionResumed
    | SessionReplaced
    | SessionResyncRequired
    | InputAudioBufferSpeechStarted
    | InputAudioBufferSpeechStopped
    | InputAudioBufferCommitted
    | InputAudioBufferCleared
    | ConversationItemAdded
    | ConversationItemDone
    | ConversationItemDeleted
    | ConversationItemRetrieved
    | ConversationItemTruncated
    | InputAudioTranscriptionCompleted
    | InputAudioTranscriptionDelta
    | InputAudioTranscriptionFailed
    | ResponseCreated
    | ResponseOutputItemAdded
    | ResponseOutputItemDone
    | ResponseContentPartAdded
    | ResponseContentPartDone
    | ResponseOutputAudioDelta
    | ResponseOutputAudioDone
    | ResponseOutputAudioTranscriptDelta
    | ResponseOutputAudioTranscriptDone
    | ResponseOutputTextDelta
    | ResponseOutputTextDone
    | ResponseDone
    | ResponseFunctionCallArgumentsDelta
    | ResponseFunctionCallArgumentsDone
    | ResponseListen
    | OutputAudioBufferCleared
    | OutputAudioBufferStarted
    | OutputAudioBufferStopped
    | PlaybackAcknowledged
    | RateLimitsUpdated
    | Error
)

__all__ = [
    "AudioFormat",
    "AudioInputConfig",
    "AudioOutputConfig",
    "AudioPlaybackAckAlias",
    "ClientEvent",
    "ClientEventT",
    "ContentPart",
    "ConversationItem",
    "ConversationItemAdded",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemRetrieve",
    "ConversationItemRetrieved",
    "ConversationItemTruncate",
    "ConversationItemTruncated",
    "Error",
    "ErrorDetail",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCleared",
    "InputAudioBufferCommit",
    "InputAudioBufferCommitted",
    "InputAudioBufferSpeechStarted",
    "InputAudioBufferSpeechStopped",
    "InputAudioTranscriptionCompleted",
    "InputAudioTranscriptionDelta",
    "InputAudioTranscriptionFailed",
    "InputCommitAlias",
    "OutputAudioBufferClear",
    "OutputAudioBufferCleared",
    "OutputAudioBufferStarted",
    "OutputAudioBufferStopped",
    "PlaybackAck",
    "PlaybackAcknowledged",
    "RateLimitsUpdated",
    "Response",
    "ResponseCancel",
    "ResponseContentPartAdded",
    "ResponseContentPartDone",
    "ResponseCreate",
    "ResponseCreateParams",
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
    "ResponseStatusDetails",
    "ServerEvent",
    "ServerEventT",
    "SessionAudio",
    "SessionCapabilities",
    "SessionClose",
    "SessionClosed",
    "SessionCreated",
    "SessionEventAck",
    "SessionHeartbeat",
    "SessionHeartbeatAck",
    "SessionObject",
    "SessionPatch",
    "SessionReplaced",
    "SessionResume",
    "SessionResumed",
    "SessionResyncRequired",
    "SessionUpdate",
    "SessionUpdated",
]
