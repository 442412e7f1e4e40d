"""GPU check on the lent machine's own image: the transformers runtime at real sizes,
CUDA Graphs on vs off, the whole turn through `joyduplex serve --backend gpu`.

The lent H200's image has torch, transformers and onnxruntime but no vLLM, and nothing
can be fetched there; `prepare_device.sh` carries the few small wheels it lacks. So this
check runs the GPU backend's *transformers* runtime (`backends/gpu/hf_engines.py`:
prefill with the model's forward, decode on a static KV cache with the step captured as
a CUDA Graph) and its TTS (faster-qwen3-tts graphs, or eager `qwen_tts`), at the real
architectures' sizes with random bf16 weights made directly on the GPU (nothing is
downloaded; start-up takes seconds):

    asr   Qwen3-ASR-1.7B: 3 s of audio to 32 tokens                     graphs on / off
    vlm   JoyAI-VL-Interaction (Qwen3-VL 8B): time to first token with 1
          and 8 448-px frames, decode tokens/s                           graphs on / off
    tts   Qwen3-TTS-12Hz-1.7B (Talker + code predictor + Code2Wav):
          time to first audio chunk, real-time factor                    graphs on / off
    e2e   `joyduplex serve --backend gpu`, one GPU, over loopback: end of
          commit to first reply audio, p50 of 5 turns (after a warm-up)  graphs on / off

Random weights decode to noise, so every figure is of fixed work: the engines' output
rows for undecodable and special ids are zeroed, so each request runs to its token cap
(ASR 32, VLM 24 in the whole turn, TTS `TTS_FRAMES` codec frames). The JSON says that
vLLM was not exercised and why. Each part runs in its own process with a time budget;
the report is rewritten after every part, so a part that fails or runs out of time
leaves the others' figures.

    python tests/gpu/check_device.py --out report.json [--budget-s 420]

Rehearsal: JOYDUPLEX_GPU_CHECK_REHEARSAL=1 runs the same script on the CPU with the
same configs at toy sizes, float32, graphs off only (`make test-gpu-path`), so the
lent session's one call cannot fail on a script bug.
"""

from __future__ import annotations

import argparse
import asyncio
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_gpu import (  # noqa: E402  (check_gpu puts the repo and tools/ on sys.path)
    REHEARSAL,
    ROOT,
    _noise_jpeg,
    build_checkpoints,
    preflight,
    run_child,
    time_utterance,
)

ENGINE_MAX_LEN = 4096  # static KV cache positions per engine (8 frames need ~1.7K)
REPS = 2 if REHEARSAL else 4  # measured repetitions, after one warm-up each
TTS_FRAMES = 6 if REHEARSAL else 36  # codec frames per utterance (12.5 per second)
E2E_TURNS = 5
VLM_DECODE_TOKENS = 8 if REHEARSAL else 64
DEVICE = "cpu" if REHEARSAL else "cuda:0"
DTYPE = "float32" if REHEARSAL else "bfloat16"
VLLM_NOTE = (
    "vLLM was not exercised: the lent machine's image has no vLLM, cannot fetch it, and "
    "a call carries at most 64 MiB (vLLM's wheel is several hundred MB). These figures "
    "are the transformers runtime (static KV cache, decode step as a CUDA Graph) and "
    "faster-qwen3-tts; the vLLM runtime's figures need a machine with vLLM "
    "(tests/gpu/check_gpu.py)."
)


def _modes() -> tuple[bool, ...]:
    # eager first: a capture that breaks the CUDA context must not cost the eager figures
    return (False,) if REHEARSAL else (False, True)  # no CUDA Graphs on a CPU


def _label(graphs: bool) -> str:
    return "graphs_on" if graphs else "graphs_off"


def _p50(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def _noise_pcm(seconds: float, rate: int) -> Any:
    import numpy as np

    return (np.random.default_rng(1).standard_normal(int(seconds * rate)) * 0.05).astype(np.float32)


async def _timed_request(engine: Any, request_id: str, prompt: Any, tokens: int) -> dict[str, Any]:
    """One request to the end; where its time went (inputs, prefill, decode)."""
    from backends.gpu.engine_api import Sampling

    started = time.perf_counter()
    stream = await engine.submit(request_id, prompt, Sampling(max_tokens=tokens))
    inputs_ms = (time.perf_counter() - started) * 1000
    pieces = [piece async for piece in stream]
    timing = engine.last_timing
    return {
        "text": "".join(pieces),
        "total_ms": (time.perf_counter() - started) * 1000,
        "first_token_ms": inputs_ms + timing.prefill_ms,
        "prefill_ms": timing.prefill_ms,
        "tokens": timing.tokens,
        "decode_ms": timing.decode_ms,
        "graph_captured": bool(engine.decoder.captured),
    }


def _greedy_agreement(engine: Any, prompt: Any) -> float:
    """Share of the last request's tokens that a full forward over prompt + tokens (no
    cache, no graph) also picks: the static cache, its positions, the mask and the
    graph must reproduce what the model computes in one pass. bf16 rounding differs
    between the two, so a near tie may flip; wrong positions or a stale cache would
    agree on almost nothing."""
    import torch

    tokens = engine.last_timing.token_ids
    inputs = engine._on_device(engine._inputs(prompt))
    length = inputs["input_ids"].shape[1]
    fed = torch.tensor([tokens[:-1]], device=engine.device, dtype=inputs["input_ids"].dtype)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], fed], dim=1)
    for key, pad in (("attention_mask", 1), ("mm_token_type_ids", 0)):
        if key in inputs:
            inputs[key] = torch.cat([inputs[key], torch.full_like(fed, pad)], dim=1)
    with torch.inference_mode():
        engine._before_prefill()
        logits = engine.model(**inputs, use_cache=False).logits[0]
    picks = logits[length - 1 : length - 1 + len(tokens)].argmax(-1).tolist()
    return round(sum(a == b for a, b in zip(picks, tokens, strict=True)) / len(tokens), 3)


def _compare(result: dict[str, Any], texts: dict[bool, str], suffix: str = "") -> None:
    """Greedy decoding through the graph must give the eager step's tokens."""
    if True in texts and False in texts:
        result[f"graph_output_equals_eager{suffix}"] = texts[True] == texts[False]


def _engine(kind: str, path: str) -> Any:
    from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine

    engine = HfAsrEngine if kind == "asr" else HfVlmEngine
    return engine(path, dtype=DTYPE, device=DEVICE, load_format="dummy", max_len=ENGINE_MAX_LEN)


async def child_asr(paths: dict[str, str]) -> dict[str, Any]:
    from backends.gpu.asr import ASR_SAMPLE_RATE_HZ, build_asr_prompt
    from backends.gpu.engine_api import EnginePrompt

    engine = _engine("asr", paths["asr"])
    started = time.perf_counter()
    await engine.start()
    result: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 1)}
    pcm = _noise_pcm(3.0, ASR_SAMPLE_RATE_HZ)
    prompt = EnginePrompt(build_asr_prompt("en"), audio=(pcm, ASR_SAMPLE_RATE_HZ))
    texts: dict[bool, str] = {}
    for graphs in _modes():
        engine.decoder.graphs = graphs
        try:
            runs = [
                await _timed_request(engine, f"a{graphs}{r}", prompt, 32) for r in range(REPS + 1)
            ]
        except Exception as exc:  # this mode's error; the other mode still runs
            result[_label(graphs)] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            continue
        runs = runs[1:]  # the first is a warm-up (and the graph's capture)
        result[_label(graphs)] = {
            "latency_3s_audio_32_tokens_ms": _p50([r["total_ms"] for r in runs]),
            "prefill_ms": _p50([r["prefill_ms"] for r in runs]),
            "decode_ms_per_token": round(
                statistics.median(r["decode_ms"] / max(r["tokens"] - 1, 1) for r in runs), 2
            ),
            "tokens": runs[-1]["tokens"],
            "graph_captured": runs[-1]["graph_captured"],
            "greedy_agreement_with_full_forward": _greedy_agreement(engine, prompt),
        }
        texts[graphs] = runs[-1]["text"]
    _compare(result, texts)
    await engine.close()
    return result


async def child_vlm(paths: dict[str, str]) -> dict[str, Any]:
    from backends.base import PromptContext, VlmRequest
    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.frames import decode_frames
    from backends.gpu.placement import default_placement
    from backends.gpu.vlm import JOYAI_SYSTEM_PROMPT, VlmStage

    engine = _engine("vlm", paths["vlm"])
    placement = replace(default_placement(1).vlm, model=paths["vlm"], max_model_len=ENGINE_MAX_LEN)
    started = time.perf_counter()
    result: dict[str, Any] = {}
    async with VlmStage(engine, placement, image_tokens=196) as stage:
        result["load_s"] = round(time.perf_counter() - started, 1)
        prompts = {}
        texts: dict[tuple[bool, int], str] = {}
        for frames in (1, 8):
            ctx = PromptContext(
                system=JOYAI_SYSTEM_PROMPT,
                transcript="What do you see right now?",
                frames=tuple(_noise_jpeg(i) for i in range(frames)),
            )
            built = stage.build(VlmRequest(f"b{frames}", ctx))
            prompts[frames] = (EnginePrompt(built.text, images=decode_frames(built.images)), built)
        for graphs in _modes():
            engine.decoder.graphs = graphs
            figures: dict[str, Any] = {}
            result[_label(graphs)] = figures
            for frames, (prompt, built) in prompts.items():
                try:
                    runs = [
                        await _timed_request(
                            engine, f"v{graphs}{frames}{r}", prompt, VLM_DECODE_TOKENS
                        )
                        for r in range(REPS + 1)
                    ][1:]
                except Exception as exc:  # this mode's error; the other mode still runs
                    figures["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                    break
                texts[(graphs, frames)] = runs[-1]["text"]
                figures[f"greedy_agreement_{frames}_frames"] = _greedy_agreement(engine, prompt)
                figures[f"ttft_{frames}_frames_ms"] = _p50([r["first_token_ms"] for r in runs])
                figures[f"prompt_tokens_{frames}_frames"] = built.prompt_tokens
                figures[f"decode_tokens_per_s_{frames}_frames"] = round(
                    statistics.median(
                        (r["tokens"] - 1) / (r["decode_ms"] / 1000) for r in runs if r["decode_ms"]
                    ),
                    1,
                )
            figures["graph_captured"] = bool(engine.decoder.captured)
        for frames in prompts:
            pair = {g: texts[(g, frames)] for g in _modes() if (g, frames) in texts}
            _compare(result, pair, f"_{frames}_frames")
    return result


def _tts_checkpoint(paths: dict[str, str]) -> str:
    """The Qwen3-TTS checkpoint: real sizes on the GPU (toy in a rehearsal), written once."""
    from gpu_tiny_models import REAL_TTS, TINY_TTS, build_tiny_tts, build_tokenizer

    out = Path(paths["root"]) / "tts"
    if not (out / "model.safetensors").exists():
        sizes = TINY_TTS if REHEARSAL else REAL_TTS
        build_tiny_tts(
            out, build_tokenizer(vocab_size=2000), sizes=sizes, device=DEVICE, dtype=DTYPE
        )
    return str(out)


async def child_tts(paths: dict[str, str]) -> dict[str, Any]:
    import importlib.util

    from backends.gpu.placement import default_placement

    started = time.perf_counter()
    model = _tts_checkpoint(paths)
    result: dict[str, Any] = {"build_s": round(time.perf_counter() - started, 1)}
    text = "Hello! I can see a red ball on the table in front of you."
    for graphs in _modes():
        if graphs and importlib.util.find_spec("faster_qwen3_tts") is None:
            result[_label(graphs)] = {"skipped": "faster-qwen3-tts is not installed"}
            continue
        placement = replace(
            default_placement(1).tts,
            model=model,
            device="cpu" if REHEARSAL else 0,
            dtype=DTYPE,
            enforce_eager=not graphs,
            max_tokens=TTS_FRAMES,
        )
        try:
            result[_label(graphs)] = await _tts_mode(placement, graphs, text)
        except Exception as exc:  # this mode's error; the other mode still runs
            result[_label(graphs)] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    return result


async def _tts_mode(placement: Any, graphs: bool, text: str) -> dict[str, Any]:
    from backends.gpu.tts import TtsStage, make_synthesizer

    loading = time.perf_counter()
    firsts, rtfs, seconds = [], [], []
    async with TtsStage(make_synthesizer(placement), placement) as stage:
        load_s = round(time.perf_counter() - loading, 1)
        await stage.warmup()
        for rep in range(REPS + 1):
            first, elapsed, samples = await time_utterance(stage, f"t{graphs}{rep}", text)
            if rep:
                firsts.append(first * 1000)
                rtfs.append(elapsed / max(samples / 24_000, 1e-9))
                seconds.append(samples / 24_000)
    return {
        "load_and_warmup_s": load_s,
        "ttfa_ms": _p50(firsts),
        "rtf": round(statistics.median(rtfs), 3),
        "audio_s_per_utterance": round(statistics.median(seconds), 2),
        "runtime": "faster-qwen3-tts (CUDA Graphs)" if graphs else "qwen_tts eager",
    }


def _placement_file(paths: dict[str, str], graphs: bool, tts_graphs: bool, out: Path) -> Path:
    device = '"cpu"' if REHEARSAL else "0"

    def stage(graphs: bool) -> str:
        return f'device = {device}\ndtype = "{DTYPE}"\nenforce_eager = {str(not graphs).lower()}\n'

    engine = f'{stage(graphs)}load_format = "dummy"\nmax_model_len = {ENGINE_MAX_LEN}\n'
    out.write_text(
        'runtime = "transformers"\ngpus = 1\n'
        f'[asr]\nmodel = "{paths["asr"]}"\n{engine}gpu_memory_utilization = 0.1\nmax_tokens = 32\n'
        f'[vlm]\nmodel = "{paths["vlm"]}"\n{engine}gpu_memory_utilization = 0.45\nmax_tokens = 24\n'
        f'[tts]\nmodel = "{paths["tts"]}"\n{stage(tts_graphs)}gpu_memory_utilization = 0.3\n'
        f"max_tokens = {TTS_FRAMES}\n",
        encoding="utf-8",
    )
    return out


async def _turns(url: str, turns: int) -> list[dict[str, Any]]:
    import numpy as np

    from transport.client import DuplexClient

    speech = (np.sin(np.arange(16_000 * 3 // 2) / 5.0) * 8000).astype("<i2").tobytes()
    frame = _noise_jpeg(7)
    measured = []
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection=None)
        for _ in range(turns):
            await client.stream_audio(speech, frames=[frame])
            await client.commit(create_response=True)
            result = await client.collect_response(timeout=120)
            measured.append(
                {
                    "first_audio_ms": None
                    if result.time_to_first_audio_s is None
                    else round(result.time_to_first_audio_s * 1000, 1),
                    "status": result.status,
                    "errors": [f"{e.code}: {e.message}" for e in result.errors],
                    "audio_ms": round(result.audio_ms(), 1),
                }
            )
    return measured


def part_e2e(
    paths: dict[str, str], graphs: bool, budget_s: float, *, tts_graphs: bool
) -> dict[str, Any]:
    """`joyduplex serve --backend gpu` on one device; turns through its websocket.

    `tts_graphs` false with `graphs` true: the TTS graphs failed in their own part, so
    the turn runs ASR and VLM on graphs and the TTS eager (the report says so)."""
    import socket

    import httpx

    deadline = time.monotonic() + budget_s
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    root = Path(paths["root"])
    placement = _placement_file(paths, graphs, tts_graphs, root / f"placement-{graphs}.toml")
    # one measured session: a loop busy with model threads must not shed it
    config = root / "serve.toml"
    config.write_text("[limits]\nshed_loop_lag_ms = 0\n", encoding="utf-8")
    log = root / f"serve-{graphs}.log"
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    started = time.perf_counter()
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "transport.cli", "serve", "--backend", "gpu"),
                *("--placement", str(placement), "--config", str(config)),
                *("--port", str(port), "--workers", "1"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": python_path},
        )
    result: dict[str, Any] = {"tts_runtime": "CUDA Graphs" if tts_graphs else "eager"}
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                return {"error": "server not ready", "log_tail": log.read_text()[-3000:]}
            time.sleep(0.5)
        result["ready_s"] = round(time.perf_counter() - started, 1)
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        turns = asyncio.run(
            asyncio.wait_for(_turns(url, E2E_TURNS + 1), max(deadline - time.monotonic(), 5))
        )
        firsts = [t["first_audio_ms"] for t in turns[1:] if t["first_audio_ms"] is not None]
        result.update(
            {
                "end_of_commit_to_first_audio_p50_ms": _p50(firsts) if firsts else None,
                "turns_measured": len(firsts),
                "warmup_turn": turns[0],
                "turns": turns[1:],
            }
        )
        if len(firsts) < E2E_TURNS:
            result["error"] = "a turn had no reply audio"
            result["log_tail"] = log.read_text()[-3000:]
    except Exception as exc:  # reported, the other parts' figures stay
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_tail"] = log.read_text()[-3000:]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return result


CHILDREN = {"asr": child_asr, "vlm": child_vlm, "tts": child_tts}


#: each part's share of the budget (a part may use what earlier parts left)
SHARES = {"asr": 0.12, "vlm": 0.2, "tts": 0.24, "e2e_graphs_on": 0.22, "e2e_graphs_off": 0.22}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="gpu-device-check.json")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--only", nargs="*", default=list(SHARES))
    parser.add_argument("--child")
    parser.add_argument("--paths")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.child:
        import anyio

        result = anyio.run(CHILDREN[args.child], json.loads(args.paths))
        print("CHILD_RESULT " + json.dumps(result), flush=True)
        return 0

    began = time.monotonic()
    deadline = began + args.budget_s
    out = Path(args.out)
    report: dict[str, Any] = {
        "runtime": "transformers (static KV cache + CUDA Graph decode step), faster-qwen3-tts",
        "vllm": VLLM_NOTE,
        "weights": "random (dummy), real architectures and sizes; figures are of fixed work",
        "rehearsal_on_cpu": REHEARSAL,
        "preflight": preflight(),
        "time_s": {},
    }
    if not report["preflight"].get("cuda") and not REHEARSAL:
        report["error"] = "no CUDA device"
        out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(json.dumps(report, indent=1))
        return 1
    with tempfile.TemporaryDirectory(prefix="joyduplex-device-check-") as root:
        paths = {**build_checkpoints(Path(root), asr_layout="transformers"), "root": root}
        paths["tts"] = str(Path(root) / "tts")
        parts = [p for p in SHARES if p in args.only]
        for index, part in enumerate(parts):
            left = deadline - time.monotonic()
            weight = sum(SHARES[p] for p in parts[index:])
            budget = left * SHARES[part] / weight
            if left < 20:
                report[part] = {"skipped": "time budget spent"}
                continue
            t0 = time.monotonic()
            if part.startswith("e2e"):
                graphs = part.endswith("_on")
                if graphs and REHEARSAL:
                    report[part] = {"skipped": "no CUDA Graphs on a CPU (rehearsal)"}
                    continue
                if not (Path(paths["tts"]) / "speech_tokenizer" / "config.json").exists():
                    report[part] = {"skipped": "no TTS checkpoint (the tts part did not build one)"}
                    continue
                tts_ok = "ttfa_ms" in report.get("tts", {}).get("graphs_on", {})
                report[part] = part_e2e(paths, graphs, budget, tts_graphs=graphs and tts_ok)
            else:
                report[part] = run_child(part, paths, budget, script=__file__)
            report["time_s"][part] = round(time.monotonic() - t0, 1)
            at = time.monotonic() - began
            print(f"[{at:6.1f} s] {part}: {json.dumps(report[part])[:600]}", flush=True)
            out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    report["time_s"]["total"] = round(time.monotonic() - began, 1)
    out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report, indent=1))
    print("where the time went (s):", json.dumps(report["time_s"]))
    failed = [p for p in SHARES if isinstance(report.get(p), dict) and "error" in report[p]]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
