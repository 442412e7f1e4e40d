"""Validation and conversion of one `input_audio_buffer.append`, before anything changes.

`check_append` either raises the client error the append deserves (B25: formats, sample
rates, sample alignment, audio length, frame count, size and kind) or returns what the
session needs to apply it: the audio as 16 kHz pcm16, the frames, and the manual speech
verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.audio import BYTES_PER_MS_16K, SAMPLE_WIDTH, is_loud, to_pcm16_16k
from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import AudioFormat
from spec.session_config import INPUT_FORMATS, MAX_RATE_HZ, MIN_RATE_HZ

if TYPE_CHECKING:
    from spec.events import InputAudioBufferAppend
    from spec.limits import Limits
    from spec.session_config import AudioFormatSpec

__all__ = ["SPEECH_RMS_FLOOR", "AppendPlan", "check_append", "is_image"]

#: audio with a float-scale RMS at or above this counts as speech (manual turns)
SPEECH_RMS_FLOOR = 0.003

_JPEG = b"\xff\xd8"
_PNG = b"\x89PNG"


def is_image(data: bytes) -> bool:
    return data.startswith(_JPEG) or data.startswith(_PNG)


@dataclass(frozen=True, slots=True)
class AppendPlan:
    pcm16: bytes  # 16 kHz mono
    frames: list[bytes]
    speech: bool  # the manual verdict (ignored under server VAD)


def _refuse(code: ErrorCode, message: str, param: str | None, event_id: str | None) -> Exception:
    return RemoteProtocolError(message, code=code, param=param, event_id=event_id)


def check_append(
    ev: InputAudioBufferAppend, fmt: AudioFormatSpec, limits: Limits, *, verdict: bool = True
) -> AppendPlan:
    """Validate `ev` against the session's input format and the limits; `verdict=False`
    skips the speech verdict when nobody needs it (capturing already, or server VAD).

    Raises:
        RemoteProtocolError: `unsupported_audio_format`, `bad_audio`, `event_too_large`
            (audio over `max_append_audio_ms`), `invalid_video_frames` or
            `invalid_input_modality`.
    """
    eid = ev.event_id
    if (
        not ev.video_frames
        and ev.format is None
        and ev.input_audio_format is None
        and ev.sample_rate_hz is None
        and ev.sample_rate is None
        and fmt.name == "pcm16"
        and fmt.rate_hz == 16_000
        and ev.audio
        and not len(ev.audio) % 2
        and len(ev.audio) <= limits.max_append_audio_ms * BYTES_PER_MS_16K
    ):  # the hot path: plain 16 kHz pcm16 audio in the session format
        return AppendPlan(ev.audio, [], _speech(ev, ev.audio) if verdict else False)
    name, rate = fmt.name, fmt.rate_hz
    override = ev.format if ev.format is not None else ev.input_audio_format
    if override is not None:
        raw = override if isinstance(override, str) else override.type
        canonical = INPUT_FORMATS.get(raw.strip().lower())
        if canonical is None:
            raise _refuse(
                ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
                f"unsupported audio format `{raw}`",
                "format",
                eid,
            )
        name = canonical
        named = (
            override.rate or override.sample_rate_hz or override.sample_rate
            if isinstance(override, AudioFormat)
            else None
        )
        if named is not None:
            rate = named
        elif canonical in ("g711_ulaw", "g711_alaw") and canonical != fmt.name:
            # a format named without a rate, as a string or an object (decision D2)
            rate = 8_000
    explicit_rate = ev.sample_rate_hz if ev.sample_rate_hz is not None else ev.sample_rate
    if explicit_rate is not None:
        rate = explicit_rate
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise _refuse(
            ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
            f"unsupported sample rate {rate} Hz; expected {MIN_RATE_HZ}-{MAX_RATE_HZ} Hz",
            "sample_rate_hz",
            eid,
        )
    width = SAMPLE_WIDTH[name]
    if len(ev.audio) % width:
        raise _refuse(
            ErrorCode.BAD_AUDIO,
            f"`audio` holds {len(ev.audio)} bytes, not a whole number of {name} samples",
            "audio",
            eid,
        )
    if len(ev.audio) // width * 16_000 // rate > limits.max_append_audio_ms * 16:
        raise _refuse(
            ErrorCode.EVENT_TOO_LARGE,
            f"an append carries at most {limits.max_append_audio_ms} ms of audio",
            "audio",
            eid,
        )
    frames = ev.video_frames
    if len(frames) > limits.max_video_frames_per_append:
        raise _refuse(
            ErrorCode.INVALID_VIDEO_FRAMES,
            f"at most {limits.max_video_frames_per_append} frames per append, got {len(frames)}",
            "video_frames",
            eid,
        )
    for i, frame in enumerate(frames):
        if not frame or len(frame) > limits.max_video_frame_bytes or not is_image(frame):
            raise _refuse(
                ErrorCode.INVALID_VIDEO_FRAMES,
                f"frame {i} must be a JPEG or PNG of 1-{limits.max_video_frame_bytes} bytes",
                f"video_frames[{i}]",
                eid,
            )
    if not ev.audio and not frames:
        raise _refuse(
            ErrorCode.INVALID_INPUT_MODALITY,
            "append carries neither audio nor frames",
            "audio",
            eid,
        )
    pcm16 = to_pcm16_16k(ev.audio, name, rate)
    return AppendPlan(pcm16, list(frames), _speech(ev, pcm16) if verdict else False)


def _speech(ev: InputAudioBufferAppend, pcm16: bytes) -> bool:
    """The manual speech verdict: explicit flag, else probability, else energy."""
    if not pcm16:
        return False
    if ev.is_speech is not None:
        return ev.is_speech
    if ev.speech_probability is not None:
        return ev.speech_probability >= 0.5
    return is_loud(pcm16, SPEECH_RMS_FLOOR)
