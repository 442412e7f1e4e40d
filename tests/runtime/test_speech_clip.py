"""`runtime.speech_clip`: a clip from a backend's TTS stage, the backend reached by name
through the registry (what `joyduplex bench --speech piper` speaks, with the cpu one)."""

from __future__ import annotations

import pytest

from runtime.speech_clip import SpeechUnavailable, synthesize_clip

pytestmark = pytest.mark.anyio


async def test_the_named_backend_speaks_whole_pcm16_samples_at_the_asked_rate() -> None:
    pcm = await synthesize_clip("Hello there.", backend="scripted", sample_rate_hz=24_000)
    assert pcm and len(pcm) % 2 == 0


async def test_an_unknown_backend_is_speech_unavailable_naming_the_known_ones() -> None:
    with pytest.raises(SpeechUnavailable, match="scripted"):
        await synthesize_clip("Hello.", backend="karaoke")
