"""`create_backend`: the registry entry "cpu", assembling the four CPU stages.

Building the backend is cheap and loads nothing; `async with backend` loads every stage
(logging each step to `joyduplex.backends.cpu`) and `await backend.warmup()` runs each
stage once. The `camera` profile has no ASR stage (B1).
"""

from __future__ import annotations

import logging
from pathlib import Path

from backends.base import Backend, BackendUnavailable
from backends.cpu.asr import WhisperAsr
from backends.cpu.describer import FrameDescriber
from backends.cpu.tts import PiperTts
from backends.cpu.vad import SileroVad

__all__ = ["PROFILES", "create_backend"]

log = logging.getLogger("joyduplex.backends.cpu")

PROFILES = ("speech", "camera")


def create_backend(
    *,
    asr_model: str | None = None,
    tts_voice: str | None = None,
    vad_model: str | None = None,
    profile: str = "speech",
) -> Backend:
    """The embedded CPU backend, not yet loaded.

    Args:
        asr_model: a local faster-whisper model directory (default Whisper tiny.en).
        tts_voice: a Piper `.onnx` voice (default joe, en_US medium).
        vad_model: a Silero ONNX file, SHA-256 pinned (default the silero-vad wheel's).
        profile: `speech` (ASR on) or `camera` (no ASR stage).

    Raises:
        BackendUnavailable: an unknown profile.
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"cpu: unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    asr = WhisperAsr(asr_model) if profile == "speech" else None
    asr_name = (
        "no ASR (camera profile)"
        if asr is None
        else "Whisper tiny.en"
        if asr_model is None
        else f"Whisper ({Path(asr_model).name})"
    )
    voice_name = "Piper (joe)" if tts_voice is None else f"Piper ({Path(tts_voice).stem})"
    vad_name = "Silero VAD" if vad_model is None else f"Silero VAD ({Path(vad_model).name})"
    description = f"cpu: {vad_name}, {asr_name}, {voice_name}, frame describer (stand-in for a VLM)"
    log.info("%s", description)
    return Backend(
        name="cpu",
        vad=SileroVad(vad_model),
        asr=asr,
        vlm=FrameDescriber(),
        tts=PiperTts(tts_voice),
        description=description,
    )
