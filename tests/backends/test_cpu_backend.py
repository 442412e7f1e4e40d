"""The whole CPU backend through the registry: load, warm up, and one spoken camera turn."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

from backends.base import (
    VAD_FRAME_SAMPLES,
    AsrRequest,
    PromptContext,
    TtsRequest,
    VlmAction,
    VlmDecisionResult,
    VlmRequest,
)
from backends.registry import load_backend
from tests.backends.cpu_audio import VAD_START_THRESHOLD
from tests.model_margins import expect_above

from .conftest import Speech

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_speech_turn_runs_vad_asr_describer_and_tts(
    cpu_speech: Speech, caplog: pytest.LogCaptureFixture
) -> None:
    for module in ("onnxruntime", "faster_whisper", "hibari", "piper", "PIL.Image"):
        pytest.importorskip(module)
    image = pytest.importorskip("PIL.Image")
    buffer = io.BytesIO()
    image.new("RGB", (320, 240), (200, 10, 20)).save(buffer, format="JPEG")
    frame = buffer.getvalue()
    utterance = cpu_speech("What colour is this?", 16_000)

    caplog.set_level(logging.INFO, logger="joyduplex.backends.cpu")
    backend = load_backend("cpu")
    async with backend:
        await backend.warmup()
        assert backend.ready
        assert backend.vad is not None and backend.asr is not None

        state = backend.vad.new_state()
        usable = len(utterance) // VAD_FRAME_SAMPLES * VAD_FRAME_SAMPLES
        frames = utterance[:usable].reshape(-1, VAD_FRAME_SAMPLES)
        probabilities = [float((await backend.vad.score([state], f[None]))[0]) for f in frames]
        expect_above(max(probabilities), VAD_START_THRESHOLD, "Silero on 'What colour is this?'")

        transcript = await backend.asr.transcribe(AsrRequest("turn-1", utterance))
        assert "colo" in transcript.text.lower()

        context = PromptContext("Describe the camera.", (), transcript.text, (frame,))
        items = [item async for item in backend.vlm.generate(VlmRequest("turn-1", context))]
        decision = items[-1]
        assert isinstance(decision, VlmDecisionResult)
        assert decision.action is VlmAction.SPEAK
        assert "red" in decision.text

        chunks = [c async for c in backend.tts.synthesize(TtsRequest("turn-1", decision.text))]
        audio = np.frombuffer(b"".join(c.pcm16 for c in chunks), dtype="<i2")
        assert 0.5 < len(audio) / backend.tts.output_sample_rate_hz < 3.0  # plausible, loose
    assert not backend.ready

    loaded = [r.getMessage() for r in caplog.records if r.name == "joyduplex.backends.cpu"]
    for stage in ("vad", "asr", "tts"):
        assert any(m.startswith(f"{stage}: loading") for m in loaded), loaded
        assert any(m.startswith(f"{stage}: loaded in") for m in loaded), loaded
