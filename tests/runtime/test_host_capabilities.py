"""The host hands the backend's capabilities to each session: the ASR's languages
(`Asr.languages`), which its `session.created` names and a pin of another of is an
`error` event; and whether the VLM takes frames as they arrive (`Vlm.prepares_frames`),
each accepted frame then reaching `Vlm.prepare_frame` while the session goes on."""

from __future__ import annotations

import pytest

from spec import events as ev
from tests.conformance.harness import jpeg
from tests.runtime.conftest import Harness, eventually, tone

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


async def test_frames_reach_a_vlm_that_prepares_them_as_they_arrive(harness: Harness) -> None:
    harness.script.prepares_frames = True
    client = await harness.connect()
    await client.send(ev.SessionUpdate(session=ev.SessionPatch(turn_detection=None)))
    await client.until("session.updated")
    red, green = jpeg("red"), jpeg("green")
    await client.send(ev.InputAudioBufferAppend(audio=tone(200), video_frames=[red]))
    await client.send(ev.InputAudioBufferAppend(video_frames=[green]))
    await eventually("both frames prepared", lambda: len(harness.script.prepared_frames) == 2)
    assert list(harness.script.prepared_frames) == [red, green]
    await client.send(ev.InputAudioBufferCommit())
    await client.send(ev.ResponseCreate())
    await client.until("response.done")  # the turn itself is as without preparation


async def test_a_vlm_without_the_capability_is_handed_no_frame(harness: Harness) -> None:
    client = await harness.connect()
    await client.send(ev.SessionUpdate(session=ev.SessionPatch(turn_detection=None)))
    await client.until("session.updated")
    await client.send(ev.InputAudioBufferAppend(audio=tone(200), video_frames=[jpeg()]))
    await client.send(ev.InputAudioBufferCommit())
    await client.send(ev.ResponseCreate())
    await client.until("response.done")
    assert list(harness.script.prepared_frames) == []


async def test_a_stage_that_times_its_engine_feeds_the_stage_latency_histograms() -> None:
    from backends.scripted.backend import create_backend
    from runtime.host import HostSettings, SessionHost
    from spec.limits import Limits

    backend = create_backend()
    sinks: list[object] = []
    # a batched GPU engine's stage: it hands its engine thread's timings to the sink
    backend.tts.observe_timing = sinks.append  # type: ignore[attr-defined]
    host = SessionHost(HostSettings(backend="scripted", limits=Limits()), backend=backend)
    await host.start()
    try:
        [sink] = sinks
        assert callable(sink)
        sink("tts_first_chunk", 0.2)
        count = host.metrics.value("joyduplex_stage_latency_seconds_count", stage="tts_first_chunk")
        assert count == 1
    finally:
        await host.stop()


async def test_the_hosts_event_listener_sees_every_event_a_session_sends(
    harness: Harness,
) -> None:
    """A measurement in this process (tools/browser_latency.py) reads each session's
    outgoing events off `SessionHost.event_listener`, in the order the client gets them."""
    heard: list[str] = []
    harness.host.event_listener = lambda event: heard.append(event.__struct_config__.tag)
    harness.script.reply("It is red.")
    client = await harness.connect(config={"turn_detection": None})
    await client.send(ev.InputAudioBufferAppend(audio=tone(200)))
    await client.send(ev.InputAudioBufferCommit())
    await client.send(ev.ResponseCreate())
    await client.until("response.done")
    assert heard[: len(client.tags())] == client.tags()
    assert {"session.created", "input_audio_buffer.committed", "response.created"} <= set(heard)
    assert "response.output_audio.delta" in heard
