"""The session configuration and the ONE public validator every entry path uses.

`validate_session(patch, base)` is called for the first `session.update`, for every later
one, for the server's configured defaults and (in tests) for the web UI's payloads. It
checks formats first, then turn detection (the order the upstream duplex server checks in),
and either returns a complete new `SessionConfig` or raises `InvalidSessionConfig` with the
code and the JSON path (`param`) of the first bad value; `base` is never modified.
Turn detection's settings and their checks are `spec.turn_detection`'s (re-exported
here, where `SessionConfig` holds them).

Unlike upstream, `interrupt_response: false` is valid (B9): speech during a reply then
does not cancel it, and its commit waits for the reply to end.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec

from spec.errors import ErrorCode, InvalidSessionConfig
from spec.events.objects import AudioFormat, SessionObject, SessionPatch
from spec.function_tools import (
    DEFAULT_DELEGATION_TOOL,
    TOOL_CHOICE_AUTO,
    TOOL_NAME,
    FunctionTool,
    ToolChoice,
    validate_tool_choice,
    validate_tools,
)
from spec.limits import MAX_IDLE_TIMEOUT_S, MAX_OUTPUT_TOKENS
from spec.turn_detection import (
    EAGER_FIRST_REVIEW_MS,
    EAGERNESS,
    SEMANTIC_PAUSE_MS,
    SEMANTIC_VAD_KEYS,
    TURN_DETECTION_KEYS,
    EndOfTurnPolicy,
    TurnDetection,
    validate_turn_detection,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "EAGERNESS",
    "EAGER_FIRST_REVIEW_MS",
    "INPUT_FORMATS",
    "MAX_NESTING",
    "OUTPUT_FORMATS",
    "SEMANTIC_PAUSE_MS",
    "SEMANTIC_VAD_KEYS",
    "TURN_DETECTION_KEYS",
    "AudioFormatSpec",
    "EndOfTurnPolicy",
    "SessionConfig",
    "TurnDetection",
    "validate_session",
]

#: the VLM's system prompt when the session sets no `instructions` (part of the contract:
#: docs/session-semantics.md section 3)
DEFAULT_INSTRUCTIONS = (
    "You are a helpful assistant watching the user's camera in real time. The last frame is "
    "the current moment. Answer spoken or typed questions briefly; stay silent when nothing "
    "needs saying."
)

#: accepted input format spellings -> canonical name
INPUT_FORMATS: dict[str, str] = {
    "pcm16": "pcm16",
    "pcm_s16le": "pcm16",
    "s16le": "pcm16",
    "audio/pcm": "pcm16",
    "pcm": "pcm16",
    "pcm_f32le": "pcm_f32le",
    "f32le": "pcm_f32le",
    "g711_ulaw": "g711_ulaw",
    "ulaw": "g711_ulaw",
    "mulaw": "g711_ulaw",
    "audio/pcmu": "g711_ulaw",
    "g711_alaw": "g711_alaw",
    "alaw": "g711_alaw",
    "audio/pcma": "g711_alaw",
}
#: accepted output format spellings -> canonical name
OUTPUT_FORMATS: dict[str, str] = {**INPUT_FORMATS, "wav": "wav"}

_G711 = frozenset({"g711_ulaw", "g711_alaw"})
MIN_RATE_HZ = 8_000
MAX_RATE_HZ = 48_000

#: how deeply the free-form objects of a session (`extra_body`, `turn_detection`,
#: `input_audio_transcription`) may nest; `extra_body` is echoed in every session object
MAX_NESTING = 16
_FREE_FORM = ("extra_body", "turn_detection", "input_audio_transcription")


class AudioFormatSpec(msgspec.Struct, frozen=True):
    """A canonical audio format and its sample rate."""

    name: str = "pcm16"
    rate_hz: int = 16_000

    def public(self) -> dict[str, Any]:
        """The GA `{type, rate}` spelling."""
        wire = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}
        return {"type": wire.get(self.name, self.name), "rate": self.rate_hz}


class SessionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A complete, validated session configuration."""

    model: str | None = None
    instructions: str | None = None
    output_modalities: tuple[str, ...] = ("audio",)
    voice: str | None = None
    #: `audio.input.transcription.language`: the language the ASR is told (ISO code such as
    #: "en" or "zh"); None, the default, lets the ASR model detect it
    transcription_language: str | None = None
    input_format: AudioFormatSpec = AudioFormatSpec("pcm16", 16_000)
    output_format: AudioFormatSpec = AudioFormatSpec("pcm16", 24_000)
    turn_detection: TurnDetection | None = None
    #: answer a manual commit without `response.create` (upstream `extra_body.auto_response`)
    auto_response: bool = False
    #: prepare the reply during a pause, before the turn has ended (B35, D40; our
    #: extension `extra_body.preemptive_response`: OpenAI has no such field)
    preemptive_response: bool = True
    idle_timeout_s: float | None = None
    #: `max_output_tokens`: the most tokens one reply may have; None is `"inf"`, the VLM
    #: backend's own cap (which also bounds any number given here)
    max_output_tokens: int | None = None
    #: the declared function tools and which of them the model may call (B37)
    tools: tuple[FunctionTool, ...] = ()
    tool_choice: ToolChoice = TOOL_CHOICE_AUTO
    #: the function a delegated question becomes when the session offers it (B40; our
    #: extension `extra_body.delegation_tool`, a function name)
    delegation_tool: str = DEFAULT_DELEGATION_TOOL
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)

    def public(self, session_id: str, *, profile: str, epoch: int) -> SessionObject:
        """The wire session object, GA nesting plus flat beta echoes."""
        td = self.turn_detection.public() if self.turn_detection else None
        return SessionObject(
            id=session_id,
            model=self.model,
            instructions=self.instructions,
            output_modalities=list(self.output_modalities),
            audio={
                "input": {
                    "format": self.input_format.public(),
                    "turn_detection": td,
                    "transcription": {"language": self.transcription_language},
                },
                "output": {"format": self.output_format.public(), "voice": self.voice},
            },
            input_audio_format=self.input_format.name,
            output_audio_format=self.output_format.name,
            turn_detection=td,
            profile=profile,
            epoch=epoch,
            max_output_tokens="inf" if self.max_output_tokens is None else self.max_output_tokens,
            tools=[tool.public() for tool in self.tools],
            tool_choice=self.tool_choice.public(),
            extra_body=dict(self.extra_body),
        )


#: our extensions under `extra_body` that are switches (the field of the same name)
_EXTRA_BODY_FLAGS = ("auto_response", "preemptive_response")


def _refuse(code: ErrorCode, param: str, message: str) -> InvalidSessionConfig:
    return InvalidSessionConfig(message, code=code, param=param)


def _format(
    value: str | AudioFormat,
    *,
    param: str,
    table: Mapping[str, str],
    current: AudioFormatSpec,
    rate_override: int | None,
) -> AudioFormatSpec:
    if isinstance(value, str):
        name, rate = value, None
    else:
        name = value.type
        rate = value.rate or value.sample_rate_hz or value.sample_rate
    canonical = table.get(name.strip().lower())
    if canonical is None:
        choices = ", ".join(sorted(set(table)))
        raise _refuse(
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
            param,
            f"unsupported audio format `{name}`; expected one of {choices}",
        )
    rate = rate_override if rate_override is not None else rate
    if rate is None:
        # G.711 is 8 kHz by definition; others keep the current rate when only the name changes
        rate = 8_000 if canonical in _G711 else current.rate_hz
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise _refuse(
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
            param if isinstance(value, str) else f"{param}.rate",
            f"unsupported sample rate {rate} Hz; expected {MIN_RATE_HZ}-{MAX_RATE_HZ} Hz",
        )
    return AudioFormatSpec(canonical, rate)


def _nesting(value: Any, limit: int) -> int:
    """How deeply `value` nests lists and dicts (iterative: stops once past `limit`)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth) for child in children)
    return deepest


def _check_free_form(patch: SessionPatch) -> None:
    for key in _FREE_FORM:
        value = getattr(patch, key)
        if value is not msgspec.UNSET and _nesting(value, MAX_NESTING) > MAX_NESTING:
            raise _refuse(
                ErrorCode.BAD_EVENT,
                f"session.{key}",
                f"`{key}` nests more than {MAX_NESTING} levels deep",
            )


def _idle_timeout(value: float | None) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_IDLE_TIMEOUT_S  # False for nan
    ):
        raise _refuse(
            ErrorCode.BAD_EVENT,
            "session.idle_timeout_s",
            f"`idle_timeout_s` must be a number of seconds from 0 to {MAX_IDLE_TIMEOUT_S:g}",
        )
    return float(value)


def _max_output_tokens(value: object) -> int | None:
    """An integer from 1 to `MAX_OUTPUT_TOKENS`, or `"inf"` / null (-> None: no cap of
    the session's own)."""
    if value is None or value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise _refuse(
            ErrorCode.BAD_EVENT,
            "session.max_output_tokens",
            f"`max_output_tokens` must be an integer from 1 to {MAX_OUTPUT_TOKENS} or `inf`",
        )
    return value


#: a language tag: letters, optionally with region or script subtags ("en", "zh-CN")
_LANGUAGE = re.compile(r"[A-Za-z]{2,12}(?:[-_][A-Za-z0-9]{1,8})*")


def _transcription_language(
    raw: Mapping[str, Any] | None, param: str, current: str | None
) -> str | None:
    """The `language` of a `transcription` object; refuses anything but a language tag."""
    if raw is None:
        return None
    if "language" not in raw:
        return current
    language = raw["language"]
    if language is None:
        return None
    if not isinstance(language, str) or not _LANGUAGE.fullmatch(language.strip()):
        raise _refuse(
            ErrorCode.BAD_EVENT,
            f"{param}.language",
            "`language` must be a language code such as `en` or `zh`, or null to detect it",
        )
    return language.strip()


def _known_language(language: str | None, param: str, languages: Collection[str] | None) -> None:
    """Refuse a pinned language the ASR does not know. A tag matches by its primary
    subtag, case-insensitively: an English model transcribes `en-US` and `EN` too."""
    if language is None or not languages:
        return
    primary = re.split(r"[-_]", language, maxsplit=1)[0].lower()
    if primary not in {known.lower() for known in languages}:
        raise _refuse(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            f"{param}.language",
            f"unsupported language `{language}`; this server's speech recognition knows: "
            f"{', '.join(languages)}",
        )


def _voice(voice: str | None, param: str, voices: Collection[str] | None) -> str | None:
    """A voice the TTS backend has (case-insensitive, as Qwen3-TTS matches speakers)."""
    if voice is None or voices is None:
        return voice
    known = {v.strip().lower() for v in voices}
    if voice.strip().lower() not in known:
        choices = ", ".join(sorted(voices))
        raise _refuse(
            ErrorCode.UNSUPPORTED_VOICE,
            param,
            f"unsupported voice `{voice}`; this server's voices are: {choices}",
        )
    return voice


def validate_session(
    patch: SessionPatch | Mapping[str, Any],
    base: SessionConfig | None = None,
    *,
    voices: Collection[str] | None = None,
    languages: Collection[str] | None = None,
) -> SessionConfig:
    """Validate a session object and return the configuration it yields on top of `base`.

    Args:
        patch: the `session` object of a `session.update` (decoded or raw JSON mapping).
        base: the current configuration; `None` means the defaults.
        voices: the TTS backend's voices (data, so spec never imports a backend); a
            `voice` not among them is refused. `None`: any voice is accepted.
        languages: the languages the ASR backend knows (ISO 639 codes); a transcription
            `language` this patch pins to any other is refused. `None`: it detects any.

    Raises:
        InvalidSessionConfig: with `unsupported_audio_format`, `unsupported_turn_detection`,
            `unsupported_voice`, `unsupported_language` or `bad_event`, and `param`
            naming the offending field.
            `base` is unchanged.
    """
    base = base or SessionConfig()
    if not isinstance(patch, SessionPatch):
        try:
            patch = msgspec.convert(dict(patch), SessionPatch)
        except msgspec.ValidationError as exc:
            message, _, path = str(exc).partition(" - at `$")
            raise _refuse(ErrorCode.BAD_EVENT, "session" + path.rstrip("`"), message) from None
        except RecursionError:
            raise _refuse(
                ErrorCode.BAD_EVENT, "session", "the session object nests too deeply"
            ) from None
    _check_free_form(patch)
    unset = msgspec.UNSET
    audio_in = patch.audio.input if patch.audio is not unset else unset
    audio_out = patch.audio.output if patch.audio is not unset else unset
    changes: dict[str, Any] = {}

    # 1. formats (GA nesting wins over the flat beta spelling)
    rate_in: int | None = None
    if audio_in is not unset and audio_in.sample_rate_hz is not unset:
        rate_in = audio_in.sample_rate_hz
    elif patch.sample_rate_hz is not unset:
        rate_in = patch.sample_rate_hz
    fmt_in: tuple[str | AudioFormat, str] | None = None
    if audio_in is not unset and audio_in.format is not unset:
        fmt_in = (audio_in.format, "session.audio.input.format")
    elif patch.input_audio_format is not unset:
        fmt_in = (patch.input_audio_format, "session.input_audio_format")
    if fmt_in is not None or rate_in is not None:
        value, param = fmt_in or (base.input_format.name, "session.sample_rate_hz")
        changes["input_format"] = _format(
            value,
            param=param,
            table=INPUT_FORMATS,
            current=base.input_format,
            rate_override=rate_in,
        )
    fmt_out: tuple[str | AudioFormat, str] | None = None
    if audio_out is not unset and audio_out.format is not unset:
        fmt_out = (audio_out.format, "session.audio.output.format")
    elif patch.output_audio_format is not unset:
        fmt_out = (patch.output_audio_format, "session.output_audio_format")
    if fmt_out is not None:
        changes["output_format"] = _format(
            fmt_out[0],
            param=fmt_out[1],
            table=OUTPUT_FORMATS,
            current=base.output_format,
            rate_override=None,
        )

    # 2. turn detection
    if audio_in is not unset and audio_in.turn_detection is not unset:
        changes["turn_detection"] = validate_turn_detection(
            audio_in.turn_detection, "session.audio.input.turn_detection"
        )
    elif patch.turn_detection is not unset:
        changes["turn_detection"] = validate_turn_detection(
            patch.turn_detection, "session.turn_detection"
        )

    # 3. everything else
    if patch.model is not unset:
        changes["model"] = patch.model
    if patch.instructions is not unset:
        changes["instructions"] = patch.instructions
    modalities = (
        patch.output_modalities if patch.output_modalities is not unset else (patch.modalities)
    )
    if modalities is not unset:
        bad = [m for m in modalities if m not in ("audio", "text")]
        if bad or not modalities:
            raise _refuse(
                ErrorCode.BAD_EVENT,
                "session.output_modalities",
                "`output_modalities` must be a non-empty list of `audio` and `text`",
            )
        changes["output_modalities"] = tuple(modalities)
    voice = patch.voice
    voice_param = "session.voice"
    if audio_out is not unset and audio_out.voice is not unset:
        voice, voice_param = audio_out.voice, "session.audio.output.voice"
    if voice is not unset:
        changes["voice"] = _voice(voice, voice_param, voices)
    transcription: tuple[Mapping[str, Any] | None, str] | None = None
    if audio_in is not unset and audio_in.transcription is not unset:
        transcription = (audio_in.transcription, "session.audio.input.transcription")
    elif patch.input_audio_transcription is not unset:
        transcription = (patch.input_audio_transcription, "session.input_audio_transcription")
    if transcription is not None:
        raw, param = transcription
        language = _transcription_language(raw, param, base.transcription_language)
        # only a language this patch names: one kept from `base` is not the client's
        # request now (an operator's default included)
        if raw is not None and "language" in raw:
            _known_language(language, param, languages)
        changes["transcription_language"] = language
    if patch.idle_timeout_s is not unset:
        changes["idle_timeout_s"] = _idle_timeout(patch.idle_timeout_s)
    if patch.max_output_tokens is not unset:
        changes["max_output_tokens"] = _max_output_tokens(patch.max_output_tokens)
    # 4. function tools (B37): the choice is checked against the tools after this patch
    if patch.tools is not unset:
        changes["tools"] = validate_tools(patch.tools)
    tools = changes.get("tools", base.tools)
    if patch.tool_choice is not unset:
        changes["tool_choice"] = validate_tool_choice(patch.tool_choice, tools)
    elif base.tool_choice.mode == "function" and not base.tool_choice.offers(
        base.tool_choice.name or "", tools
    ):
        raise _refuse(
            ErrorCode.BAD_EVENT,
            "session.tools",
            f"`tool_choice` names `{base.tool_choice.name}`, which these tools leave out",
        )
    if patch.extra_body is not unset:
        for flag in _EXTRA_BODY_FLAGS:
            value = patch.extra_body.get(flag, getattr(base, flag))
            if not isinstance(value, bool):
                raise _refuse(
                    ErrorCode.BAD_EVENT, f"session.extra_body.{flag}", f"`{flag}` must be a boolean"
                )
            changes[flag] = value
        name = patch.extra_body.get("delegation_tool", base.delegation_tool)
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise _refuse(
                ErrorCode.BAD_EVENT,
                "session.extra_body.delegation_tool",
                "`delegation_tool` must be a function name",
            )
        changes["delegation_tool"] = name
        changes["extra_body"] = {**base.extra_body, **patch.extra_body}
    return msgspec.structs.replace(base, **changes)
