"""`create_backend()`: the GPU backend's stages, wired per profile from a placement file.

    speech   ASR (Qwen3-ASR, vLLM) -> VLM (JoyAI, vLLM) -> TTS (Qwen3-TTS, torch)
    camera   VLM -> TTS; no ASR engine is even built

The core cuts the VLM's text deltas at sentence ends (`spec.sentences`) and the
runtime feeds each piece to TTS; a LISTEN decision (`</silence>`) skips TTS entirely. This
module only builds the stages: nothing is loaded until the backend is entered, and
nothing here imports torch, vLLM or transformers.

`runtime = "transformers"` in the placement swaps the vLLM engines for the
transformers ones (`hf_engines.py`: static KV cache, the decode step a CUDA Graph on a
GPU unless `enforce_eager`), on "cpu" or a CUDA device: the same stages, prompt code and
streaming, for one GPU, debugging, the GPU check and CPU CI. The TTS is the same in
both runtimes (CUDA Graphs on a GPU, eager `qwen_tts` on the CPU or with `enforce_eager`).

Server VAD is the CPU backend's Silero model (onnxruntime, batched over sessions, on the
CPU: it scores 32 ms frames in well under a millisecond), built here when onnxruntime and
the silero-vad model are installed. Without them the backend has no VAD; that is logged,
and said in its description, because `server_vad` sessions then never hear speech.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import TYPE_CHECKING, Any, Final

from backends.base import Backend, BackendUnavailable
from backends.gpu.asr import AsrStage
from backends.gpu.batched_engine import BatchedHfEngine
from backends.gpu.engines import VllmEngine
from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine
from backends.gpu.placement import CPU, load_placement
from backends.gpu.tts import TtsStage, make_synthesizer
from backends.gpu.vlm import VlmStage
from backends.joyai.memory import session_of

if TYPE_CHECKING:
    from backends.base import Vad
    from backends.gpu.engine_api import GenerationEngine
    from backends.gpu.placement import StagePlacement

__all__ = ["PROFILES", "create_backend"]

log = logging.getLogger("joyduplex.backends.gpu")

PROFILES: Final = ("speech", "camera")


def _engine(stage: StagePlacement, runtime: str) -> GenerationEngine:
    if runtime == "transformers":
        dtype = stage.dtype
        if dtype == "auto":
            dtype = "float32" if stage.device == "cpu" else "bfloat16"
        options: dict[str, Any] = {
            "dtype": dtype,
            "device": stage.torch_device,
            "load_format": stage.load_format,
            "max_len": stage.max_model_len,
            "cuda_graphs": stage.cuda_graphs,
            "device_audit": stage.device_audit,
        }
        if stage.stage == "asr":
            return HfAsrEngine(stage.model, **options)
        if stage.batch_slots > 0:
            return BatchedHfEngine(
                stage.model,
                batch_slots=stage.batch_slots,
                prefill_chunk_tokens=stage.prefill_chunk_tokens,
                session_of=session_of,
                encoded_frames=stage.encoded_frames,
                **options,
            )
        mib = stage.kv_slot_mib
        return HfVlmEngine(
            stage.model,
            kv_slots=stage.kv_slots,
            kv_slot_bytes=None if mib is None else int(mib * 2**20),
            encoded_frames=stage.encoded_frames,
            **options,
        )
    return VllmEngine(stage)


def _describe(stage: StagePlacement, runtime: str) -> str:
    where = stage.torch_device
    if stage.stage == "tts" and stage.batch_streams > 0:
        graphs = ", CUDA Graphs" if stage.cuda_graphs else ""
        return f"tts on {where} (batched, {stage.batch_streams} streams{graphs})"
    if stage.stage == "tts" and not stage.cuda_graphs:
        return f"tts on {where} (qwen_tts eager)"
    if runtime == "transformers":
        graphs = ", CUDA Graphs" if stage.cuda_graphs else ""
        return f"{stage.stage} on {where} (transformers{graphs})"
    if stage.device == CPU:
        return f"{stage.stage} on cpu (vllm, eager)"
    graphs = "CUDA Graphs" if stage.cuda_graphs else "eager"
    return f"{stage.stage} on {where} ({stage.gpu_memory_utilization:.2f}, {graphs})"


def _server_vad(vad_model: str | None) -> tuple[Vad | None, str]:
    """The shared Silero VAD of the CPU backend, and how the description names it; None
    (and why) where onnxruntime or the model is missing."""
    if importlib.util.find_spec("onnxruntime") is None:
        why = "onnxruntime is not installed"
    else:
        from backends.cpu.assets import SILERO_VAD
        from backends.cpu.vad import SileroVad

        try:
            SILERO_VAD.path(vad_model)
        except BackendUnavailable as exc:
            why = exc.message
        else:
            return SileroVad(vad_model), "server VAD: Silero on cpu"
    log.warning("gpu backend: no server VAD (%s); server_vad sessions will hear no speech", why)
    return None, f"no server VAD ({why})"


def create_backend(
    *, placement: str | None = None, profile: str = "speech", vad_model: str | None = None
) -> Backend:
    """Build (not load) the GPU backend.

    Args:
        placement: path of a placement TOML file; None: two GPUs, default layout.
        profile: "speech" (ASR -> VLM -> TTS) or "camera" (VLM -> TTS).
        vad_model: a Silero ONNX file for server VAD (default: the silero-vad wheel's).

    Raises:
        BackendUnavailable: unknown profile, or a bad placement file (`PlacementError`,
            naming the offending key).
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    plan = load_placement(placement)
    runtime = plan.runtime
    asr = AsrStage(_engine(plan.asr, runtime), plan.asr) if profile == "speech" else None
    vlm = VlmStage(_engine(plan.vlm, runtime), plan.vlm)
    tts = TtsStage(make_synthesizer(plan.tts), plan.tts)
    stages = ", ".join(
        _describe(s, runtime) for s in (plan.asr if asr else None, plan.vlm, plan.tts) if s
    )
    vad, vad_text = _server_vad(vad_model)
    backend = Backend(
        name="gpu",
        vad=vad,
        asr=asr,
        vlm=vlm,
        tts=tts,
        description=f"GPU backend, {profile} profile: {stages}; {vad_text}",
    )
    # an engine found dead on any path (a stream, a compensating abort) takes the whole
    # backend out of service: /readyz fails and new sessions get resource_exhausted
    for stage in (asr, vlm):
        if stage is not None:
            stage.health.on_evict(lambda cause, name=stage.name: backend.evict(name, repr(cause)))
    return backend
