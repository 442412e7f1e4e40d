"""`create_backend()`: the GPU backend's stages, wired per profile from a placement file.

    speech   ASR (Qwen3-ASR, vLLM) -> VLM (JoyAI, vLLM) -> TTS (Qwen3-TTS, torch)
    camera   VLM -> TTS; no ASR engine is even built

The runtime cuts the VLM's text deltas at sentence ends (`backends.gpu.sentences`) and
feeds each sentence to TTS; a LISTEN decision (`</silence>`) skips TTS entirely. This
module only builds the stages: nothing is loaded until the backend is entered, and
nothing here imports torch, vLLM or transformers.

The backend brings no VAD: server VAD is the shared Silero model of the CPU backend
(`Backend.vad` is None here).
"""

from __future__ import annotations

from typing import Final

from backends.base import Backend, BackendUnavailable
from backends.gpu.asr import AsrStage
from backends.gpu.engines import VllmEngine
from backends.gpu.placement import load_placement
from backends.gpu.tts import TtsStage, make_synthesizer
from backends.gpu.vlm import VlmStage

__all__ = ["PROFILES", "create_backend"]

PROFILES: Final = ("speech", "camera")


def create_backend(*, placement: str | None = None, profile: str = "speech") -> Backend:
    """Build (not load) the GPU backend.

    Args:
        placement: path of a placement TOML file; None: two GPUs, default layout.
        profile: "speech" (ASR -> VLM -> TTS) or "camera" (VLM -> TTS).

    Raises:
        BackendUnavailable: unknown profile, or a bad placement file (`PlacementError`,
            naming the offending key).
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    plan = load_placement(placement)
    asr = AsrStage(VllmEngine(plan.asr), plan.asr) if profile == "speech" else None
    vlm = VlmStage(VllmEngine(plan.vlm), plan.vlm)
    tts = TtsStage(make_synthesizer(plan.tts), plan.tts)
    stages = ", ".join(
        f"{s.stage} on cuda:{s.device} ({s.gpu_memory_utilization:.2f}"
        f"{', eager' if s.enforce_eager else ', CUDA Graphs'})"
        for s in (plan.asr if asr else None, plan.vlm, plan.tts)
        if s is not None
    )
    return Backend(
        name="gpu",
        vad=None,
        asr=asr,
        vlm=vlm,
        tts=tts,
        description=f"GPU backend, {profile} profile: {stages}",
    )
