"""The four scripted stages: deterministic stand-ins driven by a shared `Script`.

    ScriptedVad   energy: probability 0.9 when a 512-sample frame's RMS > 0.01 (float
                  scale), else 0.05; one `VadState` per session counts its frames
    ScriptedAsr   answers the next scripted transcript (default "scripted transcript"), or
                  the next scripted partial for a live-transcript request
    ScriptedVlm   streams the next scripted reply word by word (`VlmDelta`s that join
                  back to it), then one `VlmDecisionResult` carrying the whole text (as the cpu
                  and gpu VLMs do); with no reply queued it echoes "I hear you:
                  <transcript>." ("I hear you." without a transcript)
    ScriptedTts   a 440 Hz sine, 60 ms per character of text, in 100 ms pcm16 chunks at the
                  requested rate; each chunk's `text` holds the words that start in it

Every stage must be entered before use (`BackendUnavailable` otherwise), records each
request in the script, honours the script's latency before every answer or streamed item,
and takes the script's parking, failures, faults and engine death (see `script.py`).

With an engine for its stage in `Script.engines` (cost_model.py), ASR, VLM, TTS and the
end-of-turn stage wait on that engine's steps instead of the latency: a request joins the
engine after its admission, each answer or streamed item is ready when the engine served
its steps, and the request leaves the engine however it ended. VAD always keeps the
latency.

Abort: `abort(request_id)` is recorded; a parked request wakes up; a streaming VLM or TTS
request stops quietly before its next item; an aborted ASR request raises `StageFailed`.
With an engine the aborted request also leaves it, at the next step boundary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import anyio
import numpy as np

from backends.base import (
    VAD_FRAME_SAMPLES,
    AsrRequest,
    AsrTranscript,
    BackendUnavailable,
    StageFailed,
    StageLifecycle,
    TtsAudio,
    TtsRequest,
    TurnEndRequest,
    VadState,
    VlmAction,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
    score_in_steps,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence

    from backends.base import Float32Array
    from backends.scripted.cost_model import EngineRequest
    from backends.scripted.script import FaultStep, Script, StageName

__all__ = [
    "CHUNK_MS",
    "MS_PER_CHARACTER",
    "SILENCE_PROBABILITY",
    "SPEECH_PROBABILITY",
    "SPEECH_RMS",
    "ScriptedAsr",
    "ScriptedTts",
    "ScriptedTurnEnd",
    "ScriptedVad",
    "ScriptedVlm",
    "VadBatch",
    "tts_duration_ms",
    "word_pieces",
]

SPEECH_RMS = 0.01
SPEECH_PROBABILITY = 0.9
SILENCE_PROBABILITY = 0.05
MS_PER_CHARACTER = 60
CHUNK_MS = 100
TONE_HZ = 440.0
TONE_AMPLITUDE = 0.3

_WORD = re.compile(r"\s*\S+\s*$|\s*\S+")


def word_pieces(text: str) -> list[str]:
    """Split `text` into word pieces (leading space kept) that join back to it."""
    return _WORD.findall(text) if text.strip() else ([text] if text else [])


def tts_duration_ms(text: str) -> int:
    """How long ScriptedTts speaks `text`."""
    return MS_PER_CHARACTER * len(text)


class _ScriptedStage(StageLifecycle):
    """Load state, warm-up and abort, common to the four stages."""

    stage: ClassVar[StageName]

    def __init__(self, script: Script) -> None:
        self.name: str = self.stage
        self.script = script
        self.entered = False

    async def load(self) -> None:
        self.entered = True

    async def release(self) -> None:
        self.entered = False

    async def warmup(self) -> None:
        """Nothing to warm; recorded in `script.warmed_up` (consumes no scripted answer)."""
        self._require_entered()
        self.script.warmed_up.add(self.stage)

    async def abort(self, request_id: str) -> None:
        self.script.record_abort(self.stage, request_id)
        engine = self.script.engines.get(self.stage)
        if engine is not None:
            engine.cancel(request_id)

    def _require_entered(self) -> None:
        if not self.entered:
            raise BackendUnavailable(f"scripted {self.stage} is not loaded", stage=self.stage)

    async def _wait_latency(self) -> None:
        delay = self.script.latency.get(self.stage, 0.0)
        if delay > 0:
            await anyio.sleep(delay)

    def _join_engine(self, request_id: str, items: int) -> EngineRequest | None:
        """The request in its stage's engine (None without one: the latency applies)."""
        engine = self.script.engines.get(self.stage)
        return None if engine is None else engine.join(request_id, items)

    async def _wait_item(self, job: EngineRequest | None, index: int) -> None:
        """Before item `index`: the engine's steps for it, or the latency."""
        if job is None:
            await self._wait_latency()
        else:
            await job.ready(index)  # a request that left early is seen as aborted next

    async def _wait_answer(self, request_id: str) -> None:
        """Before a one-item answer (ASR, end of turn): the engine's steps, or the latency."""
        job = self._join_engine(request_id, 1)
        try:
            await self._wait_item(job, 0)
        finally:
            if job is not None:
                job.leave()


@dataclass(frozen=True, slots=True)
class VadBatch:
    """What the script records for one `ScriptedVad.score` call (not the frames: VAD runs
    every tick, and a long run must not keep its audio)."""

    sessions: int


class ScriptedVad(_ScriptedStage):
    """Energy-threshold VAD: 0.9 for a frame with RMS > 0.01, else 0.05."""

    stage: ClassVar[StageName] = "vad"

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self._calls = 0

    def new_state(self) -> VadState:
        return VadState({"frames": 0})

    async def score(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        """Score `frames[i]` (shape [n, 512]) for session `states[i]`; n probabilities.

        Raises:
            StageFailed: the shapes do not match.
        """
        self._require_entered()
        batch = self._checked(states, frames)  # before admission: a bad shape is not a step
        await self._admit(len(states))
        return self._probabilities(states, batch)

    async def score_sequences(
        self, states: Sequence[VadState], sequences: Sequence[Float32Array]
    ) -> list[Float32Array]:
        """Each state's frames in time order; one script step (admission, latency) for
        the whole call, as the real VAD makes one thread hop."""
        self._require_entered()
        shapes = [np.shape(sequence) for sequence in sequences]
        if len(states) != len(sequences) or any(
            len(shape) != 2 or shape[1] != VAD_FRAME_SAMPLES for shape in shapes
        ):
            raise StageFailed(
                f"vad: expected {len(states)} sequences of [k, {VAD_FRAME_SAMPLES}] frames, "
                f"got {shapes}",
                stage=self.stage,
            )
        await self._admit(len(states))
        return score_in_steps(self._probabilities, states, sequences)

    async def _admit(self, sessions: int) -> None:
        self._calls += 1
        await self.script.admit(self.stage, f"vad:{self._calls}", VadBatch(sessions))
        await self._wait_latency()
        self.script.raise_if_dead(self.stage)

    def _checked(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        batch = np.asarray(frames, dtype=np.float32)
        if batch.ndim != 2 or batch.shape[1] != VAD_FRAME_SAMPLES or len(states) != len(batch):
            raise StageFailed(
                f"vad: expected [{len(states)}, {VAD_FRAME_SAMPLES}] frames, got "
                f"{list(batch.shape)}",
                stage=self.stage,
            )
        return batch

    def _probabilities(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        batch = self._checked(states, frames)
        for state in states:
            state.data["frames"] = int(state.data.get("frames", 0)) + 1
        rms = np.sqrt(np.mean(np.square(batch, dtype=np.float64), axis=1))
        return np.where(rms > SPEECH_RMS, SPEECH_PROBABILITY, SILENCE_PROBABILITY).astype(
            np.float32
        )


class ScriptedAsr(_ScriptedStage):
    """Answers the script's next transcript after the ASR latency."""

    stage: ClassVar[StageName] = "asr"

    async def transcribe(self, request: AsrRequest) -> AsrTranscript:
        """Raises: whatever the script has due; `StageFailed` when aborted."""
        self._require_entered()
        admission = await self.script.admit(self.stage, request.request_id, request)
        if not admission.aborted:
            await self._wait_answer(request.request_id)
        if admission.aborted:
            raise StageFailed(f"asr: request {request.request_id} was aborted", stage=self.stage)
        admission.checkpoint(0)
        if request.partial:
            return AsrTranscript(request.request_id, self.script.next_partial())
        await admission.reach("finish")
        return AsrTranscript(request.request_id, self.script.next_transcript())

    @property
    def live_transcripts(self) -> bool:
        """Whether it answers partial requests (B33): as the script says."""
        return self.script.live_transcripts

    @property
    def punctuates(self) -> bool:
        """Whether its text ends sentences with a mark (B32): as the script says."""
        return self.script.punctuates

    @property
    def languages(self) -> tuple[str, ...] | None:
        """The languages it knows: as the script says (None: any)."""
        return self.script.asr_languages


class ScriptedTurnEnd(_ScriptedStage):
    """Answers the script's next end-of-turn verdict (B32) after its latency."""

    stage: ClassVar[StageName] = "turn_end"

    async def predict(self, request: TurnEndRequest) -> float:
        """Raises: whatever the script has due."""
        self._require_entered()
        admission = await self.script.admit(self.stage, request.request_id, request)
        await self._wait_answer(request.request_id)
        admission.checkpoint(0)
        return self.script.next_turn_end()


class ScriptedVlm(_ScriptedStage):
    """Streams the script's next reply word by word, then its decision."""

    stage: ClassVar[StageName] = "vlm"

    @property
    def prepares_frames(self) -> bool:
        """Whether it takes frames as they arrive: as the script says."""
        return self.script.prepares_frames

    async def prepare_frame(self, frame: bytes) -> None:
        """Records the frame (`Script.prepared_frames`)."""
        self.script.prepared_frames.append(frame)

    @property
    def function_calling(self) -> bool:
        """Whether it declares that it chooses tools: as the script says."""
        return self.script.function_calling

    async def generate(
        self, request: VlmRequest
    ) -> AsyncIterator[VlmDelta | VlmCallDelta | VlmDecisionResult]:
        """Raises: whatever the script has due (at submission or after some items)."""
        self._require_entered()
        admission = await self.script.admit(self.stage, request.request_id, request)
        reply = self.script.next_reply(request.context.transcript)
        items: list[VlmDelta | VlmCallDelta | VlmDecisionResult] = []
        if reply.action is not VlmAction.LISTEN:
            items.extend(VlmDelta(request.request_id, p) for p in word_pieces(reply.text))
        for index, call in enumerate(reply.calls):
            args = call.arguments
            pieces = [args[i : i + call.chunk] for i in range(0, len(args), call.chunk)] or [""]
            items.extend(VlmCallDelta(request.request_id, index, call.name, p) for p in pieces)
        text = reply.text if reply.action is not VlmAction.LISTEN else ""
        items.append(
            VlmDecisionResult(request.request_id, reply.action, text, reply.question or "")
        )
        job = self._join_engine(request.request_id, len(items))
        try:
            for sent, item in enumerate(items):
                await self._wait_item(job, sent)
                if admission.aborted:
                    return
                admission.checkpoint(sent)
                await admission.reach(
                    *_steps(sent, len(items)), *(("finish",) if item is items[-1] else ())
                )
                yield item
        finally:
            if job is not None:
                job.leave()


class ScriptedTts(_ScriptedStage):
    """A sine tone, 60 ms per character, in 100 ms chunks; latency (or the engine's step)
    before every chunk."""

    stage: ClassVar[StageName] = "tts"
    output_sample_rate_hz: int = 24_000
    voices: frozenset[str] | None = None  # any name

    async def synthesize(self, request: TtsRequest) -> AsyncIterator[TtsAudio]:
        """Raises: `StageFailed` for a non-positive rate; whatever the script has due."""
        self._require_entered()
        rate = request.sample_rate_hz
        if rate <= 0:
            raise StageFailed(f"tts: sample rate {rate} Hz is not positive", stage=self.stage)
        admission = await self.script.admit(self.stage, request.request_id, request)
        count, chunks = _tone_chunks(request.request_id, request.text, rate)
        job = self._join_engine(request.request_id, count) if count else None
        try:
            for sent, chunk in enumerate(chunks):
                await self._wait_item(job, sent)
                if admission.aborted:
                    return
                admission.checkpoint(sent)
                await admission.reach(*_steps(sent, count))
                yield chunk
        finally:
            if job is not None:
                job.leave()
        await admission.reach("finish")


def _steps(index: int, total: int) -> tuple[FaultStep, ...]:
    """The fault steps streamed item `index` of `total` is: the first and/or the middle."""
    steps: tuple[FaultStep, ...] = ("first",) if index == 0 else ()
    return (*steps, "mid") if index == total // 2 else steps


def _tone_chunks(request_id: str, text: str, rate: int) -> tuple[int, Iterator[TtsAudio]]:
    """The whole reply as 100 ms chunks, made one at a time (a hostile client's megabyte
    of text is an hour of tone: made at once it held the event loop and gigabytes); a
    word goes with the chunk its first character falls in (its time is 60 ms per
    character before it). Returns the number of chunks and the chunks."""
    total = math.ceil(len(text) * MS_PER_CHARACTER * rate / 1000)
    per_chunk = max(1, rate * CHUNK_MS // 1000)
    count = math.ceil(total / per_chunk) if total else 0

    def chunks() -> Iterator[TtsAudio]:
        pieces = iter(word_pieces(text))
        pending: tuple[int, str] | None = None  # a word and the chunk it falls in
        offset = 0
        for i in range(count):
            words = ""
            while True:
                if pending is None:
                    piece = next(pieces, None)
                    if piece is None:
                        break
                    start_sample = offset * MS_PER_CHARACTER * rate // 1000
                    pending = (min(start_sample // per_chunk, count - 1), piece)
                    offset += len(piece)
                if pending[0] > i:
                    break
                words += pending[1]
                pending = None
            first, last = i * per_chunk, min(total, (i + 1) * per_chunk)
            t = np.arange(first, last, dtype=np.float64) / rate
            wave = np.round(TONE_AMPLITUDE * 32767 * np.sin(2 * math.pi * TONE_HZ * t))
            yield TtsAudio(request_id, wave.astype("<i2").tobytes(), words)

    return count, chunks()
