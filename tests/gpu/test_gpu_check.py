"""The GPU checks, run only where CUDA is present: `check_gpu.py` (needs vLLM) and
`check_device.py` (the transformers runtime and the TTS; what the lent machine runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.gpu.check_runner import run_check


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _vllm() -> bool:
    return importlib.util.find_spec("vllm") is not None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not _cuda(), reason="needs CUDA and torch"),
]


@pytest.mark.skipif(
    not _cuda() or importlib.util.find_spec("qwen_tts") is None,
    reason="needs CUDA, torch and qwen-tts-hf",
)
def test_gpu_device_check_measures_every_part_with_and_without_graphs(tmp_path: Path) -> None:
    report, done = run_check("check_device.py", tmp_path / "report.json")
    for part, key in (("asr", "latency_3s_audio_32_tokens_ms"), ("vlm", "ttft_8_frames_ms")):
        for graphs in ("graphs_on", "graphs_off"):
            assert key in report[part][graphs], report[part][graphs]
    assert report["vlm"]["graphs_on"]["graph_captured"] is True
    for part in ("e2e_graphs_on", "e2e_graphs_off"):
        assert report[part]["turns_measured"] == 5, report[part]
    vad = report["server_vad"]  # graphs on only, at least 10 turns after a warm-up
    assert vad["graphs"] == "on" and vad["turns_measured"] >= 10, vad
    for key in ("end_of_speech_to_first_audio_ms", "commit_to_first_audio_ms"):
        assert vad[key]["n"] >= 10 and vad[key]["p90"] >= vad[key]["p50"] > 0, vad[key]
    assert {"vlm", "tts"} <= set(vad["stage_mean_s"]), vad["stage_mean_s"]
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.skipif(not _cuda() or not _vllm(), reason="needs CUDA, torch and vLLM")
def test_gpu_check_measures_asr_and_vlm_with_and_without_graphs(tmp_path: Path) -> None:
    report, done = run_check("check_gpu.py", tmp_path / "report.json", budget_s=450)
    for stage, key in (("asr", "latency_3s_audio_32_tokens_ms"), ("vlm", "ttft_8_frames_ms")):
        for graphs in ("graphs_on", "graphs_off"):
            assert key in report[stage][graphs], report[stage][graphs]
    assert done.returncode == 0, done.stdout[-3000:]
