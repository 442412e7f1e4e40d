"""Resources that events carry: conversation items, content parts, responses, sessions.

Field names follow the OpenAI Realtime GA API. These structs are shared by both
directions, so they tolerate unknown fields on decode.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from spec.events.base import always_written

__all__ = [
    "AudioFormat",
    "AudioInputConfig",
    "AudioOutputConfig",
    "ContentPart",
    "ConversationItem",
    "ErrorDetail",
    "Response",
    "ResponseCreateParams",
    "ResponseStatusDetails",
    "SessionAudio",
    "SessionCapabilities",
    "SessionObject",
    "SessionPatch",
]


def _schema_default(value: str) -> msgspec.Meta:
    """The documented default of an `always_written` field (its factory hides it from the
    JSON Schema)."""
    return msgspec.Meta(extra_json_schema={"default": value})


class AudioFormat(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An audio format: GA `{type, rate}`; `sample_rate_hz` and `sample_rate` also read."""

    type: str
    rate: int | None = None
    sample_rate_hz: int | None = None
    sample_rate: int | None = None


class ContentPart(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One part of an item: `input_text`, `input_audio`, `input_image`, `output_text`,
    `output_audio` (beta `text` / `audio` also read)."""

    type: str
    text: str | None = None
    transcript: str | None = None
    audio: bytes | None = None
    image_url: str | None = None


class ConversationItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A conversation item: a `message`, a `function_call` the model made (`call_id`,
    `name`, `arguments`) or the `function_call_output` a client answers it with (`call_id`,
    `output`), B38, B39. The server always writes `object` and `type`, and a message's
    `role`. A function item has no role and no content: the session writes its `role`
    as UNSET so it is omitted. A client's `conversation.item.create` may leave out
    `type` (a message) and `role` (a user's)."""

    id: str | None = None
    object: Annotated[str, _schema_default("realtime.item")] = always_written("realtime.item")
    type: Annotated[str, _schema_default("message")] = always_written("message")
    role: Annotated[str, _schema_default("user")] | msgspec.UnsetType = always_written("user")
    status: str | None = None
    content: list[ContentPart] = msgspec.field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class ResponseStatusDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Why a response ended the way it did."""

    type: str
    reason: str | None = None
    error: dict[str, Any] | None = None


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A model response as announced by `response.created` / `response.done`."""

    id: str
    object: Annotated[str, _schema_default("realtime.response")] = always_written(
        "realtime.response"
    )
    status: Annotated[str, _schema_default("in_progress")] = always_written("in_progress")
    status_details: ResponseStatusDetails | None = None
    output: list[ConversationItem] = always_written([])
    output_modalities: list[str] = msgspec.field(default_factory=lambda: ["audio"])
    metadata: dict[str, Any] | None = None


class ResponseCreateParams(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Options of `response.create`; beta `modalities` is read as `output_modalities`."""

    output_modalities: list[str] | None = None
    modalities: list[str] | None = None
    instructions: str | None = None
    metadata: dict[str, Any] | None = None
    conversation: str | None = None
    extra_body: dict[str, Any] | None = None


class ErrorDetail(msgspec.Struct, kw_only=True):
    """The body of an `error` event."""

    type: str
    code: str
    message: str
    param: str | None = None
    event_id: str | None = None


class AudioInputConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`session.audio.input` (GA nesting). `turn_detection` stays a raw object so the
    public validator can refuse unknown keys with `unsupported_turn_detection`."""

    format: str | AudioFormat | msgspec.UnsetType = msgspec.UNSET
    turn_detection: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    sample_rate_hz: int | msgspec.UnsetType = msgspec.UNSET
    transcription: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    noise_reduction: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET


class AudioOutputConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`session.audio.output` (GA nesting)."""

    format: str | AudioFormat | msgspec.UnsetType = msgspec.UNSET
    voice: str | msgspec.UnsetType = msgspec.UNSET
    speed: float | msgspec.UnsetType = msgspec.UNSET


class SessionAudio(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`session.audio` (GA nesting)."""

    input: AudioInputConfig | msgspec.UnsetType = msgspec.UNSET
    output: AudioOutputConfig | msgspec.UnsetType = msgspec.UNSET


class SessionPatch(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The `session` object of `session.update`: GA nesting plus the flat beta spellings.

    Every field is optional; what is absent keeps its current value.
    """

    type: str | msgspec.UnsetType = msgspec.UNSET
    model: str | msgspec.UnsetType = msgspec.UNSET
    instructions: str | msgspec.UnsetType | None = msgspec.UNSET
    output_modalities: list[str] | msgspec.UnsetType = msgspec.UNSET
    modalities: list[str] | msgspec.UnsetType = msgspec.UNSET
    voice: str | msgspec.UnsetType | None = msgspec.UNSET
    audio: SessionAudio | msgspec.UnsetType = msgspec.UNSET
    # beta flat spellings
    input_audio_format: str | AudioFormat | msgspec.UnsetType = msgspec.UNSET
    output_audio_format: str | AudioFormat | msgspec.UnsetType = msgspec.UNSET
    sample_rate_hz: int | msgspec.UnsetType = msgspec.UNSET
    turn_detection: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    input_audio_transcription: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    # duplex extras
    idle_timeout_s: Annotated[float, msgspec.Meta(ge=0)] | msgspec.UnsetType | None = msgspec.UNSET
    overlap_policy: str | msgspec.UnsetType = msgspec.UNSET
    extra_body: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    max_output_tokens: int | Literal["inf"] | msgspec.UnsetType | None = msgspec.UNSET
    # function calling (B37): raw, so the validator names the path of a bad value
    tools: list[Any] | msgspec.UnsetType | None = msgspec.UNSET
    tool_choice: str | dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET


class SessionCapabilities(msgspec.Struct, kw_only=True):
    """What the server's backend can do for a session (a duplex extension of
    `session.created`, which OpenAI clients ignore). It describes the server, not the
    session's configuration, so it never changes during a session and `session.update`
    cannot set it. Fields left at null are written out: null is an answer here."""

    #: the languages its speech recognition transcribes, as lower-case ISO 639 codes in
    #: the backend's order (`["en"]` for Whisper tiny.en); null: it is multilingual and
    #: detects the language of each utterance. Never empty. `session.update` refuses to
    #: pin `audio.input.transcription.language` to any other (`unsupported_language`)
    input_languages: list[str] | None = None
    #: whether its model chooses function tools (B37): false for a backend that accepts
    #: a session's `tools` and never calls one (the CPU backend's frame describer)
    function_calling: bool = True


class SessionObject(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The public session object of `session.created` / `session.updated` (GA shape, with
    the flat beta spellings echoed beside it)."""

    id: str
    object: Annotated[str, _schema_default("realtime.session")] = always_written("realtime.session")
    type: Annotated[str, _schema_default("realtime")] = always_written("realtime")
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[str] = msgspec.field(default_factory=lambda: ["audio"])
    audio: dict[str, Any] = msgspec.field(default_factory=dict)
    input_audio_format: str = "pcm16"
    output_audio_format: str = "pcm16"
    turn_detection: dict[str, Any] | None = None
    profile: str = "speech"
    epoch: int = 0
    #: the reply cap in tokens, or "inf" (the backend's own cap); None only before
    #: `SessionConfig.public` fills it in, so the echo is always present
    max_output_tokens: int | Literal["inf"] | None = None
    #: the declared function tools (B37), echoed as given (defaults filled in)
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    tool_choice: str | dict[str, str] = "auto"
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)
