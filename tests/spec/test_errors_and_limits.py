"""Error codes, error types, close codes and limits."""

from __future__ import annotations

import pytest

from spec.errors import (
    ERROR_TYPE,
    CloseCode,
    ErrorCode,
    ErrorType,
    InvalidEvent,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)
from spec.limits import MIB, Limits


def test_every_code_maps_to_exactly_one_error_type() -> None:
    assert set(ERROR_TYPE) == set(ErrorCode)
    for code in ErrorCode:
        assert isinstance(ERROR_TYPE[code], ErrorType)
    assert ERROR_TYPE[ErrorCode.INPUT_BACKPRESSURE] is ErrorType.RATE_LIMIT
    assert ERROR_TYPE[ErrorCode.RESOURCE_EXHAUSTED] is ErrorType.RATE_LIMIT
    assert ERROR_TYPE[ErrorCode.INTERNAL_ERROR] is ErrorType.SERVER
    assert ERROR_TYPE[ErrorCode.INPUT_AUDIO_BUFFER_EMPTY] is ErrorType.INVALID_REQUEST


def test_codes_and_values_are_unique() -> None:
    assert len({c.value for c in ErrorCode}) == len(ErrorCode)


def test_close_codes_follow_rfc6455() -> None:
    assert CloseCode.MESSAGE_TOO_BIG == 1009
    assert CloseCode.POLICY_VIOLATION == 1008
    assert CloseCode.INTERNAL_ERROR == 1011
    assert CloseCode.GOING_AWAY == 1001
    assert CloseCode.TRY_AGAIN_LATER == 1013


def test_protocol_error_is_abstract_and_carries_its_code() -> None:
    with pytest.raises(TypeError):
        ProtocolError("x")
    err = RemoteProtocolError("bad", code=ErrorCode.ITEM_NOT_FOUND, param="item_id", event_id="e")
    assert (err.code, err.param, err.event_id, err.error_type) == (
        ErrorCode.ITEM_NOT_FOUND,
        "item_id",
        "e",
        ErrorType.INVALID_REQUEST,
    )
    assert InvalidEvent("x").code is ErrorCode.BAD_EVENT
    assert LocalProtocolError("bug").error_type is ErrorType.SERVER


def test_limit_defaults_match_the_design() -> None:
    limits = Limits()
    assert limits.max_pending_input_bytes == 16 * MIB
    assert limits.max_pending_commits == 4
    assert limits.max_event_bytes == 15 * MIB
    assert limits.max_video_frames_per_append == 2
    assert (limits.max_context_images, limits.max_context_image_bytes) == (8, 4 * MIB)
    assert (limits.idle_timeout_s, limits.resume_grace_s) == (300.0, 30.0)


def test_limits_are_overridable_from_config_and_validated() -> None:
    assert Limits.from_mapping({"max_pending_commits": 2}).max_pending_commits == 2
    with pytest.raises(ValueError, match="max_pending_commits"):
        Limits.from_mapping({"max_pending_commits": 0})
    with pytest.raises(ValueError, match="nope"):
        Limits.from_mapping({"nope": 1})
