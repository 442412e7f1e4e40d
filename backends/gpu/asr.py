"""The speech stage: Qwen3-ASR-1.7B, utterance PCM (committed, or a live partial) -> transcript.

The ASR engine sees audio and nothing else (B2): `ensure_audio_only()` refuses, before
any submission, a prompt that carries images, video or vision placeholders, so no
visual object can reach the ASR engine's serializer. The prompt is Qwen3-ASR's ChatML
with one audio placeholder. By default the model detects the language (the assistant turn
is left open, as both JoyAI references run Qwen3-ASR); a language the session sets
(`audio.input.transcription.language`) is forced by prefilling the assistant turn with
`language <Name><asr_text>`, as the model was trained. The raw output
(`language English<asr_text>text`) is cleaned to the bare transcript, whitespace
collapsed, the way upstream's `asr_to_joyai` hands it to JoyAI.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Final

import numpy as np

from backends.base import AsrRequest, AsrTranscript, StageFailed
from backends.gpu.engine_api import EnginePrompt, EngineStage, Sampling
from backends.gpu.replica import ReplicaHealth
from backends.gpu.submission import stream_request

if TYPE_CHECKING:
    from backends.gpu.engine_api import GenerationEngine
    from backends.gpu.placement import StagePlacement

__all__ = ["AsrStage", "build_asr_prompt", "clean_asr_text", "ensure_audio_only"]

ASR_SAMPLE_RATE_HZ: Final = 16_000
AUDIO_PLACEHOLDER: Final = "<|audio_start|><|audio_pad|><|audio_end|>"
_VISUAL_MARKERS: Final = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
#: ISO code -> the name Qwen3-ASR was trained with in its forced-language prefix
LANGUAGE_NAMES: Final = {
    "en": "English", "zh": "Chinese", "yue": "Cantonese", "de": "German", "fr": "French",
    "es": "Spanish", "it": "Italian", "pt": "Portuguese", "ru": "Russian", "ja": "Japanese",
    "ko": "Korean", "ar": "Arabic", "nl": "Dutch", "sv": "Swedish", "pl": "Polish",
    "tr": "Turkish", "vi": "Vietnamese", "th": "Thai", "id": "Indonesian", "hi": "Hindi",
}  # fmt: skip


def ensure_audio_only(prompt: EnginePrompt) -> None:
    """Refuse anything visual on its way to the ASR engine (B2).

    Raises:
        StageFailed: the prompt carries images or vision placeholders, or no audio.
    """
    if prompt.images or any(marker in prompt.text for marker in _VISUAL_MARKERS):
        raise StageFailed("refusing to send visual data to the ASR engine (B2)", stage="asr")
    if set(prompt.multi_modal_data()) != {"audio"}:
        raise StageFailed("an ASR request must carry exactly one audio input", stage="asr")


def build_asr_prompt(language: str | None = None, context: str = "") -> str:
    """Qwen3-ASR ChatML for one utterance; `language=None` lets the model detect it."""
    name = LANGUAGE_NAMES.get(language.lower(), language) if language else None
    prefill = f"language {name}<asr_text>" if name else ""
    return (
        f"<|im_start|>system\n{context}<|im_end|>\n"
        f"<|im_start|>user\n{AUDIO_PLACEHOLDER}<|im_end|>\n"
        f"<|im_start|>assistant\n{prefill}"
    )


def clean_asr_text(raw: str) -> str:
    """`language English<asr_text>hello  there</asr_text>` -> `hello there`."""
    text = raw
    if "<asr_text>" in text:
        text = text.split("<asr_text>", 1)[1]
    elif text.lstrip().lower().startswith("language none"):
        text = ""
    for token in ("<asr_text>", "</asr_text>", "<|im_end|>", "<|endoftext|>"):
        text = text.replace(token, " ")
    return " ".join(text.split())


class AsrStage(EngineStage):
    """Qwen3-ASR behind a `GenerationEngine` (vLLM in production)."""

    name = "asr"
    #: live partials at pauses and every few seconds of speech (B33): a commit of the audio
    #: a pause's partial heard takes its words, so the turn's end waits for no ASR; its
    #: punctuation is not read as a sentence-end cue (not measured for Qwen3-ASR yet)
    live_transcripts = True
    punctuates = False
    #: Qwen3-ASR is multilingual: it detects the language of an utterance unless the
    #: session pins one (`LANGUAGE_NAMES` only spells the pin the way it was trained)
    languages: tuple[str, ...] | None = None

    def __init__(
        self,
        engine: GenerationEngine,
        placement: StagePlacement,
        *,
        sampling: Sampling | None = None,
    ) -> None:
        self.engine = engine
        self.placement = placement
        self.health = ReplicaHealth("asr")
        # greedy, as upstream's ASR stage
        self.sampling = sampling or Sampling(max_tokens=min(256, placement.max_tokens))

    async def warmup(self) -> None:
        """One second of low noise through the whole path (processor setup, graphs)."""
        rng = np.random.default_rng(0)
        pcm = (rng.standard_normal(ASR_SAMPLE_RATE_HZ) * 1e-3).astype(np.float32)
        await self.transcribe(AsrRequest("warmup-asr", pcm))

    async def transcribe(self, request: AsrRequest) -> AsrTranscript:
        pcm = np.ascontiguousarray(request.pcm, dtype=np.float32).reshape(-1)
        if pcm.size == 0:
            return AsrTranscript(request.request_id, "")
        prompt = EnginePrompt(build_asr_prompt(request.language), audio=(pcm, ASR_SAMPLE_RATE_HZ))
        ensure_audio_only(prompt)
        stream = stream_request(
            self.engine, self.health, request.request_id, prompt, self.sampling, stage=self.name
        )
        async with aclosing(stream):
            pieces = [piece async for piece in stream]
        return AsrTranscript(request.request_id, clean_asr_text("".join(pieces)))
