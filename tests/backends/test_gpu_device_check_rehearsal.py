"""Slow: the lent GPU machine's check (tests/gpu/check_device.py) rehearsed on the CPU.

The lent machine has no vLLM, so its check runs the transformers runtime (static KV
cache, the decode step a CUDA Graph) and the Qwen3-TTS runtimes at real sizes, and the
whole turn through `joyduplex serve --backend gpu`. `JOYDUPLEX_GPU_CHECK_REHEARSAL=1`
runs the very same script here with the same configs at toy sizes, float32, eager
only, so the one call a lent session gets cannot fail on a script bug: every part must
report its figures (the CUDA Graph ones say they were skipped on a CPU), and the stages
pass under the device audit. The timings are CPU noise and are not asserted. It needs
qwen-tts-hf (`make test-gpu-path` has it) and imports no vLLM.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tests.gpu.check_runner import run_check

if importlib.util.find_spec("qwen_tts") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs torch and qwen-tts-hf (make test-gpu-path)", allow_module_level=True)

pytestmark = pytest.mark.slow


def test_gpu_device_check_rehearsed_on_cpu_reports_every_part(tmp_path: Path) -> None:
    env = {**os.environ, "JOYDUPLEX_GPU_CHECK_REHEARSAL": "1", "HF_HUB_OFFLINE": "1"}
    report, done = run_check("check_device.py", tmp_path / "report.json", env=env)
    assert report["rehearsal_on_cpu"] is True
    assert "vLLM was not exercised" in report["vllm"]
    asr, vlm, tts = (report[part]["graphs_off"] for part in ("asr", "vlm", "tts"))
    assert asr["tokens"] == 32 and asr["latency_3s_audio_32_tokens_ms"] > 0, asr
    for frames in (1, 8):
        assert vlm[f"ttft_{frames}_frames_ms"] > 0, vlm
        assert vlm[f"decode_tokens_per_s_{frames}_frames"] > 0, vlm
    assert vlm["prompt_tokens_8_frames"] > vlm["prompt_tokens_1_frames"]
    camera = vlm["camera_turn_8_frames"]  # the previous turn's KV kept, its frame prepared
    assert 0 < camera["reused_tokens"] < camera["prompt_tokens"], camera
    assert camera["images_encoded"] == {"cold": 8, "reused": 1, "reused_prepared": 0}, camera
    batched = report["vlm_batched"]["graphs_off"]  # continuous batching's decode step
    assert "error" not in batched, batched
    assert all(batched[f"batch_{b}"]["tokens_per_s"] > 0 for b in (1, 8, 32)), batched
    assert batched["tokens_per_s_ratio_32_to_1"] > 0, batched
    assert tts["ttfa_ms"] > 0 and tts["rtf"] > 0, tts
    assert tts["streams_in_real_time"] == int(1 / tts["rtf"]), tts
    streams = report["tts_batched"]["graphs_off"]  # the batched TTS at batch 1, 8, 32
    assert "error" not in streams, streams
    for batch in (1, 8, 32):
        figures = streams[f"batch_{batch}"]
        assert figures["step_ms"] > 0 and not figures["errors"], figures
        assert figures["first_chunk_ms"]["p95"] >= figures["first_chunk_ms"]["p50"] > 0
    assert streams["speaker_prefixes_computed"] == 1, streams
    audit = report["device_audit"]  # mixed placement under the audit (all on the CPU here)
    assert audit["passed"] is True and "error" not in audit, audit
    assert set(audit["stages"]) == {"asr", "vlm", "tts"}, audit
    assert all(stage["passed"] for stage in audit["stages"].values()), audit
    e2e = report["e2e_graphs_off"]
    assert e2e["turns_measured"] == 5 and e2e["end_of_commit_to_first_audio_p50_ms"] > 0, e2e
    assert "skipped" in report["e2e_graphs_on"]  # no CUDA Graphs on a CPU
    vad = report["server_vad"]  # eager here; fewer turns than the lent machine's 10
    assert "error" not in vad and vad["turns_measured"] >= vad["turns_asked"] >= 3, vad
    assert "vad" in vad["vad"], vad  # which VAD served the turns
    ends = ("speech_stopped", "committed", "first_audio")  # in the order they come
    latencies = [vad[f"end_of_speech_to_{end}_ms"] for end in ends]
    for figure in [*latencies, vad["commit_to_first_audio_ms"]]:
        assert figure["n"] >= vad["turns_asked"] and figure["p90"] >= figure["p50"] > 0, vad
    assert [f["p50"] for f in latencies] == sorted(f["p50"] for f in latencies), vad
    stages = vad["stage_mean_s"]
    assert {"vlm", "tts"} <= set(stages) and all(s["mean_s"] > 0 for s in stages.values())
    live = vad["live_partials"]
    assert live["partials_answered"] + live["commit_asr_requests"] >= vad["turns_asked"], live
    assert set(vad["preemptive_responses"]) >= {"started", "adopted", "discarded"}, vad
    assert all(not turn["errors"] for turn in vad["turns"]), vad["turns"]
    talking = report["talking_sessions"]  # 2 then 4 sessions at once, the VLM batched
    assert "error" not in talking and talking["vlm_batch_slots"] == 4, talking
    assert talking["tts_batch_streams"] == 4, talking
    for sessions in (2, 4):
        run = talking[f"sessions_{sessions}"]
        assert run["turns_measured"] == sessions * 2 and run["turn_errors"] == 0, run
        figure = run["end_of_speech_to_first_audio_ms"]
        assert figure["p95"] >= figure["p50"] > 0 and not run["sessions_failed"], run
        timing = run["engine_timing"]  # the batched engines' histograms, from /metrics
        assert {"vlm_decode_step", "tts_decode_step", "tts_first_chunk"} <= set(timing), run
    parts = {"asr", "vlm", "vlm_batched", "tts", "tts_batched", "device_audit", "e2e_graphs_off"}
    parts |= {"server_vad"}
    parts |= {"talking_sessions", "total"}
    assert set(report["time_s"]) >= parts
    assert done.returncode == 0, done.stdout[-3000:]
