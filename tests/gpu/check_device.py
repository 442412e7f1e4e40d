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
          and 8 448-px frames (cold: nothing kept from earlier requests),
          decode tokens/s; a camera session's 8th turn cold, reusing the
          previous turn's KV, and with its frame prepared on arrival     graphs on / off
    tts   Qwen3-TTS-12Hz-1.7B (Talker + code predictor + Code2Wav):
          time to first audio chunk, real-time factor                    graphs on / off
    tts_batched  the batched streaming TTS (backends/gpu/batched_tts.py):
          1, 8 and 32 streams at once, step time, whether they hold real
          time, first chunk p50 / p95 (check_tts_batched.py)         graphs on / off
    e2e   `joyduplex serve --backend gpu`, one GPU, over loopback: end of
          commit to first reply audio, p50 of 5 turns (after a warm-up)  graphs on / off
    server_vad  the same server, `server_vad` turns (500 ms of silence ends
          one) with live partials and preemptive responses: 1.5 s of a
          synthetic voice in 20 ms appends paced in real time; end of
          speech -> speech_stopped, -> committed, -> first audio, and
          commit -> first audio, p50 / p90 of 10 turns (after a warm-up);
          the server's own seconds per stage request (/metrics), partials
          answered and reused by commits, preemptive responses started /
          adopted / discarded                                          graphs on
    device_audit  mixed placement under the device audit: ASR on the CPU, VLM
          and TTS on cuda:0, every op of each stage's torch work checked
          to stay on its device (backends/gpu/device_audit.py); one turn
          through each stage, passed or the error                     eager VLM

`--backend gpu` builds no VAD (`Backend.vad` is None), so a `server_vad` session there
would never hear speech: for `server_vad` the check starts the server through itself
(`check_device.py serve-with-vad ...`), which adds the cpu backend's Silero VAD (ONNX on
the CPU, as the VAD is meant to be shared) when onnxruntime and silero-vad are there, else
the scripted backend's energy VAD; the report names the one used.

Random weights decode to noise, so every figure is of fixed work: the engines' output
rows for undecodable and special ids are zeroed, so each request runs to its token cap
(ASR 32, VLM 24 in the whole turn, TTS `TTS_FRAMES` codec frames). The JSON says that
vLLM was not exercised and why. Each part runs in its own process with a time budget;
the report is rewritten after every part, so a part that fails or runs out of time
leaves the others' figures.

    python tests/gpu/check_device.py --out report.json [--budget-s 420]

Rehearsal: JOYDUPLEX_GPU_CHECK_REHEARSAL=1 runs the same script on the CPU with the
same configs at toy sizes, float32, graphs off only (`make test-gpu-path`), so the
lent session's one call cannot fail on a script bug; `server_vad` runs 3 turns there,
graphs off, with the energy VAD where onnxruntime is missing (`.venv-gpu-path`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from backends.base import Backend

ENGINE_MAX_LEN = 4096  # static KV cache positions per engine (8 frames need ~1.7K)
REPS = 2 if REHEARSAL else 4  # measured repetitions, after one warm-up each
TTS_FRAMES = 6 if REHEARSAL else 36  # codec frames per utterance (12.5 per second)
E2E_TURNS = 5
VAD_TURNS = 3 if REHEARSAL else 10  # measured server_vad turns, after one warm-up
VAD_SPEECH_S = 1.5  # of synthetic voice per turn, then silence until the reply is done
VLM_DECODE_TOKENS = 8 if REHEARSAL else 64
CAMERA_TOKENS = 8  # per turn of the camera sequence: its time to first token is measured
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
        # the VLM keeps prompts' KV and frames' encodings (backends/gpu/prompt_reuse.py)
        "prompt_tokens": timing.prompt_tokens,
        "reused_tokens": timing.reused_tokens,
        "prefilled_tokens": timing.prefilled_tokens,
        "images_encoded": timing.images_encoded,
    }


async def _cold_request(engine: Any, request_id: str, prompt: Any, tokens: int) -> dict[str, Any]:
    """`_timed_request` with nothing kept from earlier requests: a full prefill, every
    frame encoded (the time-to-first-token figures, comparable with runs before reuse)."""
    engine.forget()
    return await _timed_request(engine, request_id, prompt, tokens)


async def _camera_turn(stage: Any, frames: int) -> dict[str, Any]:
    """Turn `frames` of a camera session (a new frame each tick; the earlier ticks'
    frames and replies in its history, as JoyAI's prompt builder keeps them): its time
    to first token cold (nothing kept), after the previous turn (its KV kept, the new
    frame encoded at the prefill), and after it with the new frame prepared on arrival."""
    from backends.base import VlmRequest
    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.frames import decode_frames
    from tests.gpu.camera_session import CameraSession

    engine = stage.engine
    engine.forget()
    session = CameraSession("What do you see right now?")
    prompts = []
    for turn in range(frames):
        frame = _noise_jpeg(100 + turn)
        ctx = session.context(frame)
        built = stage.build(VlmRequest(f"cam{turn}", ctx))
        prompts.append(EnginePrompt(built.text, images=decode_frames(built.images)))
        if turn < frames - 1:
            run = await _timed_request(engine, f"cam{turn}", prompts[-1], CAMERA_TOKENS)
            session.answered(ctx, run["text"])
    previous, prompt = prompts[-2:]
    cold = await _cold_request(engine, "cam-cold", prompt, CAMERA_TOKENS)
    await _cold_request(engine, "cam-previous", previous, CAMERA_TOKENS)
    reused = await _timed_request(engine, "cam-reused", prompt, CAMERA_TOKENS)
    await _cold_request(engine, "cam-previous-2", previous, CAMERA_TOKENS)
    await stage.prepare_frame(frame)  # as it arrives, before its turn
    prepared = await _timed_request(engine, "cam-prepared", prompt, CAMERA_TOKENS)
    return {
        "prompt_tokens": cold["prompt_tokens"],
        "ttft_cold_ms": round(cold["first_token_ms"], 1),
        "ttft_reused_ms": round(reused["first_token_ms"], 1),
        "ttft_reused_prepared_ms": round(prepared["first_token_ms"], 1),
        "reused_tokens": reused["reused_tokens"],
        "prefilled_tokens": reused["prefilled_tokens"],
        "images_encoded": {
            "cold": cold["images_encoded"],
            "reused": reused["images_encoded"],
            "reused_prepared": prepared["images_encoded"],
        },
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
    return float(round(sum(a == b for a, b in zip(picks, tokens, strict=True)) / len(tokens), 3))


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
                        await _cold_request(
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
            if "error" not in figures:
                try:
                    figures["camera_turn_8_frames"] = await _camera_turn(stage, 8)
                except Exception as exc:  # its own error; the figures above stay
                    figures["camera_turn_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            figures["graph_captured"] = bool(engine.decoder.captured)
        for frames in prompts:
            pair = {g: texts[(g, frames)] for g in _modes() if (g, frames) in texts}
            _compare(result, pair, f"_{frames}_frames")
    return result


#: batch sizes of the continuous-batching decode figures, and steps timed at each
VLM_BATCHES = (1, 8, 32)
VLM_BATCH_STEPS = 4 if REHEARSAL else 48


async def child_vlm_batched(paths: dict[str, str]) -> dict[str, Any]:
    """VLM decode tokens/s at batch 1, 8 and 32 on the continuous-batching engine's
    decode step (`batched_decode.SlotDecoder`), each row a 64-token text prompt at its
    own position; graphs on where CUDA is, and the ratio of batch 32 to batch 1."""
    import torch

    from backends.gpu.batched_engine import BatchedHfEngine
    from backends.gpu.engine_api import Sampling

    engine = BatchedHfEngine(
        paths["vlm"],
        dtype=DTYPE,
        device=DEVICE,
        load_format="dummy",
        max_len=ENGINE_MAX_LEN,
        batch_slots=max(VLM_BATCHES),
    )
    started = time.perf_counter()
    await engine.start()
    result: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 1)}
    decoder = engine.batch  # no request is submitted: the engine's loop thread stays idle
    assert decoder is not None
    prompt = [int(i) for i in torch.randint(100, 1000, (64,))]

    def run(batch: int, graphs: bool) -> dict[str, Any]:
        decoder.graphs = graphs and decoder.device.type == "cuda"
        slots = list(range(batch))
        with torch.inference_mode():
            tokens = []
            for slot in slots:
                decoder.begin(slot, Sampling(max_tokens=VLM_BATCH_STEPS + 8))
                logits = decoder.prefill_chunk(slot, prompt, 0)
                tokens.append(int(torch.argmax(logits)))
            for _ in range(2):  # warm-up: the graph of this batch's bucket is captured
                tokens = decoder.step(slots, tokens).tokens
            if DEVICE.startswith("cuda"):
                torch.cuda.synchronize(DEVICE)
            began = time.perf_counter()
            for _ in range(VLM_BATCH_STEPS):
                tokens = decoder.step(slots, tokens).tokens  # one host transfer a step
            seconds = time.perf_counter() - began
        return {
            "tokens_per_s": round(batch * VLM_BATCH_STEPS / seconds, 1),
            "step_ms": round(seconds * 1000 / VLM_BATCH_STEPS, 2),
        }

    for graphs in _modes():
        figures: dict[str, Any] = {}
        result[_label(graphs)] = figures
        try:
            for batch in VLM_BATCHES:
                figures[f"batch_{batch}"] = run(batch, graphs)
        except Exception as exc:  # this mode's error; the other mode still runs
            figures["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            continue
        one, most = figures["batch_1"], figures[f"batch_{max(VLM_BATCHES)}"]
        figures["tokens_per_s_ratio_32_to_1"] = round(most["tokens_per_s"] / one["tokens_per_s"], 2)
        figures["graph_buckets_captured"] = decoder.captured_buckets
    await engine.close()
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
    rtf = round(statistics.median(rtfs), 3)
    return {
        "load_and_warmup_s": load_s,
        "ttfa_ms": _p50(firsts),
        "rtf": rtf,
        # the stage synthesizes one utterance at a time per device (a lock over each), so
        # the streams it keeps in real time are those whose audio it makes faster than
        # they play: 1 / rtf of them, until a batched TTS serves several in one step
        "streams_in_real_time": int(1 / rtf) if rtf > 0 else None,
        "audio_s_per_utterance": round(statistics.median(seconds), 2),
        "runtime": "faster-qwen3-tts (CUDA Graphs)" if graphs else "qwen_tts eager",
    }


async def child_tts_batched(paths: dict[str, str]) -> dict[str, Any]:
    from check_tts_batched import streams_in_real_time

    model = _tts_checkpoint(paths)
    return streams_in_real_time(
        model, device=DEVICE, dtype=DTYPE, frames=TTS_FRAMES, modes=_modes()
    )


async def child_device_audit(paths: dict[str, str]) -> dict[str, Any]:
    """The two-GPU placement's promise checked on one GPU: ASR on the CPU, VLM and TTS on
    `DEVICE`, each under the device audit (`backends/gpu/device_audit.py`), one turn
    through each stage. A stage reaching for "the" GPU (a device-less `.cuda()`, a
    `device="cuda"`, a default device) lands on cuda:0, the current device: in the ASR,
    placed on the CPU here, that fails naming the op, where on two GPUs it would have put
    the ASR's work on the VLM's GPU. The VLM runs eager (the ops a graph would capture,
    each checked; replays are not ops), the TTS as served (CUDA Graphs where
    faster-qwen3-tts is installed). The ASR keeps the real widths but 2 decoder and 2
    encoder layers: the same code, seconds on the CPU instead of the 1.7B's minute.
    The rehearsal runs every stage on the CPU, so there only the audit's own paths run."""
    import importlib.util
    import shutil

    from backends.base import AsrRequest, PromptContext, VlmDecisionResult, VlmRequest
    from backends.gpu.asr import ASR_SAMPLE_RATE_HZ, AsrStage
    from backends.gpu.device_audit import DeviceAuditError
    from backends.gpu.engine_api import Sampling
    from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine
    from backends.gpu.placement import default_placement
    from backends.gpu.tts import TtsStage, make_synthesizer
    from backends.gpu.vlm import JOYAI_SYSTEM_PROMPT, VlmStage

    asr_path = Path(paths["root"]) / "asr-cpu"
    if not asr_path.exists():
        shutil.copytree(paths["asr"], asr_path)
        config = json.loads((asr_path / "config.json").read_text(encoding="utf-8"))
        text, audio = config["text_config"], config["audio_config"]
        text["num_hidden_layers"] = min(2, text["num_hidden_layers"])
        if isinstance(text.get("layer_types"), list):
            text["layer_types"] = text["layer_types"][: text["num_hidden_layers"]]
        audio["encoder_layers"] = min(2, audio["encoder_layers"])
        (asr_path / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    tts_graphs = not REHEARSAL and importlib.util.find_spec("faster_qwen3_tts") is not None
    devices = {"asr": "cpu", "vlm": DEVICE, "tts": DEVICE}
    result: dict[str, Any] = {"placement": devices, "stages": {}}

    async def asr_turn() -> dict[str, Any]:
        engine = HfAsrEngine(
            str(asr_path), dtype="float32", device="cpu", load_format="dummy",
            max_len=ENGINE_MAX_LEN, cuda_graphs=False, device_audit=True,
        )  # fmt: skip
        placement = replace(default_placement(1).asr, model=str(asr_path), device="cpu")
        async with AsrStage(engine, placement, sampling=Sampling(max_tokens=8)) as stage:
            pcm = _noise_pcm(1.0, ASR_SAMPLE_RATE_HZ)
            transcript = await stage.transcribe(AsrRequest("audit-asr", pcm))
        return {"tokens": engine.last_timing.tokens, "transcript_chars": len(transcript.text)}

    async def vlm_turn() -> dict[str, Any]:
        engine: Any = HfVlmEngine(
            paths["vlm"], dtype=DTYPE, device=DEVICE, load_format="dummy",
            max_len=ENGINE_MAX_LEN, cuda_graphs=False, device_audit=True,
        )  # fmt: skip
        placement = replace(
            default_placement(1).vlm, model=paths["vlm"], max_model_len=ENGINE_MAX_LEN
        )
        stage = VlmStage(engine, placement, sampling=Sampling(max_tokens=8), image_tokens=196)
        async with stage:
            frame = _noise_jpeg(3)
            await stage.prepare_frame(frame)  # the preparation path, audited too
            ctx = PromptContext(
                system=JOYAI_SYSTEM_PROMPT, transcript="What do you see?", frames=(frame,)
            )
            items = [item async for item in stage.generate(VlmRequest("audit-vlm", ctx))]
        decision = items[-1]
        assert isinstance(decision, VlmDecisionResult)
        timing = engine.last_timing
        return {"tokens": timing.tokens, "images_encoded_at_prefill": timing.images_encoded}

    async def tts_turn() -> dict[str, Any]:
        placement = replace(
            default_placement(1).tts,
            model=_tts_checkpoint(paths),
            device="cpu" if REHEARSAL else 0,
            dtype=DTYPE,
            enforce_eager=not tts_graphs,
            max_tokens=TTS_FRAMES,
            device_audit=True,
        )
        async with TtsStage(make_synthesizer(placement), placement) as stage:
            await stage.warmup()
            _, _, samples = await time_utterance(stage, "audit-tts", "Hello! I see a red ball.")
        runtime = "faster-qwen3-tts (CUDA Graphs)" if tts_graphs else "qwen_tts eager"
        return {"runtime": runtime, "audio_s": round(samples / 24_000, 2)}

    for name, turn in (("asr", asr_turn), ("vlm", vlm_turn), ("tts", tts_turn)):
        started = time.perf_counter()
        entry: dict[str, Any] = {"device": devices[name]}
        try:
            entry.update(await turn(), passed=True)
        except DeviceAuditError as exc:  # the audit's finding: which op, on which device
            entry.update(passed=False, error=str(exc), op=exc.op, found=exc.found)
        except Exception as exc:  # anything else that stopped the turn
            entry.update(passed=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        entry["s"] = round(time.perf_counter() - started, 1)
        result["stages"][name] = entry
    failed = [f"{n}: {e['error']}" for n, e in result["stages"].items() if not e["passed"]]
    result["passed"] = not failed
    if failed:
        result["error"] = "; ".join(failed)
    return result


def _placement_file(
    paths: dict[str, str], graphs: bool, tts_graphs: bool, out: Path, *, vlm_batch_slots: int = 0
) -> Path:
    device = '"cpu"' if REHEARSAL else "0"
    batch = f"batch_slots = {vlm_batch_slots}\n" if vlm_batch_slots else ""
    # the talking sessions' TTS streams share steps too (batched_tts.py): its graphs are
    # its own, so faster-qwen3-tts's (`tts_graphs`) do not decide them
    # (1024 positions a stream: a prompt and TTS_FRAMES frames, in 32 slots' KV)
    streams = ""
    if vlm_batch_slots:
        streams = f"batch_streams = {vlm_batch_slots}\nmax_model_len = 1024\n"
    tts_graphs = graphs if streams else tts_graphs

    def stage(graphs: bool) -> str:
        return f'device = {device}\ndtype = "{DTYPE}"\nenforce_eager = {str(not graphs).lower()}\n'

    engine = f'{stage(graphs)}load_format = "dummy"\nmax_model_len = {ENGINE_MAX_LEN}\n'
    out.write_text(
        'runtime = "transformers"\ngpus = 1\n'
        f'[asr]\nmodel = "{paths["asr"]}"\n{engine}gpu_memory_utilization = 0.1\nmax_tokens = 32\n'
        f'[vlm]\nmodel = "{paths["vlm"]}"\n{engine}gpu_memory_utilization = 0.45\nmax_tokens = 24\n'
        f"{batch}"
        f'[tts]\nmodel = "{paths["tts"]}"\n'
        f"{stage(tts_graphs)}gpu_memory_utilization = 0.3\n"
        f"max_tokens = {TTS_FRAMES}\n{streams}",
        encoding="utf-8",
    )
    return out


async def _turns(url: str, turns: int) -> list[dict[str, Any]]:
    import numpy as np

    from clients.duplex_client import DuplexClient

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


def _launch(
    paths: dict[str, str],
    graphs: bool,
    tts_graphs: bool,
    name: str,
    entry: tuple[str, ...],
    *,
    vlm_batch_slots: int = 0,
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """`python ENTRY --backend gpu ...` on a free loopback port: (process, port, log)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    root = Path(paths["root"])
    placement = _placement_file(
        paths, graphs, tts_graphs, root / f"placement-{name}.toml", vlm_batch_slots=vlm_batch_slots
    )
    # one measured session: a loop busy with model threads must not shed it
    config = root / "serve.toml"
    config.write_text("[limits]\nshed_loop_lag_ms = 0\n", encoding="utf-8")
    log = root / f"serve-{name}.log"
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, *entry, "--backend", "gpu"),
                *("--placement", str(placement), "--config", str(config)),
                *("--port", str(port), "--workers", "1"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": python_path},
        )
    return server, port, log


def _ready(server: subprocess.Popen[bytes], port: int, deadline: float) -> bool:
    import httpx

    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def part_e2e(
    paths: dict[str, str], graphs: bool, budget_s: float, *, tts_graphs: bool
) -> dict[str, Any]:
    """`joyduplex serve --backend gpu` on one device; turns through its websocket.

    `tts_graphs` false with `graphs` true: the TTS graphs failed in their own part, so
    the turn runs ASR and VLM on graphs and the TTS eager (the report says so)."""
    deadline = time.monotonic() + budget_s
    started = time.perf_counter()
    entry = ("-m", "transport.cli", "serve")
    server, port, log = _launch(paths, graphs, tts_graphs, str(graphs), entry)
    result: dict[str, Any] = {"tts_runtime": "CUDA Graphs" if tts_graphs else "eager"}
    try:
        if not _ready(server, port, deadline):
            return {"error": "server not ready", "log_tail": log.read_text()[-3000:]}
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
        _stop(server)
    return result


# --- server_vad turns ---------------------------------------------------------------

SERVE_WITH_VAD = "serve-with-vad"
VAD_MARK = "CHECK_VAD "  # the server's log line naming the VAD it serves with
_VOWELS = (
    (730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480),
    (660, 1720, 2410), (490, 1350, 1690), (400, 2000, 2550), (570, 840, 2410),
)  # fmt: skip
_VAD_RATE = 16_000
_VAD_CHUNK_MS = 20
_VAD_LEAD_S = 0.3  # silence before each utterance: the VAD sees speech begin
_VAD_REPLY_TIMEOUT_S = 120.0
_VAD_NO_SPEECH_S = 5.0  # of silence after the utterance without speech_stopped: a miss
#: stages the server times (`joyduplex_stage_latency_seconds`); asr is the commit's own
_STAGES = ("asr", "asr_partial", "vlm", "tts", "turn_end")


def _voiced_pcm(seconds: float) -> Any:
    """A synthetic voice (float32, 16 kHz): syllables of 120-300 ms, each a harmonic
    series on a falling pitch through three formants gliding between two vowels, some
    led by a fricative burst or followed by a short gap. Silero scores it as speech
    (above 0.8 throughout, seed 0) where it scores a tone or white noise below 0.05,
    and it is deterministic, so every turn is the same fixed work."""
    import numpy as np

    rng = np.random.default_rng(0)
    total = int(seconds * _VAD_RATE)
    parts: list[Any] = []
    made, pitch = 0, 150.0
    while made < total:
        length = rng.uniform(0.12, 0.3)
        t = np.arange(int(length * _VAD_RATE)) / _VAD_RATE
        fall = 0.25 * rng.uniform(0.3, 1.0)
        f0 = pitch * (1 - fall * t / length) * (1 + 0.02 * np.sin(2 * np.pi * 5 * t))
        pitch = float(np.clip(pitch * rng.uniform(0.85, 1.15), 100, 220))
        phase = 2 * np.pi * np.cumsum(f0 / _VAD_RATE)
        a, b = (np.array(_VOWELS[rng.integers(len(_VOWELS))], float) for _ in range(2))
        glide = (t / length)[:, None]
        formants = a[None] * (1 - glide) + b[None] * glide
        voice = np.zeros(len(t))
        for k in range(1, 45):
            fk = k * f0
            gain = sum(1 / (1 + ((fk - formants[:, i]) / (50 + 40 * i)) ** 2) for i in range(3))
            voice += np.where(fk < 7600, gain / k**0.5, 0.0) * np.sin(k * phase)
        syllable = voice / np.abs(voice).max() * np.sin(np.pi * t / length) ** 0.5
        syllable *= rng.uniform(0.5, 1.0)
        if rng.random() < 0.5:
            burst = int(rng.uniform(0.04, 0.09) * _VAD_RATE)
            syllable = np.concatenate([np.diff(rng.standard_normal(burst + 1)) * 0.12, syllable])
        parts.append(syllable)
        made += len(syllable)
        if rng.random() < 0.35:
            gap = np.zeros(int(rng.uniform(0.03, 0.07) * _VAD_RATE))
            parts.append(gap)
            made += len(gap)
    audio = np.concatenate(parts)[:total]
    return (audio / np.abs(audio).max() * 0.3).astype(np.float32)


def _check_vad() -> tuple[Any, str]:
    """Silero where onnxruntime and the silero-vad wheel are (the lent image has
    onnxruntime; prepare_device.sh carries the wheel), else the energy VAD (the
    rehearsal's environment has no onnxruntime)."""
    import importlib.util

    if all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "silero_vad")):
        from backends.cpu.vad import SileroVad

        return SileroVad(), "Silero VAD (backends.cpu.vad, ONNX on the CPU)"
    from backends.scripted.script import Script
    from backends.scripted.stages import ScriptedVad

    return ScriptedVad(Script()), "energy VAD (backends.scripted: frame RMS > 0.01 is speech)"


def serve_with_vad(argv: list[str]) -> int:
    """`joyduplex serve ARGV`, the gpu backend given a server VAD if it builds none."""
    import backends.gpu.backend as gpu
    from transport.cli import main as cli

    build = gpu.create_backend

    def create_backend(*, placement: str | None = None, profile: str = "speech") -> Backend:
        backend = build(placement=placement, profile=profile)
        attached = backend.vad is None
        if backend.vad is None:
            backend.vad, name = _check_vad()
            backend.description += f"; server VAD added by the GPU check: {name}"
        else:
            name = type(backend.vad).__name__
        print(VAD_MARK + json.dumps({"vad": name, "added_by_check": attached}), flush=True)
        return backend

    gpu.create_backend = create_backend  # `serve` looks the factory up when it loads
    return cli(["serve", *argv])


def _metrics(port: int) -> dict[str, float]:
    """The server's `joyduplex_*` samples (`name{labels}` -> value) from /metrics."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples = {}
    for line in text.splitlines():
        if line.startswith("joyduplex_"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


#: the batched engines' own timings, as the stage latency histograms export them
_ENGINE_TIMINGS = (
    "vlm_queue_wait",
    "vlm_prefill",
    "vlm_decode_step",
    "tts_queue_wait",
    "tts_prefill",
    "tts_decode_step",
    "tts_first_chunk",
)


def _stage_use(
    before: dict[str, float], after: dict[str, float], stages: tuple[str, ...] = _STAGES
) -> dict[str, dict[str, Any]]:
    """Requests each stage finished between two scrapes and their seconds in all."""
    used = {}
    for stage in stages:

        def grew(sample: str, stage: str = stage) -> float:
            key = f'joyduplex_stage_latency_seconds_{sample}{{stage="{stage}"}}'
            return after.get(key, 0) - before.get(key, 0)

        if count := grew("count"):
            used[stage] = {"requests": int(count), "s": round(grew("sum"), 3)}
    return used


def _preemptive(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for outcome in ("started", "adopted", "discarded"):
        key = f'joyduplex_preemptive_responses_total{{outcome="{outcome}"}}'
        counts[outcome] = after.get(key, 0) - before.get(key, 0)
    key = "joyduplex_preemptive_discarded_stage_seconds_total"
    counts["discarded_stage_s"] = round(after.get(key, 0) - before.get(key, 0), 3)
    return counts


def _percentiles(values: list[float | None]) -> dict[str, Any]:
    present = sorted(v for v in values if v is not None)

    def at(q: float) -> float | None:
        if not present:
            return None
        rank = q * (len(present) - 1)
        low = int(rank)
        high = min(low + 1, len(present) - 1)
        return round(present[low] + (present[high] - present[low]) * (rank - low), 1)

    return {"n": len(present), "p50": at(0.5), "p90": at(0.9), "p95": at(0.95)}


class _VadTurn:
    """What one turn's client saw, on `time.monotonic()`: the first of each event."""

    def __init__(self) -> None:
        self.end_of_speech: float | None = None  # send time of the last voiced append
        self.first: dict[str, float] = {}  # event type -> when it first came
        self.status: str | None = None
        self.errors: list[str] = []
        self.audio_bytes = 0
        self.partial_deltas = 0
        self.transcript = ""  # noise from random weights; a preemptive start needs words

    def ms(self, start: float | None, end: str) -> float | None:
        at = self.first.get(end)
        return None if start is None or at is None else round((at - start) * 1000, 1)

    def figures(self, stages: dict[str, Any]) -> dict[str, Any]:
        eos, committed = self.end_of_speech, self.first.get("input_audio_buffer.committed")
        return {
            "end_of_speech_to_speech_stopped_ms": self.ms(eos, "input_audio_buffer.speech_stopped"),
            "end_of_speech_to_committed_ms": self.ms(eos, "input_audio_buffer.committed"),
            "end_of_speech_to_transcript_ms": self.ms(
                eos, "conversation.item.input_audio_transcription.completed"
            ),
            "end_of_speech_to_first_audio_ms": self.ms(eos, "response.output_audio.delta"),
            "commit_to_first_audio_ms": self.ms(committed, "response.output_audio.delta"),
            "status": self.status,
            "errors": self.errors,
            "audio_ms": round(self.audio_bytes / 2 / 24_000 * 1000, 1),
            "partial_transcript_deltas": self.partial_deltas,
            "transcript_words": len(self.transcript.split()),
            "stages": stages,
        }


async def _vad_turns(
    port: int, turns: int, deadline: float
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Up to `turns` server_vad turns on one session (no new one once the deadline is
    near): each 0.3 s of silence, the utterance, then silence (a microphone keeps
    sending) until 0.3 s after `response.done`, 20 ms every 20 ms. /metrics is read
    before the first turn and after each, so each turn has its stages' own seconds.
    Returns each turn's figures and the scrape after the first (the warm-up)."""
    import numpy as np
    from websockets.asyncio.client import connect

    speech = _voiced_pcm(VAD_SPEECH_S)
    lead = np.zeros(int(_VAD_LEAD_S * _VAD_RATE), np.float32)
    data = (np.concatenate([lead, speech]) * 32767).astype("<i2").tobytes()
    last_voiced = len(lead) + len(speech) - 1
    chunk = _VAD_RATE * _VAD_CHUNK_MS // 1000
    quiet = base64.b64encode(bytes(2 * chunk)).decode()
    jpeg = base64.b64encode(_noise_jpeg(7)).decode()
    measured: list[dict[str, Any]] = []
    async with connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None) as ws:
        created = json.loads(await ws.recv())
        if created.get("type") != "session.created":
            raise RuntimeError(f"no session: {created}")
        current = _VadTurn()

        async def reader() -> None:
            async for raw in ws:
                now = time.monotonic()
                event = json.loads(raw)
                kind, turn = event.get("type", ""), current
                turn.first.setdefault(kind, now)
                if kind == "response.output_audio.delta":
                    turn.audio_bytes += len(base64.b64decode(event.get("delta", "")))
                elif kind == "conversation.item.input_audio_transcription.delta":
                    turn.partial_deltas += 1
                elif kind == "conversation.item.input_audio_transcription.completed":
                    turn.transcript = event.get("transcript") or ""
                elif kind == "response.done":
                    turn.status = event.get("response", {}).get("status")
                elif kind == "error":
                    error = event.get("error", {})
                    turn.errors.append(f"{error.get('code')}: {error.get('message')}")

        task = asyncio.create_task(reader())
        session = {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        before = await asyncio.to_thread(_metrics, port)
        first_scrape = before
        try:
            for index in range(turns):
                if deadline - time.monotonic() < 15:  # what was measured is reported
                    break
                current = turn = _VadTurn()
                start, sent = time.monotonic(), 0
                while True:
                    piece = data[2 * sent * chunk : 2 * (sent + 1) * chunk]
                    if not piece:
                        now = time.monotonic()
                        done = turn.first.get("response.done")
                        if done is not None and now >= done + 0.3:
                            break
                        stopped = "input_audio_buffer.speech_stopped" in turn.first
                        if now - (turn.end_of_speech or start) > (
                            _VAD_REPLY_TIMEOUT_S if stopped else _VAD_NO_SPEECH_S
                        ):
                            turn.errors.append("no reply" if stopped else "no speech_stopped")
                            break
                        if now > deadline:  # the part's time is up: report what came
                            turn.errors.append("no reply before the part's deadline")
                            break
                    # real time: the microphone gives 20 ms every 20 ms
                    delay = start + sent * _VAD_CHUNK_MS / 1000 - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    event: dict[str, Any] = {
                        "type": "input_audio_buffer.append",
                        "audio": base64.b64encode(piece).decode() if piece else quiet,
                    }
                    if sent == 0:
                        event["video_frames"] = [jpeg]
                    await ws.send(json.dumps(event))
                    if sent * chunk <= last_voiced < (sent + 1) * chunk:
                        turn.end_of_speech = time.monotonic()
                    sent += 1
                after = await asyncio.to_thread(_metrics, port)
                measured.append(turn.figures(_stage_use(before, after)))
                before = after
                if index == 0:
                    first_scrape = after
        finally:
            task.cancel()
    return measured, first_scrape


def part_server_vad(
    paths: dict[str, str], graphs: bool, budget_s: float, *, tts_graphs: bool
) -> dict[str, Any]:
    """server_vad turns through `serve --backend gpu` (given a VAD, see `serve_with_vad`)."""
    from backends.gpu.asr import AsrStage

    deadline = time.monotonic() + budget_s
    started = time.perf_counter()
    server, port, log = _launch(paths, graphs, tts_graphs, "vad", (__file__, SERVE_WITH_VAD))
    result: dict[str, Any] = {
        "graphs": "on" if graphs else "off",
        "tts_runtime": "CUDA Graphs" if tts_graphs else "eager",
        "turn_detection": "server_vad, silence_duration_ms 500 (default threshold 0.5)",
        "speech_s_per_turn": VAD_SPEECH_S,
        "turns_asked": VAD_TURNS,
    }
    try:
        if not _ready(server, port, deadline):
            return {**result, "error": "server not ready", "log_tail": log.read_text()[-3000:]}
        result["ready_s"] = round(time.perf_counter() - started, 1)
        marks = [line for line in log.read_text().splitlines() if line.startswith(VAD_MARK)]
        if marks:
            result["vad"] = json.loads(marks[-1].removeprefix(VAD_MARK))
        left = max(deadline - time.monotonic(), 5)
        turns, warm = asyncio.run(
            asyncio.wait_for(_vad_turns(port, VAD_TURNS + 1, deadline), left + 10)
        )
        after = _metrics(port)
        measured = turns[1:]
        result.update(
            {
                key: _percentiles([t[key] for t in measured])
                for key in (
                    "end_of_speech_to_speech_stopped_ms",
                    "end_of_speech_to_committed_ms",
                    "end_of_speech_to_transcript_ms",
                    "end_of_speech_to_first_audio_ms",
                    "commit_to_first_audio_ms",
                )
            }
        )
        with_audio = [t for t in measured if t["commit_to_first_audio_ms"] is not None]
        result["turns_measured"] = len(with_audio)
        stages = _stage_use(warm, after)
        result["stage_mean_s"] = {
            stage: {"requests": use["requests"], "mean_s": round(use["s"] / use["requests"], 3)}
            for stage, use in stages.items()
        }
        ttfa = "joyduplex_time_to_first_audio_seconds_{}"
        count = after.get(ttfa.format("count"), 0) - warm.get(ttfa.format("count"), 0)
        seconds = after.get(ttfa.format("sum"), 0) - warm.get(ttfa.format("sum"), 0)
        result["server_response_created_to_first_audio_mean_ms"] = (
            round(seconds / count * 1000, 1) if count else None
        )
        commit_asr = stages.get("asr", {}).get("requests", 0)
        result["live_partials"] = {
            "asr_stage_offers_them": AsrStage.live_transcripts,
            "partials_answered": stages.get("asr_partial", {}).get("requests", 0),
            "partial_transcript_deltas": sum(t["partial_transcript_deltas"] for t in measured),
            "commit_asr_requests": commit_asr,
            "commits_reusing_a_partial": max(len(measured) - commit_asr, 0),
        }
        result["preemptive_responses"] = _preemptive(warm, after)
        result["warmup_turn"] = turns[0]
        result["turns"] = measured
        problems = [e for t in measured for e in t["errors"]]
        if len(with_audio) < VAD_TURNS or problems:
            result["error"] = f"{len(with_audio)} of {VAD_TURNS} turns had reply audio"
            result["errors"] = problems[:20]
            result["log_tail"] = log.read_text()[-3000:]
    except Exception as exc:  # reported, the other parts' figures stay
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["log_tail"] = log.read_text()[-3000:]
    finally:
        _stop(server)
    return result


CHILDREN = {
    "asr": child_asr,
    "vlm": child_vlm,
    "vlm_batched": child_vlm_batched,
    "tts": child_tts,
    "tts_batched": child_tts_batched,
    "device_audit": child_device_audit,
}


#: talking sessions at once (server VAD, real-time speech, a turn after each reply), and
#: the turns each speaks after its warm-up turn
TALKING_SESSIONS = (2, 4) if REHEARSAL else (8, 32)
TALKING_TURNS = 2 if REHEARSAL else 3


def part_talking_sessions(
    paths: dict[str, str], graphs: bool, budget_s: float, *, tts_graphs: bool
) -> dict[str, Any]:
    """8 and then 32 sessions talking at once through `serve --backend gpu`, the VLM on
    the continuous-batching engine (`batch_slots = 32`) and the TTS on the batched
    streams (`batch_streams = 32`): end of speech to first audio p50 and p95 over every
    session's turns after its first, and every error. Each session is the server_vad
    part's client (`_vad_turns`); the ASR still serves one request at a time."""
    deadline = time.monotonic() + budget_s
    slots = max(TALKING_SESSIONS)
    server, port, log = _launch(
        paths, graphs, tts_graphs, "talking", (__file__, SERVE_WITH_VAD), vlm_batch_slots=slots
    )
    result: dict[str, Any] = {
        "graphs": "on" if graphs else "off",
        "vlm_batch_slots": slots,
        "tts_batch_streams": slots,
        "turns_per_session": TALKING_TURNS,
    }
    try:
        if not _ready(server, port, deadline):
            return {**result, "error": "server not ready", "log_tail": log.read_text()[-3000:]}
        for index, sessions in enumerate(TALKING_SESSIONS):
            scraped = _metrics(port)
            # the later, larger run gets the larger share of what is left
            share = 1 / 3 if index == 0 and len(TALKING_SESSIONS) > 1 else 1.0
            until = time.monotonic() + (deadline - time.monotonic()) * share

            async def talk(count: int = sessions, stop: float = until) -> list[Any]:
                runs = [_vad_turns(port, TALKING_TURNS + 1, stop) for _ in range(count)]
                return list(await asyncio.gather(*runs, return_exceptions=True))

            left = max(until - time.monotonic(), 5)
            try:
                runs = asyncio.run(asyncio.wait_for(talk(), left + 30))
            except Exception as exc:  # this run's error; what the other measured stays
                result[f"sessions_{sessions}"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                continue
            turns = [t for r in runs if not isinstance(r, BaseException) for t in r[0][1:]]
            failed = [
                f"{type(r).__name__}: {r}"[:300] for r in runs if isinstance(r, BaseException)
            ]
            result[f"sessions_{sessions}"] = {
                "turns_measured": sum(
                    t["end_of_speech_to_first_audio_ms"] is not None for t in turns
                ),
                "end_of_speech_to_first_audio_ms": _percentiles(
                    [t["end_of_speech_to_first_audio_ms"] for t in turns]
                ),
                "commit_to_first_audio_ms": _percentiles(
                    [t["commit_to_first_audio_ms"] for t in turns]
                ),
                "turn_errors": sum(len(t["errors"]) for t in turns),
                # the batched engines' queue waits, prefills, steps and first chunks
                "engine_timing": {
                    stage: {
                        "n": use["requests"],
                        "mean_ms": round(use["s"] * 1000 / use["requests"], 2),
                    }
                    for stage, use in _stage_use(scraped, _metrics(port), _ENGINE_TIMINGS).items()
                },
                "error_samples": sorted({e for t in turns for e in t["errors"]})[:5],
                "sessions_failed": failed[:5],
            }
    finally:
        _stop(server)
    return result


#: each part's share of the budget (a part may use what earlier parts left)
SHARES = {
    "asr": 0.1,
    "vlm": 0.2,
    "vlm_batched": 0.08,
    "tts": 0.18,
    "tts_batched": 0.1,
    "device_audit": 0.12,  # after tts: it reuses the TTS checkpoint that part wrote
    "e2e_graphs_on": 0.1,
    "server_vad": 0.2,
    "talking_sessions": 0.15,
    "e2e_graphs_off": 0.14,
}


def main() -> int:
    if sys.argv[1:2] == [SERVE_WITH_VAD]:  # the server of the server_vad part
        return serve_with_vad(sys.argv[2:])
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
            if part.startswith(("e2e", "server_vad", "talking")):
                # server_vad, talking: graphs on only (the production setting; eager on a CPU)
                served = part in ("server_vad", "talking_sessions")
                graphs = part.endswith("_on") or (served and not REHEARSAL)
                if part == "e2e_graphs_on" and REHEARSAL:
                    report[part] = {"skipped": "no CUDA Graphs on a CPU (rehearsal)"}
                    continue
                if not (Path(paths["tts"]) / "speech_tokenizer" / "config.json").exists():
                    report[part] = {"skipped": "no TTS checkpoint (the tts part did not build one)"}
                    continue
                tts_ok = "ttfa_ms" in report.get("tts", {}).get("graphs_on", {})
                run = {
                    "server_vad": part_server_vad,
                    "talking_sessions": part_talking_sessions,
                }.get(part, part_e2e)
                report[part] = run(paths, graphs, budget, tts_graphs=graphs and tts_ok)
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
