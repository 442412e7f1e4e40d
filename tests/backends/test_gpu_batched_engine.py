"""Slow: the batched transformers VLM engine (`backends/gpu/batched_engine.py`) on a tiny
random Qwen3-VL: requests submitted together, prefilled in small chunks between decode
steps, stream the same text as `HfVlmEngine` gives each of them alone; an aborted one
ends early without disturbing the others. Skipped without torch, transformers,
tokenizers or Pillow.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from PIL import Image

from backends.gpu.batched_engine import BatchedHfEngine
from backends.gpu.engine_api import EnginePrompt, Sampling
from backends.gpu.hf_engines import HfVlmEngine
from backends.gpu.slot_scheduler import StepPlan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_vlm  # type: ignore[import-not-found]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_vlm(tmp_path_factory.mktemp("tiny") / "vlm"))


def _prompts() -> list[EnginePrompt]:
    frame = Image.fromarray(np.random.default_rng(1).integers(0, 255, (96, 128, 3), dtype=np.uint8))
    turn = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    return [
        EnginePrompt(turn.format("Hello there, how can I help you today?")),
        EnginePrompt(turn.format("The cat is on the table. " * 6 + "what do you see?")),
        EnginePrompt(turn.format(f"<0.0 seconds>{VISION}Describe the red ball."), (frame,)),
        EnginePrompt(turn.format("system user assistant " * 10)),
    ]


class RecordingEngine(BatchedHfEngine):
    """The engine, recording each step's plan (idle ones too)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        self.plans: list[StepPlan] = []

    def _prepare_decoding(self) -> None:
        super()._prepare_decoding()
        scheduler = self.scheduler
        assert scheduler is not None
        plan = scheduler.plan

        def recorded() -> StepPlan:
            self.plans.append(plan())
            return self.plans[-1]

        scheduler.plan = recorded  # type: ignore[method-assign]


async def _text(engine: Any, request_id: str, prompt: EnginePrompt, tokens: int) -> str:
    stream = await engine.submit(request_id, prompt, Sampling(max_tokens=tokens))
    return "".join([piece async for piece in stream])


def test_concurrent_requests_stream_what_each_streams_alone(tiny_vlm: str) -> None:
    prompts = _prompts()
    lengths = [24, 10, 18, 30]

    async def main() -> tuple[list[str], list[str]]:
        alone = HfVlmEngine(tiny_vlm, kv_slots=0)
        await alone.start()
        expected = [
            await _text(alone, f"a{i}", prompt, n)
            for i, (prompt, n) in enumerate(zip(prompts, lengths, strict=True))
        ]
        await alone.close()
        batched = RecordingEngine(tiny_vlm, batch_slots=4, prefill_chunk_tokens=16)
        await batched.start()
        got = [""] * len(prompts)

        async def one(index: int) -> None:
            got[index] = await _text(batched, f"b{index}", prompts[index], lengths[index])

        async with anyio.create_task_group() as group:
            for index in range(len(prompts)):
                group.start_soon(one, index)
        await batched.close()
        plans.extend(batched.plans)
        return expected, got

    plans: list[StepPlan] = []
    expected, got = anyio.run(main)
    assert all(expected)
    assert got == expected
    # they ran together: several rows decoded in one step, prompts prefilled in chunks
    # (some while others decoded)
    assert max(len(plan.decode) for plan in plans) >= 3
    assert any(not chunk.last for plan in plans for chunk in plan.prefill)
    assert any(plan.decode and plan.prefill for plan in plans)


def test_an_aborted_request_ends_and_the_others_go_on(tiny_vlm: str) -> None:
    prompts = _prompts()[:2]

    async def main() -> tuple[str, str, str, list[StepPlan]]:
        alone = HfVlmEngine(tiny_vlm, kv_slots=0)
        await alone.start()
        expected = await _text(alone, "ref", prompts[1], 40)
        await alone.close()
        engine = RecordingEngine(tiny_vlm, batch_slots=2, prefill_chunk_tokens=16)
        await engine.start()
        stopped = await engine.submit("stopped", prompts[0], Sampling(max_tokens=200))
        going = await engine.submit("going", prompts[1], Sampling(max_tokens=40))
        pieces = []
        async for piece in stopped:
            pieces.append(piece)
            if len(pieces) == 2:
                await engine.abort("stopped")
        text = "".join([piece async for piece in going])
        await engine.close()
        return "".join(pieces), text, expected, engine.plans

    stopped, text, expected, plans = anyio.run(main)
    assert stopped
    assert text == expected
    # the abort took effect at a step boundary, long before its 200 tokens
    [cancelled_at] = [plan.step for plan in plans if "stopped" in plan.cancelled]
    decoded = sum(1 for plan in plans for row in plan.decode if row.request_id == "stopped")
    assert decoded < 199
    assert all(row.request_id != "stopped" for p in plans[cancelled_at:] for row in p.decode)


def test_each_request_leaves_its_timing_and_the_stage_histograms_hear_it(tiny_vlm: str) -> None:
    prompts = _prompts()[:2]
    heard: list[tuple[str, float]] = []

    async def main() -> list[Any]:
        engine = BatchedHfEngine(tiny_vlm, batch_slots=2, prefill_chunk_tokens=16)
        engine.on_timing = lambda stage, seconds: heard.append((stage, seconds))
        await engine.start()
        timings = []
        for index, prompt in enumerate(prompts):
            await _text(engine, f"t{index}", prompt, 12)
            timings.append(engine.last_timing)
        await engine.close()
        return timings

    timings = anyio.run(main)
    for timing in timings:
        assert timing.prompt_tokens > 0 and timing.tokens > 0
        assert timing.prefill_ms > 0 and timing.queue_wait_ms >= 0
        # the first token comes from the prefill; each later one from a decode step
        assert timing.decode_steps == timing.tokens - 1 and timing.decode_ms > 0
    stages = {stage for stage, _ in heard}
    assert stages == {"vlm_queue_wait", "vlm_prefill", "vlm_decode_step"}
    assert [stage for stage, _ in heard].count("vlm_prefill") == len(prompts)
