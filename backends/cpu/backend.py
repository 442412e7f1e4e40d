"""`create_backend`: the registry entry "cpu", assembling the CPU stages.

Building the backend is cheap and loads nothing; `async with backend` loads every stage
(logging each step to `joyduplex.backends.cpu`) and `await backend.warmup()` runs each
stage once. The `camera` profile has no ASR stage (B1). The voice is hibari (Apache-2.0) unless
`tts = "piper"` asks for Piper (GPL-3.0, the `piper` extra).
"""

from __future__ import annotations

import logging
from pathlib import Path

from backends.base import Backend, BackendUnavailable
from backends.cpu.asr import WhisperAsr
from backends.cpu.assets import smart_turn_model_path
from backends.cpu.describer import FrameDescriber
from backends.cpu.hibari_tts import HibariTts
from backends.cpu.moonshine import MoonshineAsr
from backends.cpu.smart_turn import SmartTurn
from backends.cpu.tts import PiperTts, SentenceTts
from backends.cpu.vad import SileroVad

__all__ = ["ASR_MODELS", "DEFAULT_ASR", "PROFILES", "TTS_ENGINES", "create_backend"]

log = logging.getLogger("joyduplex.backends.cpu")

PROFILES = ("speech", "camera")
#: `[backend] tts`: the voice engines, the default first
TTS_ENGINES = ("hibari", "piper")
#: the ASR stages to choose from (`[backend] asr`); docs/performance.md says why the
#: default is the one it is
ASR_MODELS = ("moonshine", "whisper")
DEFAULT_ASR = "whisper"


def create_backend(
    *,
    asr: str | None = None,
    asr_model: str | None = None,
    tts: str = "hibari",
    tts_voice: str | None = None,
    vad_model: str | None = None,
    turn_model: str | None = None,
    profile: str = "speech",
    tts_deterministic: bool = False,
) -> Backend:
    """The embedded CPU backend, not yet loaded.

    Args:
        asr: `moonshine` (Moonshine tiny-en, line by line) or `whisper` (faster-whisper);
            default `DEFAULT_ASR`, or whisper where `asr_model` names its directory.
        asr_model: whisper: a local faster-whisper model directory (default tiny.en).
        tts: the voice engine, `hibari` (Apache-2.0, 24 kHz) or `piper` (GPL-3.0, the
            `piper` extra).
        tts_voice: for hibari, the voice a session that names none gets (a hibari voice
            available offline or an OpenAI voice name; default heart); for Piper, a
            `.onnx` voice (default joe, en_US medium).
        vad_model: a Silero ONNX file, SHA-256 pinned (default the silero-vad wheel's).
        turn_model: a Smart Turn v3.2 ONNX file, SHA-256 pinned (default the pipecat-ai
            wheel's). Without pipecat-ai installed the backend has no end-of-turn model:
            a warning says how to install it, and `semantic_vad` ends pauses as server
            VAD would (D33). A configured file that is missing fails loading.
        profile: `speech` (ASR on) or `camera` (no ASR stage).
        tts_deterministic: the voice without its noise (Piper's generator and duration
            noise, hibari's noise component), so a text is always the same samples (tools
            that replay one clip across processes).

    Raises:
        BackendUnavailable: an unknown profile, ASR or voice engine, or a model directory
            given to Moonshine (its one model ships in moonshine-voice).
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"cpu: unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    if tts not in TTS_ENGINES:
        raise BackendUnavailable(
            f"cpu: [backend] tts = {tts!r} is not a voice engine; expected one of "
            f"{', '.join(TTS_ENGINES)}",
            stage="tts",
        )
    if asr is None:
        asr = "whisper" if asr_model is not None else DEFAULT_ASR
    if asr not in ASR_MODELS:
        raise BackendUnavailable(
            f"cpu: unknown asr `{asr}`; expected one of {', '.join(ASR_MODELS)}", stage="asr"
        )
    if asr == "moonshine" and asr_model is not None:
        raise BackendUnavailable(
            'cpu: asr_model names a faster-whisper directory; choose asr = "whisper" '
            "with it (Moonshine's one model ships in moonshine-voice)",
            stage="asr",
        )
    asr_stage: WhisperAsr | MoonshineAsr | None = None
    if profile != "speech":
        asr_name = "no ASR (camera profile)"
    elif asr == "moonshine":
        asr_stage, asr_name = MoonshineAsr(), "Moonshine tiny-en"
    else:
        asr_stage = WhisperAsr(asr_model)
        asr_name = "Whisper tiny.en" if asr_model is None else f"Whisper ({Path(asr_model).name})"
    voice: SentenceTts
    if tts == "piper":
        voice = PiperTts(tts_voice, deterministic=tts_deterministic)
        voice_name = "Piper (joe)" if tts_voice is None else f"Piper ({Path(tts_voice).stem})"
    else:
        voice = HibariTts(tts_voice, deterministic=tts_deterministic)
        voice_name = f"hibari ({tts_voice or 'heart'})"
    vad_name = "Silero VAD" if vad_model is None else f"Silero VAD ({Path(vad_model).name})"
    turn_end: SmartTurn | None = SmartTurn(turn_model)
    turn_name = "Smart Turn v3.2"
    if turn_model is None:
        try:
            smart_turn_model_path()
        except BackendUnavailable as exc:
            log.warning("%s; semantic_vad ends pauses as server_vad would", exc.message)
            turn_end, turn_name = None, "no end-of-turn model"
    description = (
        f"cpu: {vad_name}, {turn_name}, {asr_name}, {voice_name}, "
        "frame describer (stand-in for a VLM)"
    )
    log.info("%s", description)
    return Backend(
        name="cpu",
        vad=SileroVad(vad_model),
        asr=asr_stage,
        vlm=FrameDescriber(),
        tts=voice,
        description=description,
        turn_end=turn_end,
    )
