"""`HibariTts`: the CPU backend's default voice, hibari (Apache-2.0, `hibari-tts`).

hibari is an 8 MB int8 voice distilled from Kokoro-82M that needs only numpy and
onnxruntime and speaks at 24 kHz: a session's default 24 kHz output is its own samples,
not resampled. It streams sentence by sentence as Piper does (`SentenceTts`).

Voices. hibari ships one voice inside its wheel (heart, American female); its others are
downloaded on first use, which this server never does (no internet at run time): one
counts only when it is already in hibari's cache with its registry's SHA-256
(`backends.cpu.assets.hibari_offline_voices`). A session may name a hibari voice that is
here, or one of the OpenAI Realtime voices, each spoken by the offline hibari voice
nearest in kind (`OPENAI_VOICES`: the first of its choices that is here, else the
stage's default voice). Any other name is not in `voices`, so `session.update` refuses
it (`unsupported_voice`), as it refuses a speaker Qwen3-TTS does not have.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np

from backends.base import BackendUnavailable, StageFailed
from backends.cpu.assets import hibari_offline_voices, import_extra
from backends.cpu.failures import loading_failures
from backends.cpu.tts import SentenceTts

if TYPE_CHECKING:
    from backends.cpu.assets import HibariVoice

__all__ = ["DEFAULT_HIBARI_VOICE", "HIBARI_SAMPLE_RATE_HZ", "OPENAI_VOICES", "HibariTts"]

log = logging.getLogger("joyduplex.backends.cpu")

HIBARI_SAMPLE_RATE_HZ = 24_000
#: the voice inside the wheel
DEFAULT_HIBARI_VOICE = "heart"

_FEMALE = ("heart", "kore", "emma")
_MALE = ("fenrir", "fable")
#: The OpenAI Realtime API's voices and the hibari voices that speak each, best first: a
#: lower or a higher voice as OpenAI's is. Only heart is in the wheel, so on a machine
#: without other voices in hibari's cache every one of them is heart.
OPENAI_VOICES: dict[str, tuple[str, ...]] = {
    "alloy": _FEMALE,
    "ash": _MALE,
    "ballad": _MALE,
    "coral": _FEMALE,
    "echo": _MALE,
    "sage": _FEMALE,
    "shimmer": _FEMALE,
    "verse": _MALE,
    "marin": _FEMALE,
    "cedar": _MALE,
}


class HibariTts(SentenceTts):
    """hibari, sentence by sentence (`SentenceTts`), every offline voice loaded once.

    Args:
        voice: the voice a session that names none gets (`[backend] tts_voice`): a hibari
            voice available offline or an OpenAI voice name; default heart.
        output_sample_rate_hz: the rate sessions get by default.
        deterministic: fix hibari's noise component (seed 0 for every sentence), so the
            same text always gives the same samples (tests, reproducible recordings).
    """

    stage_name = "the hibari stage"

    def __init__(
        self,
        voice: str | None = None,
        *,
        output_sample_rate_hz: int = 24_000,
        deterministic: bool = False,
    ) -> None:
        super().__init__(output_sample_rate_hz=output_sample_rate_hz)
        self._configured = voice
        self._deterministic = deterministic
        self._models: dict[str, Any] = {}
        #: every name a session may give (lower case) -> the hibari voice that speaks it
        self._speaker_of: dict[str, str] = {}
        self._default = DEFAULT_HIBARI_VOICE

    @property
    def voices(self) -> frozenset[str] | None:
        """The offline hibari voices and the OpenAI names, once loaded (None before)."""
        return frozenset(self._speaker_of) if self._models else None

    async def load(self) -> None:
        offline = hibari_offline_voices()
        speaker_of = {name: name for name in offline}
        configured = (self._configured or DEFAULT_HIBARI_VOICE).strip().lower()
        default = speaker_of.get(configured)
        if configured in OPENAI_VOICES:
            default = _first_here((*OPENAI_VOICES[configured], DEFAULT_HIBARI_VOICE), offline)
        if default is None:
            known = ", ".join(sorted({*offline, *OPENAI_VOICES}))
            # a config written for Piper, before hibari was the default, names a file
            piper = ""
            if configured.endswith(".onnx"):
                piper = ' (a Piper voice file needs [backend] tts = "piper")'
            raise BackendUnavailable(
                f"tts: [backend] tts_voice `{self._configured}` is not a hibari voice on this "
                f"machine{piper} (a voice hibari downloads on first use counts only once it "
                f"is in its cache, HIBARI_HOME); the voices here are: {known}",
                stage="tts",
            )
        for name, speakers in OPENAI_VOICES.items():
            speaker_of[name] = _first_here(speakers, offline) or default
        log.info("tts: loading hibari voices %s", ", ".join(sorted(offline)))
        started = time.perf_counter()
        self._soxr = import_extra("soxr", stage="tts")
        models = await anyio.to_thread.run_sync(self._load, list(offline.values()))
        self._default, self._speaker_of, self._models = default, speaker_of, models
        self.voice_sample_rate_hz = HIBARI_SAMPLE_RATE_HZ
        self._limiter = anyio.CapacityLimiter(1)
        log.info(
            "tts: loaded in %.2f s (%d Hz voice, default %s)",
            time.perf_counter() - started,
            self.voice_sample_rate_hz,
            default,
        )

    @staticmethod
    def _load(voices: list[HibariVoice]) -> dict[str, Any]:
        hibari = import_extra("hibari", stage="tts")
        models: dict[str, Any] = {}
        for voice in voices:
            with loading_failures("tts", f"the hibari voice `{voice.name}` ({voice.model})"):
                # one onnxruntime thread: a sentence takes tens of ms on one core, and the
                # other cores belong to the event loop, the VAD and the ASR
                model = hibari.Hibari(voice=voice.name, model=str(voice.model), threads=1)
                model.phonemize("Ready.")  # loads its G2P (lexicon, tagger) now, not mid-reply
            models[voice.name] = model
        return models

    async def release(self) -> None:
        self._models = {}
        self._limiter = None

    def _voice_for(self, voice: str | None) -> Any:
        name = self._default if voice is None else self._speaker_of.get(voice.strip().lower())
        model = self._models.get(name) if name is not None else None
        if model is None:
            # session.update refuses such a voice: only a default session voice of the
            # server's [session] table that this backend lacks gets here
            raise StageFailed(
                f"tts: no hibari voice `{voice}`; this server's voices are: "
                f"{', '.join(sorted(self._speaker_of))}",
                stage="tts",
            )
        return model

    def _synthesize_sentence(self, sentence: str, rate: int, voice: Any) -> bytes:
        """One sentence to pcm16 bytes at `rate` (hibari splits a long one at clauses:
        joined)."""
        seed = 0 if self._deterministic else None
        parts = list(voice.stream(sentence, seed=seed))
        if not parts:
            return b""
        return self._to_pcm16(np.concatenate(parts).astype(np.float32, copy=False), rate)


def _first_here(choices: tuple[str, ...], offline: dict[str, HibariVoice]) -> str | None:
    return next((name for name in choices if name in offline), None)
