"""The one public session validator: formats first, then turn detection (B9, B25)."""

from __future__ import annotations

import pytest

from spec.errors import ErrorCode, InvalidSessionConfig
from spec.events import SessionPatch
from spec.session_config import (
    EAGERNESS,
    AudioFormatSpec,
    SessionConfig,
    TurnDetection,
    validate_session,
)


def _refused(patch: dict, base: SessionConfig | None = None) -> InvalidSessionConfig:
    with pytest.raises(InvalidSessionConfig) as info:
        validate_session(patch, base)
    return info.value


def test_defaults_are_pcm16_16k_in_24k_out_manual_turns() -> None:
    cfg = validate_session({})
    assert cfg.input_format == AudioFormatSpec("pcm16", 16_000)
    assert cfg.output_format == AudioFormatSpec("pcm16", 24_000)
    assert cfg.turn_detection is None
    assert cfg.auto_response is False


def test_server_vad_defaults_are_filled_in() -> None:
    cfg = validate_session({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
    assert cfg.turn_detection == TurnDetection(
        threshold=0.5,
        prefix_padding_ms=300,
        silence_duration_ms=500,
        min_speech_duration_ms=96,
        create_response=True,
        interrupt_response=True,
    )


def test_b9_interrupt_response_false_is_valid() -> None:
    cfg = validate_session({"turn_detection": {"type": "server_vad", "interrupt_response": False}})
    assert cfg.turn_detection is not None
    assert cfg.turn_detection.interrupt_response is False


def test_ga_nesting_wins_over_flat_beta_spelling() -> None:
    cfg = validate_session(
        {
            "turn_detection": None,
            "input_audio_format": "g711_ulaw",
            "audio": {
                "input": {
                    "turn_detection": {"type": "server_vad", "threshold": 0.7},
                    "format": {"type": "audio/pcm", "rate": 24000},
                }
            },
        }
    )
    assert cfg.input_format == AudioFormatSpec("pcm16", 24_000)
    assert cfg.turn_detection is not None and cfg.turn_detection.threshold == 0.7


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("pcm16", AudioFormatSpec("pcm16", 16_000)),
        ("pcm_f32le", AudioFormatSpec("pcm_f32le", 16_000)),
        ("g711_ulaw", AudioFormatSpec("g711_ulaw", 8_000)),
        ("audio/pcma", AudioFormatSpec("g711_alaw", 8_000)),
        ({"type": "audio/pcm", "rate": 48000}, AudioFormatSpec("pcm16", 48_000)),
        ({"type": "pcm16", "sample_rate_hz": 8000}, AudioFormatSpec("pcm16", 8_000)),
    ],
)
def test_accepted_input_formats(value: object, expected: AudioFormatSpec) -> None:
    assert validate_session({"audio": {"input": {"format": value}}}).input_format == expected


def test_flat_sample_rate_applies_to_the_input_format() -> None:
    cfg = validate_session({"input_audio_format": "pcm16", "sample_rate_hz": 24000})
    assert cfg.input_format == AudioFormatSpec("pcm16", 24_000)
    assert validate_session({"sample_rate_hz": 44100}).input_format.rate_hz == 44_100


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"audio": {"input": {"format": "mp3"}}}, "session.audio.input.format"),
        ({"input_audio_format": "opus"}, "session.input_audio_format"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 4000}}}},
            "session.audio.input.format.rate",
        ),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 96000}}}},
            "session.audio.input.format.rate",
        ),
        ({"sample_rate_hz": 7999}, "session.sample_rate_hz"),
        ({"audio": {"output": {"format": "flac"}}}, "session.audio.output.format"),
        ({"output_audio_format": "mp3"}, "session.output_audio_format"),
    ],
)
def test_unsupported_formats_are_refused_with_their_param(patch: dict, param: str) -> None:
    err = _refused(patch)
    assert (err.code, err.param) == (ErrorCode.UNSUPPORTED_AUDIO_FORMAT, param)


_TD = "session.audio.input.turn_detection"


@pytest.mark.parametrize(
    ("td", "param"),
    [
        ({"type": "near_field_vad"}, f"{_TD}.type"),
        ({"type": "semantic_vad", "eagerness": "eager"}, f"{_TD}.eagerness"),
        ({"type": "semantic_vad", "eagerness": 2}, f"{_TD}.eagerness"),
        ({"type": "semantic_vad", "silence_duration_ms": 300}, f"{_TD}.silence_duration_ms"),
        ({"type": "semantic_vad", "create_response": 1}, f"{_TD}.create_response"),
        ({"type": "server_vad", "eagerness": "low"}, f"{_TD}.eagerness"),
        ({"type": "server_vad", "threshold": 0.15}, f"{_TD}.threshold"),
        ({"type": "server_vad", "threshold": 0.0}, f"{_TD}.threshold"),
        ({"type": "server_vad", "threshold": 1.01}, f"{_TD}.threshold"),
        ({"type": "server_vad", "threshold": float("inf")}, f"{_TD}.threshold"),
        ({"type": "server_vad", "threshold": "high"}, f"{_TD}.threshold"),
        ({"type": "server_vad", "threshold": True}, f"{_TD}.threshold"),
        ({"type": "server_vad", "silence_duration_ms": -1}, f"{_TD}.silence_duration_ms"),
        ({"type": "server_vad", "prefix_padding_ms": float("nan")}, f"{_TD}.prefix_padding_ms"),
        ({"type": "server_vad", "min_speech_duration_ms": "96"}, f"{_TD}.min_speech_duration_ms"),
        ({"type": "server_vad", "create_response": "yes"}, f"{_TD}.create_response"),
        ({"type": "server_vad", "interrupt_response": 0}, f"{_TD}.interrupt_response"),
        ({"type": "server_vad", "silence_ms": 300}, f"{_TD}.silence_ms"),
    ],
)
def test_b9_invalid_turn_detection_is_refused_with_its_param(td: dict, param: str) -> None:
    err = _refused({"audio": {"input": {"turn_detection": td}}})
    assert (err.code, err.param) == (ErrorCode.UNSUPPORTED_TURN_DETECTION, param)


def test_flat_turn_detection_errors_name_the_flat_path() -> None:
    err = _refused({"turn_detection": {"type": "server_vad", "threshold": 2}})
    assert err.param == "session.turn_detection.threshold"


def test_threshold_upper_bound_is_inclusive() -> None:
    cfg = validate_session({"turn_detection": {"type": "server_vad", "threshold": 1}})
    assert cfg.turn_detection is not None and cfg.turn_detection.threshold == 1.0


def test_formats_are_checked_before_turn_detection() -> None:
    err = _refused(
        {"input_audio_format": "mp3", "turn_detection": {"type": "semantic_vad", "eagerness": 9}}
    )
    assert err.code is ErrorCode.UNSUPPORTED_AUDIO_FORMAT


def test_a_refused_update_leaves_the_base_unchanged() -> None:
    base = validate_session({"turn_detection": {"type": "server_vad"}})
    before = repr(base)
    _refused({"voice": "x", "turn_detection": {"type": "server_vad", "threshold": 9}}, base)
    assert repr(base) == before


def test_patches_compose_on_top_of_the_base() -> None:
    base = validate_session({"instructions": "be brief", "turn_detection": {"type": "server_vad"}})
    cfg = validate_session({"voice": "joe"}, base)
    assert (cfg.instructions, cfg.voice) == ("be brief", "joe")
    assert cfg.turn_detection == base.turn_detection
    assert validate_session({"turn_detection": None}, base).turn_detection is None


def test_extra_body_auto_response_and_modalities() -> None:
    cfg = validate_session({"extra_body": {"auto_response": True, "k": 1}, "modalities": ["text"]})
    assert cfg.auto_response is True
    assert cfg.extra_body == {"auto_response": True, "k": 1}
    assert cfg.output_modalities == ("text",)
    assert _refused({"extra_body": {"auto_response": "yes"}}).param == (
        "session.extra_body.auto_response"
    )
    assert _refused({"output_modalities": ["video"]}).code is ErrorCode.BAD_EVENT


def test_wrong_types_in_a_raw_mapping_name_their_path() -> None:
    err = _refused({"audio": {"input": {"turn_detection": 5}}})
    assert err.code is ErrorCode.BAD_EVENT
    assert err.param == "session.audio.input.turn_detection"


def test_decoded_patch_and_raw_mapping_take_the_same_path() -> None:
    patch = SessionPatch(voice="joe", idle_timeout_s=10.0)
    assert validate_session(patch) == validate_session({"voice": "joe", "idle_timeout_s": 10})


def test_public_object_has_ga_nesting_and_flat_echoes() -> None:
    cfg = validate_session(
        {
            "audio": {
                "input": {"turn_detection": {"type": "server_vad"}},
                "output": {"voice": "joe", "format": "pcm16"},
            },
        }
    )
    obj = cfg.public("sess_1", profile="speech", epoch=3)
    assert obj.audio["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    assert obj.audio["output"]["voice"] == "joe"
    assert obj.turn_detection == obj.audio["input"]["turn_detection"]
    assert (obj.input_audio_format, obj.epoch, obj.id) == ("pcm16", 3, "sess_1")


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto", None])
def test_b32_semantic_vad_is_accepted_with_its_eagerness_and_echoed_as_given(
    eagerness: str | None,
) -> None:
    td: dict = {"type": "semantic_vad", "interrupt_response": False}
    if eagerness is not None:
        td["eagerness"] = eagerness
    cfg = validate_session({"audio": {"input": {"turn_detection": td}}})
    assert cfg.turn_detection is not None
    assert cfg.turn_detection.public() == {
        "type": "semantic_vad",
        "eagerness": eagerness or "auto",
        "create_response": True,
        "interrupt_response": False,
    }
    policy = cfg.turn_detection.end_of_turn
    assert policy == EAGERNESS[eagerness or "auto"]
    assert EAGERNESS["auto"] == EAGERNESS["medium"]
    assert [EAGERNESS[e].max_wait_ms for e in ("low", "medium", "high")] == [8000, 4000, 2000]


def test_b32_server_vad_has_no_end_of_turn_policy_and_echoes_no_eagerness() -> None:
    cfg = validate_session({"turn_detection": {"type": "server_vad"}})
    assert cfg.turn_detection is not None and cfg.turn_detection.end_of_turn is None
    assert "eagerness" not in cfg.turn_detection.public()


@pytest.mark.parametrize(("value", "cap"), [(1, 1), (4096, 4096), (300, 300), ("inf", None)])
def test_max_output_tokens_is_an_integer_up_to_4096_or_inf_and_is_echoed(
    value: int | str, cap: int | None
) -> None:
    cfg = validate_session({"max_output_tokens": value})
    assert cfg.max_output_tokens == cap
    assert cfg.public("sess_1", profile="speech", epoch=0).max_output_tokens == value
    assert validate_session({"voice": "joe"}, cfg).max_output_tokens == cap  # kept
    assert validate_session({"max_output_tokens": None}, cfg).max_output_tokens is None


def test_max_output_tokens_defaults_to_inf_in_the_echo() -> None:
    assert SessionConfig().max_output_tokens is None
    assert SessionConfig().public("s", profile="speech", epoch=0).max_output_tokens == "inf"


@pytest.mark.parametrize("value", [0, -1, 4097, 1.5, True, "INF", "10", [5]])
def test_bad_max_output_tokens_is_refused_with_its_param(value: object) -> None:
    base = validate_session({"max_output_tokens": 64})
    err = _refused({"max_output_tokens": value}, base)
    assert (err.code, err.param) == (ErrorCode.BAD_EVENT, "session.max_output_tokens")
    assert base.max_output_tokens == 64
