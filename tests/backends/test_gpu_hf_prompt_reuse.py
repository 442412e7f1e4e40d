"""Slow: the transformers VLM engine keeps prompts' KV and frames' encodings between
requests (`backends/gpu/prompt_reuse.py`, `HfVlmEngine`), on a tiny random Qwen3-VL.

What reuse must never change is the output: a suffix prefilled on top of a kept prompt
(M-RoPE positions of the whole prompt, deepstack features of the suffix's own images)
decodes the same tokens, from the same first logits, as a fresh engine's full prefill;
a prepared frame is not encoded again and changes nothing either. Skipped without
torch, transformers, tokenizers or Pillow (`make test-gpu-path` has them).
"""

from __future__ import annotations

import io
import itertools
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

import torch
from PIL import Image

from backends.base import VlmDecisionResult, VlmRequest
from backends.gpu.engine_api import EnginePrompt, Sampling
from backends.gpu.hf_engines import HfVlmEngine
from backends.gpu.placement import default_placement
from backends.gpu.vlm import VlmStage
from tests.gpu.camera_session import CameraSession

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_vlm

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

VISION = "<|vision_start|><|image_pad|><|vision_end|>"
#: long enough (over `MIN_REUSED_TOKENS`) that two sessions share it worth reusing
SYSTEM = "<|im_start|>system\n" + "You are a real-time assistant watching a camera. " * 4


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_vlm(tmp_path_factory.mktemp("tiny") / "vlm"))


class RecordingEngine(HfVlmEngine):
    """The engine, recording each prefill's first-token logits and vision-tower calls."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, max_len=2048, **options)
        self.first_logits: list[Any] = []
        self.vision_calls = 0

    def _load(self) -> None:
        super()._load()
        visual = self.model.model.visual
        forward = visual.forward

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.vision_calls += 1
            return forward(*args, **kwargs)

        visual.forward = counted

    def _prefill(self, request: Any) -> Any:
        prefill = super()._prefill(request)
        self.first_logits.append(prefill.logits.detach().clone())
        return prefill


def _noise(seed: int, size: tuple[int, int] = (128, 96)) -> Any:
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels)


async def _run(engine: HfVlmEngine, request_id: str, prompt: EnginePrompt) -> str:
    stream = await engine.submit(request_id, prompt, Sampling(max_tokens=6))
    return "".join([piece async for piece in stream])


def _tick(seconds: int) -> str:
    return f"<|im_start|>user\n<{seconds}.0 seconds>{VISION}<|im_end|>\n<|im_start|>assistant\n"


class Session:
    """A camera session's prompts: each turn adds a tick with a new frame and the reply."""

    def __init__(self, seed: int, sizes: list[tuple[int, int]]) -> None:
        self.text = SYSTEM + f"session {seed}<|im_end|>\n"
        self.images: list[Any] = []
        self.seed = seed
        self.sizes = sizes

    def next_prompt(self) -> EnginePrompt:
        turn = len(self.images)
        self.text += _tick(turn)
        self.images.append(_noise(self.seed * 100 + turn, self.sizes[turn % len(self.sizes)]))
        return EnginePrompt(self.text, images=tuple(self.images))

    def reply(self, text: str) -> None:
        self.text += text + "<|im_end|>\n"


def test_suffix_prefill_decodes_as_a_full_prefill(tiny_vlm: str) -> None:
    """Six turns that extend each other, frames of two sizes in the kept prefix and a new
    one in each suffix: the same tokens and first logits as a fresh engine prefilling
    everything, which itself gives the model's own forward's logits."""

    async def main() -> tuple[list[str], list[str], list[Any], RecordingEngine, Any]:
        reuse = RecordingEngine(tiny_vlm)
        fresh = RecordingEngine(tiny_vlm, kv_slots=0, encoded_frames=0)
        await reuse.start()
        await fresh.start()
        session = Session(1, [(128, 96), (96, 160)])
        ours, theirs, timings = [], [], []
        for turn in range(6):
            prompt = session.next_prompt()
            ours.append(await _run(reuse, f"a{turn}", prompt))
            timings.append(reuse.last_timing)
            theirs.append(await _run(fresh, f"b{turn}", prompt))
            assert fresh.last_timing.reused_tokens == 0
            session.reply(ours[-1])
        assert fresh.vision_calls == 6 and fresh.last_timing.images_encoded == 6
        inputs = fresh._on_device(fresh._inputs(prompt))
        with torch.inference_mode():
            fresh._before_prefill()
            reference = fresh.model(**inputs, use_cache=False).logits[:, -1, :]
        return ours, theirs, timings, reuse, (fresh, reference)

    ours, theirs, timings, reuse, (fresh, reference) = anyio.run(main)
    assert ours == theirs
    for kept, full in zip(reuse.first_logits, fresh.first_logits, strict=True):
        torch.testing.assert_close(kept, full, rtol=1e-4, atol=1e-3)
    # the engine's own full prefill is the model's forward, taken apart
    torch.testing.assert_close(fresh.first_logits[-1], reference, rtol=1e-4, atol=1e-3)
    assert timings[0].reused_tokens == 0
    for before, now in itertools.pairwise(timings):
        # at least the whole previous prompt was reused, its frames with it: only the
        # new tick (one new frame) was prefilled and encoded
        assert now.reused_tokens >= before.prompt_tokens
        assert now.images_encoded == 1
        assert now.prefilled_tokens == now.prompt_tokens - now.reused_tokens
    assert reuse.vision_calls == 6  # one frame encoded per turn, never one twice
    assert len(reuse.slots) == 1  # each turn's slot superseded the previous one


def test_two_sessions_taking_turns_each_reuse_their_own_slot(tiny_vlm: str) -> None:
    async def main() -> list[tuple[str, int, int]]:
        engine = RecordingEngine(tiny_vlm, kv_slots=4)
        await engine.start()
        sessions = {"a": Session(2, [(128, 96)]), "b": Session(3, [(96, 128)])}
        seen: list[tuple[str, int, int]] = []
        for turn in range(3):
            for name, session in sessions.items():
                session.reply(await _run(engine, f"{name}{turn}", session.next_prompt()))
                timing = engine.last_timing
                seen.append((name, timing.prompt_tokens, timing.reused_tokens))
                assert len(engine.slots) <= 2  # one per session, each superseding its own
        return seen

    seen = anyio.run(main)
    last: dict[str, int] = {}
    for name, prompt_tokens, reused in seen:
        if name in last:
            assert reused >= last[name]  # the session's own previous prompt, not the other's
        last[name] = prompt_tokens
    assert seen[1][2] >= 64  # b's first turn shares the system prompt with a's slot


def test_slots_run_out_and_the_byte_budget_holds(tiny_vlm: str) -> None:
    """With one slot (or bytes for one prompt only) two sessions evict each other: each
    turn reuses only the system prompt they share; the kept bytes never exceed the
    budget."""

    async def main(**options: Any) -> tuple[list[int], list[int], RecordingEngine]:
        engine = RecordingEngine(tiny_vlm, **options)
        await engine.start()
        sessions = [Session(4, [(128, 96)]), Session(5, [(128, 96)])]
        reused, kept_bytes = [], []
        for turn in range(2):
            for index, session in enumerate(sessions):
                session.reply(await _run(engine, f"{index}{turn}", session.next_prompt()))
                reused.append(engine.last_timing.reused_tokens)
                kept_bytes.append(engine.slots.nbytes)
        return reused, kept_bytes, engine

    one_slot, sizes, engine = anyio.run(lambda: main(kv_slots=1))
    assert len(engine.slots) == 1
    system = engine.count_tokens(SYSTEM + "session ")
    assert one_slot[0] == 0 and all(64 <= r <= system + 1 for r in one_slot[1:])
    # tiny: 2 layers x keys and values x 1 head x 64 x fp32 per kept token
    assert sizes[0] % (2 * 2 * 64 * 4) == 0
    budget = max(sizes) * 6 // 5  # room for the largest slot, not for two of them
    assert 2 * min(sizes) > budget
    by_bytes, kept_bytes, engine = anyio.run(lambda: main(kv_slots=4, kv_slot_bytes=budget))
    assert by_bytes == one_slot
    assert all(0 < b <= budget for b in kept_bytes) and len(engine.slots) == 1


def test_a_prepared_frame_is_not_encoded_again_and_changes_nothing(tiny_vlm: str) -> None:
    async def main() -> tuple[list[str], list[str], RecordingEngine, RecordingEngine]:
        prepared = RecordingEngine(tiny_vlm, kv_slots=0)
        plain = RecordingEngine(tiny_vlm, kv_slots=0, encoded_frames=0)
        await prepared.start()
        await plain.start()
        assert prepared.prepares_frames and not plain.prepares_frames
        session = Session(6, [(128, 96)])
        ours, theirs = [], []
        for turn in range(3):
            prompt = session.next_prompt()
            assert prepared.prepare_image(prompt.images[-1])  # as the frame arrives
            calls = prepared.vision_calls
            ours.append(await _run(prepared, f"p{turn}", prompt))
            assert prepared.vision_calls == calls  # nothing encoded at the prefill
            assert prepared.last_timing.images_encoded == 0
            theirs.append(await _run(plain, f"q{turn}", prompt))
            assert plain.last_timing.images_encoded == turn + 1  # every frame, every turn
            session.reply(ours[-1])
        assert not prepared.prepare_image(session.images[0])  # kept already: no work
        return ours, theirs, prepared, plain

    ours, theirs, prepared, plain = anyio.run(main)
    assert ours == theirs
    for kept, full in zip(prepared.first_logits, plain.first_logits, strict=True):
        torch.testing.assert_close(kept, full, rtol=1e-4, atol=1e-3)
    assert prepared.vision_calls == 3  # one per frame, when it arrived


def _jpeg(seed: int) -> bytes:
    out = io.BytesIO()
    _noise(seed, (320, 240)).save(out, format="JPEG")
    return out.getvalue()


def test_the_stage_prepares_a_camera_session_and_decides_as_without(tiny_vlm: str) -> None:
    """Through `VlmStage` and JoyAI's prompt builder: frames handed over as they arrive
    (`prepare_frame`, the stage decoding them as the turn will) are never encoded at a
    prefill, each turn's prompt reuses the previous one, and every decision is the one
    a stage that keeps nothing makes."""

    def stage(**options: Any) -> VlmStage:
        placement = replace(default_placement(1).vlm, model=tiny_vlm, max_model_len=2048)
        engine = RecordingEngine(tiny_vlm, **options)
        return VlmStage(engine, placement, sampling=Sampling(max_tokens=6), image_tokens=64)

    async def main() -> tuple[list[Any], list[Any], list[Any]]:
        decisions: dict[bool, list[Any]] = {True: [], False: []}
        timings = []
        async with stage() as keeping, stage(kv_slots=0, encoded_frames=0) as plain:
            for keeps, vlm in ((True, keeping), (False, plain)):
                session = CameraSession("What do you see?", system="s")
                for turn in range(4):
                    frame = _jpeg(40 + turn)
                    await vlm.prepare_frame(frame)  # a no-op for `plain`
                    ctx = session.context(frame)
                    items = [i async for i in vlm.generate(VlmRequest(f"t{turn}", ctx))]
                    decision = items[-1]
                    assert isinstance(decision, VlmDecisionResult)
                    decisions[keeps].append(decision)
                    if keeps:
                        timings.append(vlm.engine.last_timing)  # type: ignore[attr-defined]
                    session.answered(ctx, decision.text)
        return decisions[True], decisions[False], timings

    kept, plain, timings = anyio.run(main)
    assert kept == plain
    assert all(t.images_encoded == 0 for t in timings)  # every frame was prepared
    assert all(t.reused_tokens > 0 for t in timings[1:])
