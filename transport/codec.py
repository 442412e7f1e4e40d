"""The wire codec: one msgspec `Decoder` and `Encoder`, built once at import.

The happy path decodes the client union directly. Failures are classified on the failure
path only (a second, tiny `_Envelope` decode), into one typed `InvalidEvent`:

    frame over the size limit          -> event_too_large
    not JSON, or nested too deeply     -> invalid_json
    JSON without a known `type`        -> unknown_event
    a known event with a bad field     -> bad_event (or invalid_video_frames), `param` = path

A frame refused before it is decoded (over its connection's rate budget) gets its
`event_id` from `refused_event_id`, a bounded search of the frame's two ends: cheaper
than the decode the refusal saves, whatever the frame's size.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from spec.errors import ErrorCode, ErrorType, InvalidEvent, ProtocolError
from spec.events import ClientEventT, Error, ErrorDetail, ServerEventT
from spec.limits import Limits

__all__ = [
    "CLIENT_EVENT_TYPES",
    "decode_client_event",
    "decode_server_event",
    "encode_client_event",
    "encode_server_event",
    "error_event",
    "refused_event_id",
]

_DECODER: msgspec.json.Decoder[ClientEventT] = msgspec.json.Decoder(ClientEventT)
_SERVER_DECODER: msgspec.json.Decoder[ServerEventT] = msgspec.json.Decoder(ServerEventT)
_ENCODER = msgspec.json.Encoder()

#: every `type` a client may send
CLIENT_EVENT_TYPES: frozenset[str] = frozenset(
    msgspec.inspect.type_info(ClientEventT).types[i].tag  # type: ignore[attr-defined]
    for i in range(len(msgspec.inspect.type_info(ClientEventT).types))  # type: ignore[attr-defined]
)


class _Envelope(msgspec.Struct):
    type: Any = None
    event_id: Any = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_DEFAULT_MAX = Limits().max_event_bytes


def _path(message: str) -> tuple[str, str | None]:
    text, sep, path = message.partition(" - at `$")
    if not sep:
        return message, None
    return text, path.rstrip("`").lstrip(".") or None


#: how much of each end of a refused frame is searched for its `event_id` (a refusal
#: must cost less than the decode it saves: the search is bounded, whatever the frame)
_EVENT_ID_WINDOW = 4096
_EVENT_ID_TEXT = re.compile(r'"event_id"\s*:\s*"([^"\\]{1,512})"')
_EVENT_ID_BYTES = re.compile(rb'"event_id"\s*:\s*"([^"\\]{1,512})"')


def refused_event_id(data: str | bytes) -> str | None:
    """The `event_id` of a frame that is not decoded, when one of its two ends holds it
    (clients put it first or last); None otherwise, or when it holds an escape."""
    head = data[:_EVENT_ID_WINDOW]
    tail = data[-_EVENT_ID_WINDOW:] if len(data) > _EVENT_ID_WINDOW else data[:0]
    for end in (head, tail):
        if isinstance(end, str):
            found = _EVENT_ID_TEXT.search(end)
            if found:
                return found.group(1)
        else:
            matched = _EVENT_ID_BYTES.search(end)
            if matched:
                return matched.group(1).decode(errors="replace")
    return None


def decode_client_event(data: bytes | str, *, max_bytes: int = _DEFAULT_MAX) -> ClientEventT:
    """Decode one client frame.

    Raises:
        InvalidEvent: carrying the code, a client-safe message, the field path in `param`
            and the client's `event_id` when it can be read.
    """
    if len(data) > max_bytes:
        raise InvalidEvent(
            f"event of {len(data)} bytes exceeds the {max_bytes}-byte limit",
            code=ErrorCode.EVENT_TOO_LARGE,
        )
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise _classify(data, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidEvent(str(exc), code=ErrorCode.INVALID_JSON) from None
    except RecursionError:  # msgspec refuses nesting deeper than the interpreter's stack
        raise InvalidEvent(_TOO_DEEP, code=ErrorCode.INVALID_JSON) from None


_TOO_DEEP = "the JSON nests too deeply"


def _classify(data: bytes | str, message: str) -> InvalidEvent:
    try:
        env = _ENVELOPE.decode(data)
    except msgspec.DecodeError:  # valid JSON, but not an object
        return InvalidEvent(message, code=ErrorCode.BAD_EVENT)
    except RecursionError:
        return InvalidEvent(_TOO_DEEP, code=ErrorCode.INVALID_JSON)
    event_id = env.event_id if isinstance(env.event_id, str) else None
    if env.type is None:
        return InvalidEvent(
            "event has no `type`", code=ErrorCode.BAD_EVENT, param="type", event_id=event_id
        )
    if not isinstance(env.type, str) or env.type not in CLIENT_EVENT_TYPES:
        return InvalidEvent(
            f"unknown event type `{env.type}`",
            code=ErrorCode.UNKNOWN_EVENT,
            param="type",
            event_id=event_id,
        )
    text, param = _path(message)
    missing = text.partition("missing required field `")[2].partition("`")[0]
    if missing:
        param = f"{param}.{missing}" if param else missing
    code = ErrorCode.BAD_EVENT
    if param is not None and param.startswith("video_frames"):
        code = ErrorCode.INVALID_VIDEO_FRAMES
    return InvalidEvent(text, code=code, param=param, event_id=event_id)


def encode_server_event(event: ServerEventT) -> bytes:
    """Encode one server event as a JSON text frame body."""
    return _ENCODER.encode(event)


def decode_server_event(data: bytes | str) -> ServerEventT:
    """Decode a server event (used by the Python client and tests).

    Raises:
        msgspec.DecodeError: not a server event (nesting too deep included).
    """
    try:
        return _SERVER_DECODER.decode(data)
    except RecursionError:
        raise msgspec.DecodeError(_TOO_DEEP) from None


def encode_client_event(event: ClientEventT) -> bytes:
    """Encode a client event (used by the Python client and tests)."""
    return _ENCODER.encode(event)


def error_event(exc: ProtocolError, *, event_id: str) -> Error:
    """The wire `error` event for a protocol error."""
    return Error(
        event_id=event_id,
        error=ErrorDetail(
            type=ErrorType(exc.error_type).value,
            code=exc.code.value,
            message=exc.message,
            param=exc.param,
            event_id=exc.event_id,
        ),
    )
