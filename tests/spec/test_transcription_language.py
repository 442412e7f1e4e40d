"""`audio.input.transcription.language` (GA) / `input_audio_transcription.language` (beta):
the ASR language is detected unless the session sets it."""

from __future__ import annotations

import pytest

from spec.errors import ErrorCode, InvalidSessionConfig
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


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        (
            {"audio": {"input": {"transcription": {"language": "de"}}}},
            "session.audio.input.transcription.language",
        ),
        (
            {"input_audio_transcription": {"language": "de-DE"}},
            "session.input_audio_transcription.language",
        ),
    ],
)
def test_english_only_asr_refuses_a_german_pin(patch: dict[str, object], param: str) -> None:
    base = SessionConfig(transcription_language="en")
    with pytest.raises(InvalidSessionConfig) as info:
        validate_session(patch, base, languages=("en",))
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert info.value.param == param
    assert "this server's speech recognition knows: en" in str(info.value)
    assert base.transcription_language == "en"  # unchanged


@pytest.mark.parametrize("language", ["en", "EN", "en-GB", "en_US", None])
def test_a_pin_matches_a_known_language_by_its_primary_subtag(language: str | None) -> None:
    patch = {"audio": {"input": {"transcription": {"language": language}}}}
    assert validate_session(patch, languages=("en",)).transcription_language == language


def test_without_a_language_list_any_pin_is_accepted() -> None:
    patch = {"audio": {"input": {"transcription": {"language": "yue"}}}}
    assert validate_session(patch).transcription_language == "yue"
    assert validate_session(patch, languages=()).transcription_language == "yue"


def test_a_language_kept_from_before_is_not_checked_again() -> None:
    """D36: an operator's default the ASR does not know fails no later update that leaves
    the language alone."""
    base = SessionConfig(transcription_language="de")
    kept = validate_session(
        {"audio": {"input": {"transcription": {"model": "x"}}}}, base, languages=("en",)
    )
    assert kept.transcription_language == "de"
