"""The GPU check (tests/gpu/check_gpu.py), run only where CUDA and vLLM are present."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not _cuda(), reason="needs CUDA, torch and vLLM"),
]


def test_gpu_check_measures_asr_and_vlm_with_and_without_graphs(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "check_gpu.py"), "--out", str(out), "--budget-s", "450"],
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert out.exists(), done.stderr[-3000:]
    report = json.loads(out.read_text())
    for stage, key in (("asr", "latency_3s_audio_32_tokens_ms"), ("vlm", "ttft_8_frames_ms")):
        for graphs in ("graphs_on", "graphs_off"):
            assert key in report[stage][graphs], report[stage][graphs]
    assert done.returncode == 0, done.stdout[-3000:]
