"""Slow: the GPU stages' real code on CPU through transformers, with tiny random checkpoints.

Tiny Qwen3-VL and Qwen3-ASR models (and a tokenizer trained here) are built in-test by
`tools/gpu_tiny_models.py`; the stages run their real prompt building, compensated
submission, streaming and action parsing against them. Skipped without torch.
"""

from __future__ import annotations

import io
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from backends.base import (
    AsrRequest,
    HistoryTurn,
    InvalidPromptContext,
    PromptContext,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.gpu.asr import AsrStage
from backends.gpu.engine_api import Sampling
from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine
from backends.gpu.placement import default_placement
from backends.gpu.vlm import VlmStage
from backends.joyai.actions import parse_action

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_all

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_all(tmp_path_factory.mktemp("tiny"))


def _jpeg(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (320, 240), color).save(out, format="JPEG")
    return out.getvalue()


def _vlm(path: str) -> VlmStage:
    placement = replace(default_placement(1).vlm, model=path, max_model_len=1024, dtype="float32")
    return VlmStage(HfVlmEngine(path), placement, sampling=Sampling(max_tokens=12), image_tokens=64)


def test_vlm_with_frames_history_and_budget(tiny: dict[str, str]) -> None:
    async def main() -> tuple[list[Any], Any, Any]:
        async with _vlm(tiny["vlm"]) as vlm:
            ctx = PromptContext(
                system="You watch a camera.",
                history=tuple(
                    HistoryTurn(r, f"turn {i} " * 30)
                    for i in range(6)
                    for r in ("user", "assistant")
                ),
                transcript="What is red?",
                frames=(_jpeg((200, 30, 30)), _jpeg((30, 200, 30))),
            )
            built = vlm.build(VlmRequest("r0", ctx))
            items = [item async for item in vlm.generate(VlmRequest("r1", ctx))]
            with pytest.raises(InvalidPromptContext):
                over = PromptContext(system="word " * 2000, transcript="x")
                [i async for i in vlm.generate(VlmRequest("bad", over))]
            again = [item async for item in vlm.generate(VlmRequest("r2", ctx))]
            return items, built, again

    items, built, again = anyio.run(main)
    assert built.dropped_turns > 0 and built.prompt_tokens <= 1024 - 12  # oldest history dropped
    decision = items[-1]
    assert isinstance(decision, VlmDecisionResult)
    deltas = "".join(i.text for i in items[:-1] if isinstance(i, VlmDelta))
    assert deltas == (decision.text if decision.action.value != "listen" else "")
    # greedy: the same prompt gives the same decision (for its own request)
    assert again[-1] == replace(decision, request_id="r2")


def test_a_batched_vlm_stage_decides_what_the_one_request_stage_decides(
    tiny: dict[str, str],
) -> None:
    """`batch_slots`: the VLM stage on the continuous-batching engine; three sessions'
    camera turns asked together decide what each decides alone on today's engine."""
    from backends.gpu.batched_engine import BatchedHfEngine

    placement = replace(
        default_placement(1).vlm, model=tiny["vlm"], max_model_len=1024, dtype="float32"
    )
    contexts = [
        PromptContext(system="You watch a camera.", transcript=question, frames=(_jpeg(rgb),))
        for question, rgb in (
            ("What is red?", (200, 30, 30)),
            ("Is it green?", (30, 200, 30)),
            ("Say something.", (30, 30, 200)),
        )
    ]

    async def alone() -> list[Any]:
        async with _vlm(tiny["vlm"]) as vlm:
            return [
                [i async for i in vlm.generate(VlmRequest(f"sess_{k}/r", ctx))][-1]
                for k, ctx in enumerate(contexts)
            ]

    async def together() -> list[Any]:
        engine = BatchedHfEngine(tiny["vlm"], batch_slots=4, prefill_chunk_tokens=32)
        stage = VlmStage(engine, placement, sampling=Sampling(max_tokens=12), image_tokens=64)
        out: list[Any] = [None] * len(contexts)
        async with stage:

            async def ask(k: int, ctx: PromptContext) -> None:
                items = [i async for i in stage.generate(VlmRequest(f"sess_{k}/r", ctx))]
                out[k] = items[-1]

            async with anyio.create_task_group() as tg:
                for k, ctx in enumerate(contexts):
                    tg.start_soon(ask, k, ctx)
        return out

    assert anyio.run(together) == anyio.run(alone)


def test_vlm_generation_matches_offline_parse(tiny: dict[str, str]) -> None:
    """The streamed decision equals parsing the engine's raw text in one go."""

    async def main() -> tuple[Any, str]:
        engine = HfVlmEngine(tiny["vlm"])
        stage = VlmStage(
            engine, replace(default_placement(1).vlm, model=tiny["vlm"], max_model_len=1024)
        )
        async with stage:
            ctx = PromptContext(system="s", transcript="hello")
            built = stage.build(VlmRequest("x", ctx))
            from backends.gpu.engine_api import EnginePrompt

            stream = await engine.submit("raw", EnginePrompt(built.text), Sampling(max_tokens=10))
            raw = "".join([piece async for piece in stream])
            stage.sampling = Sampling(max_tokens=10)
            items = [item async for item in stage.generate(VlmRequest("y", ctx))]
        return items[-1], raw

    decision, raw = anyio.run(main)
    assert decision == parse_action(raw, "y")


def test_asr_transcribes_audio(tiny: dict[str, str]) -> None:
    async def main() -> str:
        placement = replace(default_placement(1).asr, model=tiny["asr"])
        async with AsrStage(
            HfAsrEngine(tiny["asr"]), placement, sampling=Sampling(max_tokens=6)
        ) as asr:
            pcm = (np.sin(np.arange(48_000) / 5.0) * 0.2).astype(np.float32)
            return (await asr.transcribe(AsrRequest("a1", pcm))).text

    text = anyio.run(main)
    assert isinstance(text, str)
    assert "<asr_text>" not in text and "<|im_end|>" not in text


def test_vlm_warmup_and_abort(tiny: dict[str, str]) -> None:
    async def main() -> None:
        async with _vlm(tiny["vlm"]) as vlm:
            await vlm.warmup()
            stream = vlm.generate(
                VlmRequest("long", PromptContext(system="s", transcript="x"), max_tokens=12)
            )
            async for _ in stream:
                break
            await stream.aclose()

    anyio.run(main)


def test_static_cache_decoding_gives_generate_tokens(tiny: dict[str, str]) -> None:
    """The engine's own loop (prefill, static KV cache, one step per token: the step the
    GPU captures as a CUDA Graph) decodes greedily exactly as transformers' `generate`,
    request after request (each starts from a reset cache)."""
    from backends.gpu.engine_api import EnginePrompt

    async def main() -> list[tuple[str, str]]:
        engine = HfVlmEngine(tiny["vlm"], max_len=512)
        await engine.start()
        pairs = []
        for words in (5, 40, 12):
            text = "what do you see? " * words
            stream = await engine.submit(f"r{words}", EnginePrompt(text), Sampling(max_tokens=8))
            ours = "".join([piece async for piece in stream])
            encoded = engine.tokenizer(text, return_tensors="pt", add_special_tokens=False)
            ids = engine.model.generate(**encoded, max_new_tokens=8, do_sample=False)
            reference = engine.tokenizer.decode(ids[0][encoded["input_ids"].shape[1] :])
            pairs.append((ours, reference))
            assert engine.last_timing.prompt_tokens == encoded["input_ids"].shape[1]
        await engine.close()
        return pairs

    for ours, reference in anyio.run(main):
        assert ours == reference
