"""Take the README's screenshot of the web UI in use: `docs/images/web-ui.png`.

    .venv/bin/python tools/web_screenshot.py [--out docs/images/web-ui.png] [--turns 3]

A real server (the transport app with the scripted backend, in a thread on 127.0.0.1, a
free port) and headless Debian Chromium (`/usr/bin/chromium`) driven by Playwright, as
the browser tests do (tests/web/conftest.py). Chromium's fake devices stand in for the
microphone (a soft tone) and the camera (a drawn desk scene with a red mug). The page
connects in push-to-talk mode with the camera on; each turn holds the talk button for a
second and releases it; the scripted ASR hears the turn's question and the scripted VLM
speaks its answer (a tone, as the scripted TTS does), so the transcript shows the user's
lines and the assistant's replies. The screenshot is taken once the last reply has played.

Needs the `test` dependency group (Playwright) and Debian's chromium (`make test`
installs both); no model is loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CHROMIUM = "/usr/bin/chromium"
DEFAULT_OUT = ROOT / "docs" / "images" / "web-ui.png"
VIEWPORT_WIDTH, VIEWPORT_HEIGHT = 1100, 600

#: (what the scripted ASR hears, what the scripted VLM answers), one per turn
TURNS = (
    ("What is on my desk?", "A red mug on a wooden desk, in front of a blue wall."),
    ("Is the mug full?", "I can't see inside it from here: tilt it towards the camera."),
    ("Thanks!", "You're welcome."),
)
FAKE_AUDIO_RATE_HZ = 48_000
CAMERA_SIZE = (320, 240)


def write_wav(path: Path, seconds: float = 2.0) -> None:
    """A soft tone, wavering like a voice, for the fake microphone."""
    t = np.arange(int(FAKE_AUDIO_RATE_HZ * seconds)) / FAKE_AUDIO_RATE_HZ
    tone = 0.2 * np.sin(2 * np.pi * (180 + 30 * np.sin(2 * np.pi * 3 * t)) * t)
    pcm = (tone * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(FAKE_AUDIO_RATE_HZ)
        out.writeframes(pcm.tobytes())


def desk_scene(width: int, height: int) -> np.ndarray:
    """RGB: a blue wall, a wooden desk, a red mug with a white handle."""
    rgb = np.zeros((height, width, 3), np.float64)
    rgb[:] = (70, 110, 170)
    desk = int(height * 0.62)
    grain = 12 * np.sin(np.arange(width) / 7.0)[None, :]
    rgb[desk:, :, 0] = 150 + grain
    rgb[desk:, :, 1] = 105 + grain * 0.7
    rgb[desk:, :, 2] = 60
    left, right = int(width * 0.38), int(width * 0.58)
    top, bottom = int(height * 0.36), int(height * 0.78)
    rgb[top:bottom, left:right] = (205, 35, 35)
    rgb[top : top + 6, left:right] = (160, 20, 20)
    yy, xx = np.mgrid[0:height, 0:width]
    cy, cx = (top + bottom) / 2, right + 4
    ring = np.hypot(yy - cy, xx - cx)
    handle = (ring > 14) & (ring < 22) & (xx > right)
    rgb[handle] = (235, 235, 235)
    return np.clip(rgb, 0, 255)


def write_y4m(path: Path, rgb: np.ndarray) -> None:
    """A few frames of one picture, as YUV4MPEG2 4:2:0 (BT.601 studio range)."""
    height, width = rgb.shape[:2]
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 16 + (65.738 * r + 129.057 * g + 25.064 * b) / 256
    cb = 128 + (-37.945 * r - 74.494 * g + 112.439 * b) / 256
    cr = 128 + (112.439 * r - 94.154 * g - 18.285 * b) / 256

    def half(plane: np.ndarray) -> np.ndarray:
        halved: np.ndarray = plane.reshape(height // 2, 2, width // 2, 2).mean(axis=(1, 3))
        return halved

    planes = b"".join(
        np.round(p).clip(0, 255).astype(np.uint8).tobytes() for p in (y, half(cb), half(cr))
    )
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F30:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(10):
            out.write(b"FRAME\n" + planes)


class ScriptedServer:
    """The transport app with the scripted backend, served by uvicorn in a thread."""

    def __init__(self, turns: tuple[tuple[str, str], ...]) -> None:
        import uvicorn

        from backends.scripted.backend import create_backend
        from backends.scripted.script import Script
        from transport.app import create_app
        from transport.server import RealtimeServer
        from transport.settings import ServerSettings

        script = Script()
        script.latency["tts"] = 0.02
        for question, answer in turns:
            script.say(question).reply(answer)
        settings = ServerSettings(backend="scripted", port=0)
        # a loaded machine must not refuse the one session (overload shedding off)
        limits = msgspec.structs.replace(settings.limits, shed_loop_lag_ms=0)
        settings = dataclasses.replace(settings, limits=limits)
        app = create_app(settings, backend=create_backend(script=script))
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self._server = RealtimeServer(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise SystemExit("the scripted server did not start")
            time.sleep(0.05)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


def wait_until(page: Any, what: str, check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        page.wait_for_timeout(50)
    raise SystemExit(f"timed out waiting for {what}")


def played(page: Any) -> int:
    """How many replies have played out."""
    count: int = page.evaluate("window.joyduplex.metrics.drained.length")
    return count


def take_turn(page: Any, turn: int) -> None:
    """Hold the talk button a second, release it, wait for the reply to play out."""
    page.locator("#talk").hover()
    page.mouse.down()
    page.wait_for_selector("#talk.held")
    page.wait_for_timeout(1000)
    page.mouse.up()
    wait_until(page, f"reply {turn + 1} to play out", lambda: played(page) > turn, 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write")
    parser.add_argument(
        "--turns", type=int, default=3, choices=range(1, len(TURNS) + 1), help="turns to take"
    )
    args = parser.parse_args()
    from playwright import sync_api

    turns = TURNS[: args.turns]
    with tempfile.TemporaryDirectory() as folder, ScriptedServer(turns) as url:
        wav, y4m = Path(folder) / "mic.wav", Path(folder) / "camera.y4m"
        write_wav(wav)
        write_y4m(y4m, desk_scene(*CAMERA_SIZE))
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--use-fake-device-for-media-stream",
                    "--use-fake-ui-for-media-stream",
                    f"--use-file-for-fake-audio-capture={wav}",
                    f"--use-file-for-fake-video-capture={y4m}",
                    "--autoplay-policy=no-user-gesture-required",
                ],
            )
            try:
                page = browser.new_page(
                    viewport={"width": VIEWPORT_WIDTH, "height": VIEWPORT_HEIGHT}
                )
                page.goto(f"{url}/?mode=ptt")
                page.wait_for_selector("body[data-loaded=true]")
                page.click("#camera")
                page.click("#connect")
                page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
                for turn in range(len(turns)):
                    take_turn(page, turn)
                page.wait_for_timeout(300)  # the last indicators settle
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out))
            finally:
                browser.close()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
