"""Slow: many requests decoding together on one static KV cache
(`backends/gpu/batched_decode.py`), on a tiny random Qwen3 built here (float32, no
downloads).

What batching must never change is a request's output: a slot decodes the same greedy
tokens alone as among 31 others that join and leave mid-way (prompts of other lengths,
rows in shuffled order, slots reused after others left), and as transformers' own
`generate`; a prompt prefilled in chunks, or on top of a slot's stale KV, gives the
logits and continuation of a whole prefill; the penalties act as defined; and a seeded
slot samples the same tokens whatever else runs. The CUDA Graph path needs a CUDA device
and is not exercised here. Skipped without torch or transformers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from backends.gpu.batched_decode import SlotDecoder
from backends.gpu.engine_api import Sampling

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

VOCAB = 512
SLOTS = 32
MAX_LEN = 128


def _model(attention: str = "sdpa") -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=MAX_LEN,
        attn_implementation=attention,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        # logits of a few units apart: greedy picks are not near-ties
        model.lm_head.weight.normal_(0.0, 2.0)
    return model


@pytest.fixture(scope="module")
def model() -> Any:
    return _model()


def _decoder(model: Any, slots: int = SLOTS) -> SlotDecoder:
    return SlotDecoder(
        model.model,
        model.lm_head,
        model.config,
        slots=slots,
        max_len=MAX_LEN,
        device="cpu",
        dtype=torch.float32,
    )


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB) for _ in range(length)]


@dataclass
class Run:
    """One request of a scripted run: prefilled at step `join`, `tokens` generated."""

    slot: int
    prompt: list[int]
    tokens: int
    join: int = 0
    sampling: Sampling = field(default_factory=Sampling)
    chunk: int = 0  # prefill chunk size (0: the whole prompt at once)
    out: list[int] = field(default_factory=list)
    logits: list[Any] = field(default_factory=list)  # each token's, before sampling


def _drive(decoder: SlotDecoder, runs: list[Run], *, shuffle: int | None = None) -> None:
    """Step the decoder until every run has its tokens: each step decodes every active
    run (in shuffled order when `shuffle` seeds it) and samples the first token of the
    runs whose prompt was prefilled in it, with the same call."""
    order = random.Random(shuffle)
    step = 0
    while any(len(run.out) < run.tokens for run in runs):
        decoding = [r for r in runs if r.out and len(r.out) < r.tokens and r.join < step]
        if shuffle is not None:
            order.shuffle(decoding)
        first = []
        for run in runs:
            if run.join == step:
                decoder.begin(run.slot, run.sampling)
                size = run.chunk or len(run.prompt)
                for start in range(0, len(run.prompt), size):
                    logits = decoder.prefill_chunk(
                        run.slot, run.prompt[start : start + size], start
                    )
                first.append((run.slot, logits))
        result = decoder.step(
            [r.slot for r in decoding], [r.out[-1] for r in decoding], first=first
        )
        joined = [r for r in runs if r.join == step]
        for index, run in enumerate([*decoding, *joined]):
            run.out.append(result.tokens[index])
            run.logits.append(result.logits[index].clone())
        step += 1


def _generate(model: Any, prompt: list[int], tokens: int) -> list[int]:
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        # every id is a real token (the model has no end token): the mask says so
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False
        )
    return [int(token) for token in out[0, len(prompt) :]]


def _crowd(target_slot: int, others: int, seed: int) -> list[Run]:
    """`others` runs around the target: prompts of 2..90 tokens, joining over the first
    steps and leaving after 3..30 tokens; some slots taken again after a run left."""
    rng = random.Random(seed)
    slots = [s for s in range(SLOTS) if s != target_slot][:others]
    runs = []
    for slot in slots:
        length = rng.randrange(2, 90)
        runs.append(Run(slot, _prompt(1000 + slot, length), rng.randrange(3, 30), rng.randrange(8)))
    for slot in slots[: others // 4]:  # the same slots again, after their first run left
        previous = next(r for r in runs if r.slot == slot)
        join = previous.join + previous.tokens + 1
        runs.append(Run(slot, _prompt(2000 + slot, rng.randrange(2, 40)), 5, join))
    return runs


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_slot_decodes_the_same_greedy_tokens_alone_as_among_31_others(attention: str) -> None:
    model = _model(attention)
    prompt = _prompt(7, 12)
    alone = Run(5, prompt, 40)
    _drive(_decoder(model), [alone])
    assert alone.out == _generate(model, prompt, 40)  # transformers' own decode agrees
    for seed in (1, 2):
        target = Run(5, prompt, 40, join=3)
        crowd = _crowd(5, SLOTS - 1, seed)
        _drive(_decoder(model), [target, *crowd], shuffle=seed)
        assert target.out == alone.out
        # the batch's matmul shapes move the last bits (about 1e-5 on logits of tens)
        for mine, theirs in zip(target.logits, alone.logits, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-4)
        # and each of the others decodes what it decodes alone
        for other in crowd[::6]:
            single = Run(other.slot, other.prompt, other.tokens)
            _drive(_decoder(model), [single])
            assert other.out == single.out


def test_chunked_prefill_equals_whole_prefill(model: Any) -> None:
    decoder = _decoder(model, slots=4)
    prompt = _prompt(11, 70)
    with torch.inference_mode():
        reference = model(torch.tensor([prompt])).logits[:, -1, :]
    decoder.begin(0, Sampling())
    whole = decoder.prefill_chunk(0, prompt, 0)
    decoder.begin(1, Sampling())
    for start, end in ((0, 7), (7, 20), (20, 69), (69, 70)):
        chunked = decoder.prefill_chunk(1, prompt[start:end], start)
    # on top of a stale row: another prompt's 100 positions, of which 9 are shared
    stale = [*prompt[:9], *_prompt(12, 91)]
    decoder.begin(2, Sampling())
    decoder.prefill_chunk(2, stale, 0)
    decoder.begin(2, Sampling())
    reused = decoder.prefill_chunk(2, prompt[9:], 9)
    for logits in (whole, chunked, reused):
        torch.testing.assert_close(logits, reference, rtol=1e-5, atol=1e-4)
    runs = [Run(0, prompt, 24), Run(1, prompt, 24), Run(2, prompt, 24)]
    firsts = decoder.step([], [], first=[(0, whole), (1, chunked), (2, reused)]).tokens
    for run, token in zip(runs, firsts, strict=True):
        run.out.append(token)
    for _ in range(23):
        tokens = decoder.step([0, 1, 2], [run.out[-1] for run in runs]).tokens
        for run, token in zip(runs, tokens, strict=True):
            run.out.append(token)
    assert runs[0].out == runs[1].out == runs[2].out == _generate(model, prompt, 24)


def _forced(token: int, value: float = 50.0) -> Any:
    logits = torch.zeros(1, VOCAB)
    logits[0, token] = value
    return logits


def test_presence_and_repetition_penalties_change_the_scores_as_defined(model: Any) -> None:
    decoder = _decoder(model, slots=3)
    decoder.begin(0, Sampling(presence_penalty=1.5))
    decoder.begin(1, Sampling(repetition_penalty=2.0))
    decoder.begin(2, Sampling(presence_penalty=1.5, repetition_penalty=2.0))
    for token in (3, 4):  # generated: 3 and 4 in every slot
        decoder.sample([0, 1, 2], _forced(token).expand(3, -1))
    logits = torch.zeros(3, VOCAB)
    logits[:, 3], logits[:, 4], logits[:, 5] = 5.0, -1.0, 4.0
    scores = decoder.penalized_scores([0, 1, 2], logits)
    assert scores[0, [3, 4, 5]].tolist() == [3.5, -2.5, 4.0]  # minus the presence penalty
    assert scores[1, [3, 4, 5]].tolist() == [2.5, -2.0, 4.0]  # / or * the repetition one
    assert scores[2, [3, 4, 5]].tolist() == [1.0, -3.5, 4.0]  # repetition, then presence
    untouched = [t for t in range(VOCAB) if t not in (3, 4, 5)]
    assert torch.equal(scores[:, untouched], logits[:, untouched])
    # greedy reads the penalised scores: 3 would win without them
    assert decoder.sample([0, 1, 2], logits).tolist() == [5, 5, 5]
    # a fresh request in the slot forgets what the previous one generated
    decoder.begin(0, Sampling(presence_penalty=1.5))
    assert decoder.sample([0], logits[:1]).tolist() == [3]


def test_the_draw_follows_the_softmax_and_top_k_top_p_cut_it(model: Any) -> None:
    decoder = _decoder(model, slots=SLOTS)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0] + [-30.0] * (VOCAB - 4)).expand(SLOTS, -1)
    expected = torch.softmax(logits[0], dim=-1)[:4]
    for slot in range(SLOTS):
        decoder.begin(slot, Sampling(temperature=1.0, seed=slot))
    counts = torch.zeros(4)
    draws = 100
    for _ in range(draws):
        counts += torch.bincount(decoder.sample(range(SLOTS), logits), minlength=VOCAB)[:4]
    frequency = counts / (draws * SLOTS)
    # 3200 draws: a frequency's standard deviation is at most 0.009
    assert (frequency - expected).abs().max() < 0.035
    for slot in range(SLOTS):
        decoder.begin(slot, Sampling(temperature=1.0, top_k=2 if slot % 2 else 0, top_p=0.6))
    picked = torch.cat([decoder.sample(range(SLOTS), logits) for _ in range(20)])
    assert set(picked.tolist()) == {0}  # top-p 0.6 keeps the best alone (p = 0.64)
    for slot in range(SLOTS):
        decoder.begin(slot, Sampling(temperature=5.0, top_k=2))
    picked = torch.cat([decoder.sample(range(SLOTS), logits) for _ in range(20)])
    assert set(picked.tolist()) == {0, 1}


def test_seeded_sampling_is_reproducible_per_slot_whatever_else_runs(model: Any) -> None:
    prompt = _prompt(21, 10)
    seeded = Sampling(temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    alone = Run(3, prompt, 30, sampling=seeded)
    _drive(_decoder(model), [alone])
    elsewhere = Run(17, prompt, 30, sampling=seeded)  # the scheme does not use the slot
    _drive(_decoder(model), [elsewhere])
    assert elsewhere.out == alone.out
    rng = random.Random(5)
    others = [
        Run(
            slot,
            _prompt(300 + slot, rng.randrange(2, 60)),
            rng.randrange(3, 25),
            rng.randrange(6),
            Sampling(temperature=rng.choice([0.0, 0.7, 1.3]), top_k=rng.choice([0, 5])),
        )
        for slot in (0, 1, 2, 4, 9, 20, 31)
    ]
    target = Run(3, prompt, 30, join=2, sampling=seeded)
    _drive(_decoder(model), [target, *others], shuffle=3)
    assert target.out == alone.out
    other_seed = Run(3, prompt, 30, sampling=Sampling(temperature=0.9, top_k=40, seed=99))
    _drive(_decoder(model), [other_seed])
    assert other_seed.out != alone.out


def test_qwen3_vl_decodes_an_image_prompt_among_text_prompts_as_its_engine_does(
    tmp_path: Any,
) -> None:
    """M-RoPE: Qwen3-VL's language model, a prompt with an image prefilled by the VLM
    engine's own forward and copied in (`load_prefix`, with its rope offset), decoding
    beside text prompts prefilled in chunks: the tokens of `HfVlmEngine` alone."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("PIL")
    import sys
    from pathlib import Path

    import anyio
    import numpy as np
    from PIL import Image

    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.hf_engines import HfVlmEngine

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from gpu_tiny_models import build_tiny_vlm  # type: ignore[import-not-found]

    engine = HfVlmEngine(str(build_tiny_vlm(tmp_path / "vlm")), kv_slots=0, encoded_frames=0)
    pixels = np.random.default_rng(3).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    text = (
        "<|im_start|>user\n<0.0 seconds><|vision_start|><|image_pad|><|vision_end|>"
        "what do you see?<|im_end|>\n<|im_start|>assistant\n"
    )
    prompt = EnginePrompt(text, images=(Image.fromarray(pixels),))

    async def reference() -> tuple[int, ...]:
        await engine.start()
        stream = await engine.submit("ref", prompt, Sampling(max_tokens=20))
        async for _ in stream:
            pass
        return engine.last_timing.token_ids

    expected = anyio.run(reference)
    assert len(expected) == 20
    model = engine.model
    never = engine._never.tolist() if engine._never is not None else []
    decoder = SlotDecoder(
        model.model.language_model,
        model.lm_head,
        model.config.get_text_config(decoder=True),
        slots=4,
        max_len=256,
        device="cpu",
        dtype=torch.float32,
        mrope=True,
        suppress_ids=never,
    )
    request = engine._prepared(prompt)
    with torch.inference_mode():
        engine._before_prefill()
        prefill = engine._prefill(request)
    assert prefill.rope_delta != 0  # the image moved the positions after it
    vocab = len(engine.tokenizer)
    texts = [
        Run(slot, [t % vocab for t in _prompt(40 + slot, 30 + 9 * slot)], 20, join=slot, chunk=8)
        for slot in (0, 1, 3)
    ]
    image = Run(2, list(request.ids), 20, join=1)

    decoder.begin(image.slot, Sampling())
    decoder.load_prefix(image.slot, prefill.cache, len(request.ids), prefill.rope_delta)
    first = prefill.logits
    step = 0
    while len(image.out) < image.tokens:
        decoding = [r for r in [*texts, image] if r.out and len(r.out) < r.tokens]
        firsts = []
        for run in texts:
            if run.join == step:
                decoder.begin(run.slot, Sampling())
                for start in range(0, len(run.prompt), run.chunk):
                    logits = decoder.prefill_chunk(
                        run.slot, run.prompt[start : start + run.chunk], start
                    )
                firsts.append((run.slot, logits))
        joined = [r for r in texts if r.join == step]
        if step == image.join:
            firsts.append((image.slot, first))
            joined.append(image)
        result = decoder.step(
            [r.slot for r in decoding], [r.out[-1] for r in decoding], first=firsts
        )
        for run, token in zip([*decoding, *joined], result.tokens, strict=True):
            run.out.append(token)
        step += 1
    assert tuple(image.out) == expected
