"""Prefill with and without kept prompts over a camera session, on the CPU.

Ten turns of a camera session as JoyAI's prompt builder lays them out (`VlmStage.build`:
one new 448x448 frame a tick, the earlier ticks' frames and replies in history, the
question on the first tick), run through the transformers VLM engine three ways on a
random Qwen3-VL: keeping nothing (`kv_slots = 0`, `encoded_frames = 0`: a full prefill
every turn, as before `prompt_reuse.py`), keeping prompts' KV and frames' encodings,
and that with each frame prepared as it arrives (`VlmStage.prepare_frame`, before its
turn; not timed). Per turn: prompt tokens, tokens reused, frames encoded at the
prefill, and the prefill (the forward and the first token) and the time to first token
(the engine's preprocessing included). The weights are random, so replies are noise;
they go into history as a session would record them.

    python tools/hf_prefill_reuse.py [--size tiny|small] [--turns 10] [--json out.json]

`tiny` is the test suite's checkpoint (2 layers of 128); `small` is 8 layers of 512
with a 4-block vision tower, where the prefill's own work shows over the overheads.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {"text": {}, "vision": {}},
    "small": {
        "text": {
            "hidden_size": 512,
            "intermediate_size": 1536,
            "num_hidden_layers": 8,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
        },
        "vision": {
            "depth": 4,
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_heads": 4,
            "out_hidden_size": 512,
            "deepstack_visual_indexes": [1, 2],
        },
    },
}
MODES = {
    "nothing kept": {"kv_slots": 0, "encoded_frames": 0},
    "kept": {},
    "kept, frames prepared": {},
}


def _frame(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (448, 448, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


async def _session(path: str, options: dict[str, Any], turns: int, prepare: bool) -> list[Any]:
    from backends.base import VlmRequest
    from backends.gpu.engine_api import EnginePrompt, Sampling
    from backends.gpu.frames import decode_frames
    from backends.gpu.hf_engines import HfVlmEngine
    from backends.gpu.placement import default_placement
    from backends.gpu.vlm import VlmStage
    from tests.gpu.camera_session import CameraSession

    placement = replace(default_placement(1).vlm, model=path, max_model_len=4096)
    engine = HfVlmEngine(path, max_len=4096, **options)
    rows = []
    async with VlmStage(engine, placement, image_tokens=196) as stage:
        session = CameraSession("What do you see right now?")
        for turn in range(turns):
            frame = _frame(turn)
            if prepare:
                await stage.prepare_frame(frame)  # as it arrives
            ctx = session.context(frame)
            built = stage.build(VlmRequest(f"t{turn}", ctx))
            prompt = EnginePrompt(built.text, images=decode_frames(built.images))
            started = time.perf_counter()
            stream = await engine.submit(f"t{turn}", prompt, Sampling(max_tokens=8))
            submitted = (time.perf_counter() - started) * 1000
            text = "".join([piece async for piece in stream])
            timing = engine.last_timing
            rows.append(
                {
                    "turn": turn + 1,
                    "frames": len(built.images),
                    "prompt_tokens": timing.prompt_tokens,
                    "reused_tokens": timing.reused_tokens,
                    "images_encoded": timing.images_encoded,
                    "prefill_ms": round(timing.prefill_ms, 1),
                    "first_token_ms": round(submitted + timing.prefill_ms, 1),
                }
            )
            session.answered(ctx, text)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from gpu_tiny_models import build_tiny_vlm

    with tempfile.TemporaryDirectory() as tmp:
        path = str(build_tiny_vlm(Path(tmp) / "vlm", **SIZES[args.size]))
        asyncio.run(_session(path, {}, 2, False))  # warm-up: lazy inits, allocator
        report: dict[str, Any] = {"size": args.size, "turns": args.turns, "modes": {}}
        for mode, options in MODES.items():
            rows = asyncio.run(_session(path, options, args.turns, "prepared" in mode))
            later = rows[1:]  # turn 1 has nothing to reuse in any mode
            report["modes"][mode] = {
                "turns": rows,
                "turns_2_on_median_prefill_ms": statistics.median(r["prefill_ms"] for r in later),
                "turns_2_on_median_first_token_ms": statistics.median(
                    r["first_token_ms"] for r in later
                ),
                "turns_2_on_prefilled_tokens": sum(
                    r["prompt_tokens"] - r["reused_tokens"] for r in later
                ),
                "turns_2_on_prompt_tokens": sum(r["prompt_tokens"] for r in later),
            }
    for mode, figures in report["modes"].items():
        print(f"\n{mode}")
        print("turn frames prompt reused encoded prefill_ms first_token_ms")
        for r in figures["turns"]:
            print(
                f"{r['turn']:>4} {r['frames']:>6} {r['prompt_tokens']:>6} {r['reused_tokens']:>6}"
                f" {r['images_encoded']:>7} {r['prefill_ms']:>10} {r['first_token_ms']:>14}"
            )
        print(
            f"turns 2-{args.turns}: median prefill {figures['turns_2_on_median_prefill_ms']} ms,"
            f" median first token {figures['turns_2_on_median_first_token_ms']} ms,"
            f" prefilled {figures['turns_2_on_prefilled_tokens']}"
            f" of {figures['turns_2_on_prompt_tokens']} prompt tokens"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
