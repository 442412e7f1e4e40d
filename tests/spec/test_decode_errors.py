"""Decode failures are classified into exactly one typed error, never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spec.errors import ErrorCode, ErrorType, InvalidEvent
from spec.events import ClientEvent
from transport import codec


def _fail(data: bytes | str, **kw: int) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        codec.decode_client_event(data, **kw)
    return info.value


def test_malformed_json_is_invalid_json() -> None:
    err = _fail(b'{"type": "session.update"')
    assert err.code is ErrorCode.INVALID_JSON
    assert err.error_type is ErrorType.INVALID_REQUEST


def test_unknown_type_is_unknown_event_and_echoes_event_id() -> None:
    err = _fail(b'{"type": "response.explode", "event_id": "evt_7"}')
    assert (err.code, err.param, err.event_id) == (ErrorCode.UNKNOWN_EVENT, "type", "evt_7")


def test_non_string_type_is_unknown_event() -> None:
    assert _fail(b'{"type": 5}').code is ErrorCode.UNKNOWN_EVENT


def test_missing_type_is_bad_event_on_param_type() -> None:
    err = _fail(b'{"event_id": "e"}')
    assert (err.code, err.param, err.event_id) == (ErrorCode.BAD_EVENT, "type", "e")


def test_oversize_frame_is_event_too_large_before_parsing() -> None:
    err = _fail(b"x" * 101, max_bytes=100)
    assert err.code is ErrorCode.EVENT_TOO_LARGE


def test_json_that_is_not_an_object_is_bad_event() -> None:
    assert _fail(b"[1, 2]").code is ErrorCode.BAD_EVENT


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"type": "input_audio_buffer.append", "audio": "!!"}, "audio"),
        ({"type": "input_audio_buffer.append", "is_speech": "yes"}, "is_speech"),
        ({"type": "playback.ack", "played_ms": -1}, "played_ms"),
        ({"type": "playback.ack"}, "played_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i"}, "audio_end_ms"),
        (
            {"type": "conversation.item.create", "item": {"content": [{"type": 3}]}},
            "item.content[0].type",
        ),
        ({"type": "conversation.item.create", "item": {"content": [{}]}}, "item.content[0].type"),
        (
            {"type": "session.update", "session": {"audio": {"input": {"format": 7}}}},
            "session.audio.input.format",
        ),
    ],
)
def test_bad_field_is_bad_event_with_field_path_and_event_id(payload: dict, param: str) -> None:
    err = _fail(json.dumps({**payload, "event_id": "evt_1"}))
    assert (err.code, err.param, err.event_id) == (ErrorCode.BAD_EVENT, param, "evt_1")
    assert err.error_type is ErrorType.INVALID_REQUEST


def test_bad_video_frame_is_invalid_video_frames() -> None:
    err = _fail(b'{"type":"input_audio_buffer.append","video_frames":["%%"]}')
    assert (err.code, err.param) == (ErrorCode.INVALID_VIDEO_FRAMES, "video_frames[0]")


def test_non_string_event_id_is_not_echoed() -> None:
    assert _fail(b'{"type": "nope", "event_id": 5}').event_id is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
_known_types = st.sampled_from(sorted(codec.CLIENT_EVENT_TYPES))


def _only_typed(data: bytes | str) -> None:
    try:
        event = codec.decode_client_event(data)
    except InvalidEvent as exc:
        assert isinstance(exc.code, ErrorCode)
        assert isinstance(exc.message, str) and exc.message
    else:
        assert isinstance(event, ClientEvent)


@given(_json)
def test_arbitrary_json_values_yield_an_event_or_a_typed_error(value: object) -> None:
    _only_typed(json.dumps(value))


@given(_known_types, st.dictionaries(st.text(max_size=20), _json, max_size=6))
def test_known_types_with_arbitrary_fields_yield_an_event_or_a_typed_error(
    tag: str, fields: dict
) -> None:
    _only_typed(json.dumps({**fields, "type": tag}))


@given(st.binary(max_size=256))
def test_arbitrary_bytes_yield_an_event_or_a_typed_error(data: bytes) -> None:
    _only_typed(data)


@pytest.mark.parametrize("depth", [1_200, 100_000])
@pytest.mark.parametrize("event_type", ["session.heartbeat", "session.update", "response.explode"])
def test_json_nested_too_deeply_is_invalid_json_not_a_recursion_error(
    depth: int, event_type: str
) -> None:
    """Reproduction: a field nested ~1,200 deep let `RecursionError` escape."""
    data = '{"type":"' + event_type + '","junk":' + "[" * depth + "]" * depth + "}"
    assert _fail(data).code is ErrorCode.INVALID_JSON
    nested = '{"type":"session.update","session":{"extra_body":{"a":' + "[" * depth
    assert _fail(nested + "]" * depth + "}}}").code is ErrorCode.INVALID_JSON


def test_a_server_frame_nested_too_deeply_is_a_decode_error() -> None:
    import msgspec

    with pytest.raises(msgspec.DecodeError):
        codec.decode_server_event('{"type":"error","x":' + "[" * 5_000 + "]" * 5_000 + "}")
