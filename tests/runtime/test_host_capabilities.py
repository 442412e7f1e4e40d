"""The host hands the backend's ASR languages to each session (`Asr.languages`): its
`session.created` names them and a pin of another language is an `error` event."""

from __future__ import annotations

import pytest

from spec import events as ev
from tests.runtime.conftest import Harness

pytestmark = pytest.mark.anyio


async def test_session_created_names_the_asr_languages(harness: Harness) -> None:
    harness.script.asr_languages = ("en",)
    client = await harness.connect()
    (created,) = client.seen
    assert created.capabilities == ev.SessionCapabilities(input_languages=["en"])


async def test_session_created_of_an_asr_that_detects_the_language_names_none(
    harness: Harness,
) -> None:
    client = await harness.connect()
    (created,) = client.seen
    assert created.capabilities == ev.SessionCapabilities(input_languages=None)


async def test_english_only_asr_refuses_a_german_pin(harness: Harness) -> None:
    harness.script.asr_languages = ("en",)
    client = await harness.connect()
    patch = ev.SessionPatch(input_audio_transcription={"language": "de"})
    await client.send(ev.SessionUpdate(event_id="evt_de", session=patch))
    error = (await client.until("error")).error
    assert (error.type, error.code, error.param, error.event_id) == (
        "invalid_request_error",
        "unsupported_language",
        "session.input_audio_transcription.language",
        "evt_de",
    )
    # the session goes on: an English pin is applied
    patch = ev.SessionPatch(input_audio_transcription={"language": "en"})
    await client.send(ev.SessionUpdate(event_id="evt_en", session=patch))
    updated = await client.until("session.updated")
    assert updated.session.audio["input"]["transcription"] == {"language": "en"}
