"""`joyduplex serve --backend scripted` and `joyduplex client`, as a user runs them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _joyduplex() -> list[str]:
    exe = shutil.which("joyduplex", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "transport.cli"]


def test_serve_scripted_then_client_turn_and_metrics(tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [*_joyduplex(), "serve", "--backend", "scripted", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        wav_in, wav_out = tmp_path / "in.wav", tmp_path / "out.wav"
        with wave.open(str(wav_in), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(22050)
            w.writeframes((np.sin(np.arange(22050) / 5.0) * 8000).astype("<i2").tobytes())
        client = subprocess.run(
            [
                *_joyduplex(),
                "client",
                "--url",
                f"ws://127.0.0.1:{port}/v1/realtime",
                "--wav",
                str(wav_in),
                "--out",
                str(wav_out),
                "--timeout",
                "30",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stdout + client.stderr
        assert "assistant:" in client.stdout
        with wave.open(str(wav_out)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
            assert w.getnframes() > 0
        metrics = httpx.get(base + "/metrics").text
        assert "joyduplex_sessions_total 1" in metrics
        assert 'joyduplex_events_out_total{type="response.done"} 1' in metrics
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
    assert server.returncode == 0, (tmp_path / "server.log").read_text()


def test_serve_refuses_a_bad_config_file_clearly(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[session]\nturn_detection = {type = "semantic_vad"}\n')
    result = subprocess.run(
        [*_joyduplex(), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "turn_detection" in result.stderr
