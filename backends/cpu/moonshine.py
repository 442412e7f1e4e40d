"""`MoonshineAsr`: speech to text with Moonshine tiny-en, run by our own onnxruntime.

The model is the one `moonshine-voice` 0.1.0 ships (MIT, the last release bundling
tiny-en): `assets/tiny-en/encoder_model.ort` (13 MB), `decoder_model_merged.ort` (30 MB)
and `tokenizer.bin`, each pinned by SHA-256 (`backends.cpu.assets.MOONSHINE_TINY_EN`).
The package is installed without its dependencies (sounddevice, requests, tqdm, ... that
a server does not need) and never imported: its own library (`libmoonshine.so` with a
second, renamed onnxruntime) is never loaded, so one onnxruntime serves every stage of
the process, and the decode loop is ours, which bounds its cost:

- Moonshine encodes exactly the audio it is given (no 30 s window as Whisper): a call
  costs in proportion to the audio, and a partial of a growing utterance (B33) is one
  more call on the audio so far.
- An utterance is transcribed as lines of at most `LINE_MAX_S`: a longer one is cut at
  the quietest 100 ms between `LINE_MIN_S` and `LINE_MAX_S` of its current line, a cut
  that depends only on the audio up to there, so a growing utterance is cut at the same
  places at each call. A line that ended is remembered by its audio (`_LINE_CACHE`
  lines): the next partial, and the final transcript, decode only the line still open.
  Whatever the utterance's length, a call decodes at most one new line of fresh audio
  plus the lines it has not seen before.
- Greedy decoding, at most `_TOKENS_BASE + _TOKENS_PER_S` tokens per second of the line
  (English speech is about 4 a second): a decoder that loops stops at its cap.
- One intra-op thread per call and one call at a time (a `CapacityLimiter(1)`): a
  session talking costs at most one core while a call runs.

The tokenizer file is the vocabulary as length-prefixed byte strings, in id order
(SentencePiece pieces, `▁` for a space; ids 3..258 the raw bytes). Every failure becomes
`StageFailed(stage="asr")` (while serving) or `BackendUnavailable` (while loading).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import OrderedDict
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
from backends.cpu.assets import MOONSHINE_TINY_EN, import_extra
from backends.cpu.failures import loading_failures, serving_failures

if TYPE_CHECKING:
    from backends.base import Float32Array

__all__ = ["LINE_MAX_S", "LINE_MIN_S", "MoonshineAsr", "line_cuts", "read_vocabulary"]

log = logging.getLogger("joyduplex.backends.cpu")

#: a line is at most this long; a longer utterance is cut between these two lengths
LINE_MAX_S = 8.0
LINE_MIN_S = 4.0
#: the encoder's convolutions need about this much audio; a shorter clip is padded with
#: silence (a tap of the key, a click)
_MIN_SAMPLES = VAD_SAMPLE_RATE_HZ // 2
#: greedy decoding's cap per line: this many tokens plus this many per second of audio
_TOKENS_BASE, _TOKENS_PER_S = 10, 6.5
#: lines that ended, remembered by their audio's digest (every session shares them)
_LINE_CACHE = 256
_START, _END = 1, 2  # the decoder's start and end-of-text tokens
_LAYERS, _HEADS, _HEAD_DIM = 6, 8, 36
_SPACE = "\u2581"
_WINDOW = VAD_SAMPLE_RATE_HZ // 100  # 10 ms, where a line's cut is chosen
_QUIET_WINDOWS = 10  # the quietest 100 ms


def read_vocabulary(data: bytes) -> list[bytes]:
    """The tokenizer file's pieces in id order (each a length byte, then its bytes)."""
    pieces: list[bytes] = []
    at = 0
    while at < len(data):
        size = data[at]
        pieces.append(data[at + 1 : at + 1 + size])
        at += 1 + size
    return pieces


def line_cuts(pcm: Float32Array) -> list[int]:
    """Where the utterance `pcm` is cut into lines (sample offsets, the end included).
    Each cut depends only on the audio before it, so a longer recording of the same
    utterance is cut at the same places."""
    max_len = int(LINE_MAX_S * VAD_SAMPLE_RATE_HZ)
    min_len = int(LINE_MIN_S * VAD_SAMPLE_RATE_HZ)
    cuts: list[int] = []
    start = 0
    while pcm.size - start > max_len:
        span = pcm[start + min_len : start + max_len]
        windows = span[: span.size // _WINDOW * _WINDOW].reshape(-1, _WINDOW)
        energy = np.square(windows, dtype=np.float64).mean(axis=1)
        stretch = np.convolve(energy, np.ones(_QUIET_WINDOWS), mode="valid")
        quietest = int(np.argmin(stretch))  # the first of equals: deterministic
        start += min_len + (quietest + _QUIET_WINDOWS // 2) * _WINDOW
        cuts.append(start)
    cuts.append(pcm.size)
    return cuts


class MoonshineAsr(StageLifecycle):
    """Speech to text, Moonshine tiny-en (English), line by line.

    Args:
        cpu_threads: onnxruntime intra-op threads per call (one: a call takes one core).
    """

    name = "asr"
    #: it transcribes a growing utterance too (B33), for the cost of the line still open
    live_transcripts = True
    #: it ends a sentence it hears with `.`, `?` or `!`, as Whisper does (B32's cue)
    punctuates = True
    languages: tuple[str, ...] | None = ("en",)

    def __init__(self, *, cpu_threads: int = 1) -> None:
        self._cpu_threads = cpu_threads
        self._encoder: Any = None
        self._decoder: Any = None
        self._vocabulary: list[bytes] = []
        self._lines: OrderedDict[bytes, str] = OrderedDict()
        self._limiter: anyio.CapacityLimiter | None = None

    # --- lifecycle ---------------------------------------------------------------------

    async def load(self) -> None:
        log.info("asr: loading Moonshine tiny-en (onnxruntime)")
        started = time.perf_counter()
        await anyio.to_thread.run_sync(self._load)
        self._limiter = anyio.CapacityLimiter(1)
        log.info("asr: loaded in %.2f s", time.perf_counter() - started)

    def _load(self) -> None:
        ort = import_extra("onnxruntime", stage="asr")
        files = MOONSHINE_TINY_EN
        encoder = files.encoder.read(files.encoder.path())
        decoder = files.decoder.read(files.decoder.path())
        tokenizer = files.tokenizer.read(files.tokenizer.path())
        with loading_failures("asr", "the Moonshine tiny-en model of moonshine-voice"):
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._cpu_threads
            options.inter_op_num_threads = 1
            cpu = ["CPUExecutionProvider"]
            self._encoder = ort.InferenceSession(encoder, sess_options=options, providers=cpu)
            self._decoder = ort.InferenceSession(decoder, sess_options=options, providers=cpu)
            self._vocabulary = read_vocabulary(tokenizer)

    async def release(self) -> None:
        self._encoder = self._decoder = None
        self._lines.clear()
        self._limiter = None

    async def warmup(self) -> None:
        """Transcribe one second of silence (the first call allocates the buffers)."""
        silence = np.zeros(VAD_SAMPLE_RATE_HZ, dtype=np.float32)
        await self.transcribe(AsrRequest("warmup", silence))

    async def abort(self, request_id: str) -> None:
        """No-op: a call decodes one line or a few (tens of ms); the runtime's cancel
        scope discards its answer."""

    # --- transcription -----------------------------------------------------------------

    async def transcribe(self, request: AsrRequest) -> AsrTranscript:
        """Transcribe `request.pcm` (mono float32, 16 kHz; English whatever the language
        asked: the model knows no other).

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: onnxruntime failed on this utterance.
        """
        if self._limiter is None:
            raise BackendUnavailable("asr: the Moonshine stage is not loaded", stage="asr")
        with serving_failures("asr", request.request_id):
            pcm = np.ascontiguousarray(request.pcm, dtype=np.float32).reshape(-1)
            if pcm.size == 0:
                return AsrTranscript(request.request_id, "")
            text = await anyio.to_thread.run_sync(self.transcribe_sync, pcm, limiter=self._limiter)
        return AsrTranscript(request.request_id, text)

    def transcribe_sync(self, pcm: Float32Array) -> str:
        """`transcribe`, synchronous: the lines that ended from the cache when it has
        them, the others decoded (the last, still open, is never remembered)."""
        texts: list[str] = []
        start = 0
        cuts = line_cuts(pcm)
        for index, cut in enumerate(cuts):
            line = pcm[start:cut]
            start = cut
            if index == len(cuts) - 1:
                texts.append(self.decode(line)[0])
                continue
            key = hashlib.blake2b(line.tobytes(), digest_size=16).digest()
            text = self._lines.get(key)
            if text is None:
                text = self.decode(line)[0]
                self._lines[key] = text
                if len(self._lines) > _LINE_CACHE:
                    self._lines.popitem(last=False)
            else:
                self._lines.move_to_end(key)
            texts.append(text)
        return " ".join(t for t in texts if t)

    def decode(self, line: Float32Array) -> tuple[str, list[tuple[str, float]]]:
        """One line's text, greedy, and each step's choice with its lead: its probability
        minus the next best's (greedy decoding keeps its choice while that stays above 0;
        the margin tests record)."""
        encoder, decoder = self._encoder, self._decoder
        if encoder is None or decoder is None:
            raise BackendUnavailable("asr: the Moonshine stage is not loaded", stage="asr")
        if line.size < _MIN_SAMPLES:
            line = np.concatenate([line, np.zeros(_MIN_SAMPLES - line.size, np.float32)])
        audio = line[None, :]
        mask = np.ones(audio.shape, dtype=np.int64)
        (hidden,) = encoder.run(None, {"input_values": audio, "attention_mask": mask})
        empty = np.zeros((1, _HEADS, 0, _HEAD_DIM), dtype=np.float32)
        past = {
            f"past_key_values.{layer}.{part}.{kv}": empty
            for layer in range(_LAYERS)
            for part in ("decoder", "encoder")
            for kv in ("key", "value")
        }
        names = [o.name for o in decoder.get_outputs()]
        cap = _TOKENS_BASE + math.ceil(_TOKENS_PER_S * line.size / VAD_SAMPLE_RATE_HZ)
        tokens: list[int] = []
        steps: list[tuple[str, float]] = []
        token, cached = _START, False
        for _ in range(cap):
            outputs = decoder.run(
                None,
                {
                    "input_ids": np.array([[token]], dtype=np.int64),
                    "encoder_hidden_states": hidden,
                    "encoder_attention_mask": mask,
                    "use_cache_branch": np.array([cached]),
                    **past,
                },
            )
            for name, value in zip(names[1:], outputs[1:], strict=True):
                # the encoder's keys and values are computed once, at the first step
                if not cached or ".decoder." in name:
                    past[name.replace("present", "past_key_values")] = value
            cached = True
            logits = outputs[0][0, -1].astype(np.float64)
            token = int(np.argmax(logits))
            probabilities = np.exp(logits - logits[token])
            probabilities /= probabilities.sum()
            second, best = np.partition(probabilities, -2)[-2:]
            steps.append((self._piece(token), float(best - second)))
            if token == _END:
                break
            tokens.append(token)
        return self._text(tokens), steps

    def _piece(self, token: int) -> str:
        return self._vocabulary[token].decode("utf-8", "replace")

    def _text(self, tokens: list[int]) -> str:
        data = b"".join(self._vocabulary[t] for t in tokens)
        return data.decode("utf-8", "replace").replace(_SPACE, " ").strip()
