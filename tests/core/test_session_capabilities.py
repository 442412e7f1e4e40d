"""The ASR's languages reach the session as data (runtime/host.py): `session.created`
names them (docs/session-semantics.md section 1) and `session.update` refuses to pin any
other (section 7, D36)."""

from __future__ import annotations

import msgspec
import pytest

from core.session import SessionProtocol
from spec import events as ev
from spec.effects import SubmitAsr
from spec.errors import ERROR_TYPE, ErrorCode, ErrorType, InvalidSessionConfig
from tests.conformance.harness import speech_pcm


def _created(protocol: SessionProtocol) -> ev.SessionCreated:
    (created,) = protocol.next_outputs()
    assert isinstance(created, ev.SessionCreated)
    return created


def _pin(language: str | None, *, beta: bool = False) -> ev.SessionUpdate:
    transcription = {"language": language}
    if beta:
        return ev.SessionUpdate(
            event_id="evt_pin", session=ev.SessionPatch(input_audio_transcription=transcription)
        )
    return ev.SessionUpdate(
        event_id="evt_pin",
        session=msgspec.convert(
            {"audio": {"input": {"transcription": transcription}}}, ev.SessionPatch
        ),
    )


def test_session_created_names_the_asr_languages() -> None:
    created = _created(SessionProtocol(session_id="s", input_languages=("en",)))
    assert created.capabilities == ev.SessionCapabilities(input_languages=["en"])
    wire = msgspec.json.decode(msgspec.json.encode(created))
    assert wire["capabilities"] == {"input_languages": ["en"]}
    assert "capabilities" not in wire["session"]  # the configuration is unchanged


@pytest.mark.parametrize("languages", [None, ()])
def test_session_created_says_a_multilingual_asr_detects_any_language(
    languages: tuple[str, ...] | None,
) -> None:
    wire = msgspec.json.decode(
        msgspec.json.encode(_created(SessionProtocol(session_id="s", input_languages=languages)))
    )
    assert wire["capabilities"] == {"input_languages": None}  # written out: null answers


@pytest.mark.parametrize(
    ("beta", "param"),
    [
        (False, "session.audio.input.transcription.language"),
        (True, "session.input_audio_transcription.language"),
    ],
)
def test_english_only_asr_refuses_a_german_pin(beta: bool, param: str) -> None:
    protocol = SessionProtocol(session_id="s", input_languages=("en",))
    protocol.next_outputs()
    with pytest.raises(InvalidSessionConfig) as info:
        protocol.receive(_pin("de", beta=beta), 10)
    assert info.value.code is ErrorCode.UNSUPPORTED_LANGUAGE
    assert ERROR_TYPE[info.value.code] is ErrorType.INVALID_REQUEST
    assert info.value.param == param
    assert protocol.next_outputs() == []  # refused: nothing changed, nothing emitted
    assert protocol.config.transcription_language is None
    error = protocol.error_event(info.value).error
    assert (error.type, error.code, error.param, error.event_id) == (
        "invalid_request_error",
        "unsupported_language",
        param,
        "evt_pin",
    )
    assert "knows: en" in error.message


@pytest.mark.parametrize("language", ["en", "en-US", "EN", None])
def test_english_only_asr_accepts_an_english_pin_and_detection(language: str | None) -> None:
    protocol = SessionProtocol(session_id="s", input_languages=("en",))
    protocol.next_outputs()
    protocol.receive(_pin(language), 10)
    (updated,) = protocol.next_outputs()
    assert isinstance(updated, ev.SessionUpdated)
    assert protocol.config.transcription_language == language


def test_a_multilingual_asr_takes_any_pin_to_its_requests() -> None:
    protocol = SessionProtocol(session_id="s")
    protocol.next_outputs()
    protocol.receive(_pin("de"), 10)
    protocol.receive(ev.InputAudioBufferAppend(audio=speech_pcm(300)), 20)
    protocol.receive(ev.InputAudioBufferCommit(), 30)
    protocol.receive(ev.ResponseCreate(), 40)
    submits = [o for o in protocol.next_outputs() if isinstance(o, SubmitAsr)]
    assert [s.language for s in submits] == ["de"]
