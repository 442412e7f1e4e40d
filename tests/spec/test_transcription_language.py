"""`audio.input.transcription.language` (GA) / `input_audio_transcription.language` (beta):
the ASR language is detected unless the session sets it."""

from __future__ import annotations

import pytest

from spec.errors import InvalidSessionConfig
from spec.session_config import SessionConfig, validate_session


def test_language_is_detected_by_default() -> None:
    config = validate_session({})
    assert config.transcription_language is None
    public = config.public("sess_1", profile="speech", epoch=0)
    assert public.audio["input"]["transcription"] == {"language": None}


@pytest.mark.parametrize(
    "patch",
    [
        {"audio": {"input": {"transcription": {"language": "zh"}}}},
        {"input_audio_transcription": {"language": "zh"}},
    ],
)
def test_the_session_sets_the_language(patch: dict[str, object]) -> None:
    config = validate_session(patch)
    assert config.transcription_language == "zh"
    assert config.public("s", profile="speech", epoch=0).audio["input"]["transcription"] == {
        "language": "zh"
    }


def test_null_goes_back_to_detection_and_other_fields_keep_it() -> None:
    base = validate_session({"audio": {"input": {"transcription": {"language": "de-DE"}}}})
    assert base.transcription_language == "de-DE"
    kept = validate_session({"audio": {"input": {"transcription": {"model": "x"}}}}, base)
    assert kept.transcription_language == "de-DE"
    reset = validate_session({"audio": {"input": {"transcription": {"language": None}}}}, base)
    assert reset.transcription_language is None


@pytest.mark.parametrize("language", ["", "e", 7, "en; drop", "language English"])
def test_a_bad_language_is_refused_with_its_path(language: object) -> None:
    base = SessionConfig()
    with pytest.raises(InvalidSessionConfig) as info:
        validate_session({"audio": {"input": {"transcription": {"language": language}}}}, base)
    assert info.value.param == "session.audio.input.transcription.language"
