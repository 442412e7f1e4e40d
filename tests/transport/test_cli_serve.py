"""`joyduplex serve --backend scripted` and `joyduplex client`, as a user runs them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets

from tests.served_process import joyduplex, run_client, serve

pytestmark = pytest.mark.slow


def test_serve_scripted_then_client_turn_and_metrics(tmp_path: Path) -> None:
    with serve(["--backend", "scripted"], tmp_path / "server.log") as served:
        wav_in, wav_out = tmp_path / "in.wav", tmp_path / "out.wav"
        with wave.open(str(wav_in), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(22050)
            w.writeframes((np.sin(np.arange(22050) / 5.0) * 8000).astype("<i2").tobytes())
        client = run_client(served, wav_in, wav_out)
        assert client.returncode == 0, client.stdout + client.stderr
        assert "assistant:" in client.stdout
        with wave.open(str(wav_out)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
            assert w.getnframes() > 0
        metrics = httpx.get(served.base + "/metrics").text
        assert "joyduplex_sessions_total 1" in metrics
        assert 'joyduplex_events_out_total{type="response.done"} 1' in metrics


def test_serve_refuses_a_bad_config_file_clearly(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[session]\nturn_detection = {type = "semantic_vad", eagerness = "eager"}\n')
    result = subprocess.run(
        [*joyduplex(), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "turn_detection" in result.stderr


def test_one_worker_stops_on_sigterm_closing_its_sessions_and_exits_zero(tmp_path: Path) -> None:
    """`--workers 1` runs no supervisor; SIGTERM ends it as gracefully as SIGINT."""
    log = tmp_path / "server.log"
    with serve(["--backend", "scripted"], log, stop_signal=signal.SIGTERM) as served:
        ready = httpx.get(served.base + "/readyz").json()
        assert ready["workers"]["total"] == ready["workers"]["ready"] == 1
        assert ready["worker"]["pid"] == served.process.pid  # the server is the worker

        async def scenario() -> tuple[str, int | None]:
            async with websockets.connect(served.ws_url) as ws:
                assert json.loads(await ws.recv())["type"] == "session.created"
                served.process.send_signal(signal.SIGTERM)
                closed = json.loads(await asyncio.wait_for(ws.recv(), 30))
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
                return closed["reason"], ws.close_code

        assert asyncio.run(scenario()) == ("shutdown", 1001)
        assert served.process.wait(timeout=30) == 0, log.read_text()[-5000:]
