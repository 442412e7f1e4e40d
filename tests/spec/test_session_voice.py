"""A session `voice` is checked against the TTS backend's voices at `session.update`, so
a name the backend cannot speak (say "alloy" for Qwen3-TTS) is refused with a typed error
instead of failing mid-reply. The voices arrive as data: spec never imports a backend."""

from __future__ import annotations

import pytest

from spec.errors import ErrorCode, InvalidSessionConfig
from spec.session_config import SessionConfig, validate_session

VOICES = frozenset({"Vivian", "Ryan"})


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"audio": {"output": {"voice": "alloy"}}}, "session.audio.output.voice"),
        ({"voice": "alloy"}, "session.voice"),
    ],
)
def test_an_unknown_voice_is_refused_with_its_path(patch: dict[str, object], param: str) -> None:
    base = SessionConfig(voice="Vivian")
    with pytest.raises(InvalidSessionConfig) as info:
        validate_session(patch, base, voices=VOICES)
    assert info.value.code is ErrorCode.UNSUPPORTED_VOICE
    assert info.value.param == param
    assert "Ryan, Vivian" in str(info.value)
    assert base.voice == "Vivian"  # unchanged


@pytest.mark.parametrize("voice", ["Vivian", "vivian", " RYAN "])
def test_a_known_voice_is_accepted_case_insensitively(voice: str) -> None:
    config = validate_session({"audio": {"output": {"voice": voice}}}, voices=VOICES)
    assert config.voice == voice


def test_without_a_voice_list_any_voice_and_null_are_accepted() -> None:
    assert validate_session({"voice": "alloy"}).voice == "alloy"
    assert validate_session({"voice": None}, voices=VOICES).voice is None
