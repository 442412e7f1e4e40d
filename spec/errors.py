"""Error vocabulary of the wire protocol: codes, the three OpenAI error types, close codes.

Every code belongs to exactly one OpenAI error type (`ERROR_TYPE`). Exceptions raised by
the protocol carry their code, so the mapping to the wire is data, not scattered `if`s:

    ProtocolError                   abstract; carries code, message, param, event_id
    +-- RemoteProtocolError         the client broke the protocol: `error` event, session lives on
    |   +-- InvalidEvent            the frame could not be decoded or validated
    |   +-- InvalidSessionConfig    a session object failed the public validator
    |   +-- ResumeRefused           a `session.resume` that cannot reattach, one class per code:
    |       +-- UnknownSession, InvalidResumeToken, SessionNotResumable, ResumeExpected
    +-- LocalProtocolError          we broke it (a bug): `internal_error`, close 1011
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "ERROR_TYPE",
    "CloseCode",
    "ErrorCode",
    "ErrorType",
    "InvalidEvent",
    "InvalidResumeToken",
    "InvalidSessionConfig",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "ResumeExpected",
    "ResumeRefused",
    "SessionNotResumable",
    "UnknownCall",
    "UnknownSession",
]


class ErrorType(enum.StrEnum):
    """The `error.type` classes of the OpenAI Realtime API."""

    #: the client sent something it should not have; the session goes on
    INVALID_REQUEST = "invalid_request_error"
    #: the server or a model stage failed
    SERVER = "server_error"
    #: a limit was reached; retry later or send less
    RATE_LIMIT = "rate_limit_error"


class ErrorCode(enum.StrEnum):
    """Wire error codes: those of the upstream duplex server plus our own."""

    # decoding
    INVALID_JSON = "invalid_json"
    UNKNOWN_EVENT = "unknown_event"
    EVENT_TOO_LARGE = "event_too_large"
    BAD_EVENT = "bad_event"
    # session
    UNAUTHORIZED = "unauthorized"
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    UNKNOWN_SESSION = "unknown_session"
    INVALID_RESUME_TOKEN = "invalid_resume_token"
    SESSION_NOT_RESUMABLE = "session_not_resumable"
    RESUME_EXPECTED = "resume_expected"
    SESSION_CLOSED = "session_closed"
    #: a WebRTC offer (`POST /v1/realtime/calls`) that cannot be used: not SDP, no audio
    INVALID_OFFER = "invalid_offer"
    #: a call id (a sideband websocket's `call_id`, a hangup) that names no live call
    UNKNOWN_CALL = "unknown_call"
    #: this install cannot take WebRTC calls (the `webrtc` extra, aiortc, is missing)
    WEBRTC_UNAVAILABLE = "webrtc_unavailable"
    UNSUPPORTED_AUDIO_FORMAT = "unsupported_audio_format"
    UNSUPPORTED_TURN_DETECTION = "unsupported_turn_detection"
    MODEL_UPDATE_UNSUPPORTED = "model_update_unsupported"
    VOICE_UPDATE_AFTER_AUDIO_UNSUPPORTED = "voice_update_after_audio_unsupported"
    UNSUPPORTED_VOICE = "unsupported_voice"
    #: a transcription language the backend's speech recognition does not know
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    # input
    INPUT_AUDIO_BUFFER_EMPTY = "input_audio_buffer_empty"
    INVALID_VIDEO_FRAMES = "invalid_video_frames"
    INVALID_INPUT_MODALITY = "invalid_input_modality"
    BAD_AUDIO = "bad_audio"
    INVALID_IMAGE = "invalid_image"
    INVALID_PROMPT_CONTEXT = "invalid_prompt_context"
    # items
    MISSING_ITEM_ID = "missing_item_id"
    ITEM_NOT_FOUND = "item_not_found"
    INVALID_TRUNCATE = "invalid_truncate"
    #: a `function_call_output` whose `call_id` names no call of this session (B39)
    FUNCTION_CALL_NOT_FOUND = "function_call_not_found"
    #: a second `function_call_output` for a call already answered (B39)
    FUNCTION_CALL_ALREADY_ANSWERED = "function_call_already_answered"
    #: a `function_call_output` for a call cut while its arguments streamed (B38, B39)
    FUNCTION_CALL_INCOMPLETE = "function_call_incomplete"
    # responses
    RESPONSE_ALREADY_ACTIVE = "response_already_active"
    RESPONSE_NOT_ACTIVE = "response_not_active"
    RESPONSE_CREATE_WITHOUT_INPUT = "response_create_without_input"
    # playback
    PLAYBACK_ITEM_MISMATCH = "playback_item_mismatch"
    PLAYBACK_ITEM_NOT_FOUND = "playback_item_not_found"
    PLAYBACK_ACK_TOO_LATE = "playback_ack_too_late"
    # server side
    INTERNAL_ERROR = "internal_error"
    ENGINE_ERROR = "engine_error"
    STAGE_FAILED = "runtime_data_plane_stream_failed"
    COMMIT_ABORTED = "commit_aborted"
    SERVER_VAD_UNAVAILABLE = "server_vad_unavailable"
    #: a response under `tool_choice` `required` or a named function whose model made no
    #: call of an offered function (of the named one): it fails, unspoken (3.8)
    TOOL_CHOICE_UNMET = "tool_choice_unmet"
    #: the background model did not answer a delegated question (failed or timed out);
    #: the session goes on, only that answer is missing (B31)
    DELEGATION_FAILED = "delegation_failed"
    # limits
    RESOURCE_EXHAUSTED = "resource_exhausted"
    INPUT_BACKPRESSURE = "input_backpressure"
    #: a connection sent more events or bytes a second than its budget (`[limits]`
    #: `max_events_per_s`, `max_bytes_per_s`): the frame was not decoded (D38)
    RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"


_SERVER = {
    ErrorCode.INTERNAL_ERROR,
    ErrorCode.ENGINE_ERROR,
    ErrorCode.STAGE_FAILED,
    ErrorCode.COMMIT_ABORTED,
    ErrorCode.SERVER_VAD_UNAVAILABLE,
    ErrorCode.DELEGATION_FAILED,
    ErrorCode.TOOL_CHOICE_UNMET,
    ErrorCode.WEBRTC_UNAVAILABLE,
}
_RATE_LIMIT = {
    ErrorCode.RESOURCE_EXHAUSTED,
    ErrorCode.INPUT_BACKPRESSURE,
    ErrorCode.RATE_LIMIT_EXCEEDED,
}

#: the one error type each code is reported under
ERROR_TYPE: dict[ErrorCode, ErrorType] = {
    code: (
        ErrorType.SERVER
        if code in _SERVER
        else ErrorType.RATE_LIMIT
        if code in _RATE_LIMIT
        else ErrorType.INVALID_REQUEST
    )
    for code in ErrorCode
}


class CloseCode(enum.IntEnum):
    """Websocket close codes we use (RFC 6455 section 7.4.1)."""

    #: normal closure after `session.close`
    NORMAL = 1000
    #: server shutdown
    GOING_AWAY = 1001
    #: policy violation: a slow consumer, a connection that kept sending over its rate
    #: limits ("rate limit", D38) (a refused key or origin is answered with HTTP
    #: 401 / 403 before the upgrade, or this close before the accept where the server
    #: cannot answer with HTTP: it then sends 403)
    POLICY_VIOLATION = 1008
    #: a frame larger than the configured maximum
    MESSAGE_TOO_BIG = 1009
    #: a server bug
    INTERNAL_ERROR = 1011
    #: overloaded: no session slot left, or the backend is not ready
    TRY_AGAIN_LATER = 1013


class ProtocolError(Exception):
    """A protocol violation that maps to one wire error code.

    Abstract: raise `RemoteProtocolError` or `LocalProtocolError` (or a subclass).
    """

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        param: str | None = None,
        event_id: str | None = None,
    ) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise a subclass")
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]  # per-instance override of the class default
        self.param = param
        self.event_id = event_id

    @property
    def error_type(self) -> ErrorType:
        return ERROR_TYPE[self.code]


class RemoteProtocolError(ProtocolError):
    """The client broke the protocol; answered with an `error` event, state unchanged."""

    code = ErrorCode.BAD_EVENT


class LocalProtocolError(ProtocolError):
    """The server broke its own protocol (a bug); logged, answered with close 1011."""

    code = ErrorCode.INTERNAL_ERROR


class InvalidEvent(RemoteProtocolError):
    """A client frame that is not valid JSON, names an unknown event, or has a bad field."""

    code = ErrorCode.BAD_EVENT


class InvalidSessionConfig(RemoteProtocolError):
    """A session object that the public validator refused."""

    code = ErrorCode.BAD_EVENT


class ResumeRefused(RemoteProtocolError):
    """A `session.resume` that reattaches nothing (docs/session-semantics.md D27): the
    session is unknown to this worker or has ended (`unknown_session`), the token is not
    its current one (`invalid_resume_token`), the session was not opened resumable
    (`session_not_resumable`), or a resume-only connection began with another event
    (`resume_expected`). The connection is refused; the session, if any, is untouched."""

    code = ErrorCode.UNKNOWN_SESSION


class UnknownCall(RemoteProtocolError):
    """No live WebRTC call of that id in this worker (a sideband's `call_id`)."""

    code = ErrorCode.UNKNOWN_CALL


class UnknownSession(ResumeRefused):
    """No live session of that id in this worker (never was, ended, expired, or with
    `--workers N` it lives in another worker process)."""

    code = ErrorCode.UNKNOWN_SESSION


class InvalidResumeToken(ResumeRefused):
    """The token is not the session's current one (a rotated-out token included)."""

    code = ErrorCode.INVALID_RESUME_TOKEN


class SessionNotResumable(ResumeRefused):
    """The session was opened without resume (a GA client that did not opt in)."""

    code = ErrorCode.SESSION_NOT_RESUMABLE


class ResumeExpected(ResumeRefused):
    """A resume-only connection (`?resume=1`) whose first event is not `session.resume`."""

    code = ErrorCode.RESUME_EXPECTED
