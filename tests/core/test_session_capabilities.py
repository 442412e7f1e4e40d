"""The backend's capabilities reach the session as data (runtime/host.py): the ASR's
languages, which `session.created` names (docs/session-semantics.md section 1) and
`session.update` refuses to pin any other of (section 7, D36); and a VLM that works on
frames as they arrive, which gets a `PrepareFrame` effect for every frame accepted."""

from __future__ import annotations

import msgspec
import pytest

from core.session import SessionProtocol
from spec import events as ev
from spec.effects import PrepareFrame, SubmitAsr
from spec.errors import ERROR_TYPE, ErrorCode, ErrorType, InvalidSessionConfig, RemoteProtocolError
from tests.conformance.harness import jpeg, speech_pcm


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
    assert wire["capabilities"] == {"input_languages": ["en"], "function_calling": True}
    assert "capabilities" not in wire["session"]  # the configuration is unchanged


@pytest.mark.parametrize("languages", [None, ()])
def test_session_created_says_a_multilingual_asr_detects_any_language(
    languages: tuple[str, ...] | None,
) -> None:
    wire = msgspec.json.decode(
        msgspec.json.encode(_created(SessionProtocol(session_id="s", input_languages=languages)))
    )
    assert wire["capabilities"]["input_languages"] is None  # written out: null answers


def test_b37_session_created_says_whether_the_model_calls_functions() -> None:
    for calls in (True, False):
        created = _created(SessionProtocol(session_id="s", function_calling=calls))
        assert created.capabilities is not None
        assert created.capabilities.function_calling is calls


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


def _prepared_frames(protocol: SessionProtocol) -> list[PrepareFrame]:
    return [o for o in protocol.next_outputs() if isinstance(o, PrepareFrame)]


def test_a_vlm_that_prepares_frames_gets_every_accepted_frame_as_it_arrives() -> None:
    protocol = SessionProtocol(session_id="s", prepares_frames=True)
    protocol.next_outputs()
    red, green, blue = jpeg("red"), jpeg("green"), jpeg("blue")
    protocol.receive(ev.InputAudioBufferAppend(video_frames=[red, green]), 10)
    assert _prepared_frames(protocol) == [
        PrepareFrame("frame_1", red),
        PrepareFrame("frame_2", green),
    ]
    # a frame with audio in the same append
    protocol.receive(ev.InputAudioBufferAppend(audio=speech_pcm(100), video_frames=[blue]), 20)
    assert _prepared_frames(protocol) == [PrepareFrame("frame_3", blue)]
    protocol.receive(ev.InputAudioBufferAppend(audio=speech_pcm(100)), 30)
    assert _prepared_frames(protocol) == []  # no frame, nothing to prepare


def test_a_refused_append_prepares_none_of_its_frames() -> None:
    protocol = SessionProtocol(session_id="s", prepares_frames=True)
    protocol.next_outputs()
    with pytest.raises(RemoteProtocolError):  # over `max_video_frames_per_append`
        protocol.receive(ev.InputAudioBufferAppend(video_frames=[jpeg()] * 3), 10)
    assert _prepared_frames(protocol) == []


def test_without_the_capability_frames_wait_for_their_turn() -> None:
    protocol = SessionProtocol(session_id="s")
    protocol.next_outputs()
    protocol.receive(ev.InputAudioBufferAppend(video_frames=[jpeg("red")]), 10)
    protocol.receive(ev.ResponseCreate(), 20)
    outputs = protocol.next_outputs()
    assert not any(isinstance(o, PrepareFrame) for o in outputs)
