"""Many voices per GPU: Qwen3-TTS streams synthesized together, one codec frame per step.

`BatchedSynthesizer` is a `SpeechSynthesizer` (tts.py) whose `stream` may be called from
many sessions at once (`concurrent = True`: `TtsStage` then holds no lock). One loop
thread owns the model and runs the same continuous batching as the VLM's engine: a
`SlotScheduler` (slot_scheduler.py) admits streams FIFO into `slots` KV rows and plans
each step, a `TalkerBatch` (talker_batch.py) executes it:

- every decoding stream gets one codec frame per step (the code predictor for the
  frame, one Talker forward for all rows, CUDA Graphs per rows bucket 1, 2, 4, 8, 16,
  32 on CUDA); a stream joins at any step (its text prefilled in chunks beside the
  decoding ones, the speaker prefix's KV loaded, computed once per speaker and
  language) and leaves at the step that samples its end, or at the next plan after
  `stop` is set (cancellation within one step, the slot free again);
- each stream's frames are cut by `chunk_schedule` (2, 2, 4, 8, 8, ... frames) into
  the Code2Wav windows the one-stream runtimes decode (`codec_chunks.ChunkCutter`);
  the windows completed at a step are decoded together, one Code2Wav call per window
  length, and each chunk pushed to its stream's queue;
- each stream's `timing` (queue wait, prefill, decode steps, first chunk) is kept in
  `last_timing` once it ends; `on_timing(stage, seconds)` (the server's stage latency
  histograms, `TtsStage.observe_timing`) hears "tts_queue_wait", "tts_prefill" and
  "tts_first_chunk" per stream and "tts_decode_step" per step.

Streams never share sampling state, so a stream's codes are the same alone or among 31
others (greedy, or seeded); memory is the slots' KV, fixed at load.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from backends.gpu.batched_decode import GRAPH_ROW_BUCKETS
from backends.gpu.codec_chunks import (
    _DECODE_CONTEXT_FRAMES,
    DEFAULT_CHUNK_FRAMES,
    DEFAULT_FIRST_CHUNK_FRAMES,
    ChunkCutter,
    chunk_schedule,
)
from backends.gpu.device_audit import device_audit
from backends.gpu.qwen_tts_import import _torch_dtype, import_qwen_tts
from backends.gpu.slot_scheduler import AdmissionRefused, SlotRequest, SlotScheduler
from backends.gpu.step_mailbox import StepMailbox
from backends.gpu.talker_batch import TalkerBatch, TalkerPrompt, TtsSampling, talker_prompt

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy as np

    from backends.gpu.codec_chunks import Float32Array

__all__ = ["BatchedSynthesizer", "StreamTiming"]

#: codec frames a stream may make when the placement sets no `max_tokens` (12.5 a second)
DEFAULT_MAX_FRAMES: Final = 1024
_END: Final = object()


@dataclass(slots=True)
class StreamTiming:
    """Where one stream's time went, in seconds (None: it never got there)."""

    queue_wait_s: float | None = None  # submitted -> a slot
    prefill_s: float | None = None  # a slot -> its first frame's id sampled
    decode_steps: int = 0  # steps that made one of its frames
    decode_s: float = 0.0  # those steps' time, all together
    first_chunk_s: float | None = None  # submitted -> its first audio

    @property
    def decode_step_s(self) -> float | None:
        """The mean time of a step that made one of its frames."""
        return self.decode_s / self.decode_steps if self.decode_steps else None


_Window = tuple["_Stream", list[Any], int]  # a stream, its frames to decode, as of how many


@dataclass(slots=True)
class _Stream:
    """A stream as the loop runs it: prompt, audio's way out, its chunker and decoder."""

    request_id: str
    prompt: TalkerPrompt
    sampling: TtsSampling
    out: queue.Queue[Any]
    submitted: float
    stop: threading.Event  # the caller's: read by the loop before every plan
    timing: StreamTiming = field(default_factory=StreamTiming)
    assigned_at: float | None = None
    frames: list[Any] = field(default_factory=list)  # of the chunk being filled
    sizes: Iterator[int] | None = None
    size: int = 0  # frames of the chunk being filled
    cutter: ChunkCutter | None = None


class BatchedSynthesizer:
    """Qwen3-TTS over `slots` streams at once: see the module."""

    concurrent = True

    def __init__(
        self,
        model_path: str,
        *,
        device: str,
        dtype: str = "auto",
        slots: int = 32,
        max_len: int = 4096,
        max_new_tokens: int | None = None,
        prefill_chunk_tokens: int = 256,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        first_chunk_frames: int = DEFAULT_FIRST_CHUNK_FRAMES,
        graphs: bool = True,
        batch_code2wav: bool = True,
        device_audit: bool = False,
        sampling: TtsSampling | None = None,
        on_timing: Callable[[str, float], None] | None = None,
    ) -> None:
        next(chunk_schedule(first_chunk_frames, chunk_frames))  # refuses sizes < 1 now
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.slots = slots
        self.max_len = max_len
        self.max_frames = max_new_tokens or DEFAULT_MAX_FRAMES
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.chunk_frames = chunk_frames
        self.first_chunk_frames = first_chunk_frames
        self.graphs = graphs
        #: one Code2Wav call for the windows of a step; its float rounding then moves
        #: with the batch (a few ulps), where alone a stream's audio is bit for bit the same
        self.batch_code2wav = batch_code2wav
        self.device_audit = device_audit  # the loop thread's torch work, op by op
        #: every stream's unless it names its own (None: the checkpoint's, at `load`)
        self.sampling = sampling
        self.on_timing = on_timing
        self.sample_rate_hz = 24_000  # Code2Wav's; set again from each decode
        self.last_timing: StreamTiming | None = None
        self.batch: TalkerBatch | None = None
        self.scheduler: SlotScheduler | None = None
        self._model: Any = None
        self._mailbox: StepMailbox[_Stream] = StepMailbox()
        self._streams: dict[str, _Stream] = {}  # the loop's
        self._loop: threading.Thread | None = None
        self._ids = itertools.count()
        #: what each step served: (step, slots decoding, slots joining): tests read it
        self.steps: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
        self.record_steps = False

    # -- SpeechSynthesizer ----------------------------------------------------------

    def load(self) -> None:
        qwen_tts = import_qwen_tts()
        kwargs: dict[str, Any] = {"dtype": _torch_dtype(self.dtype, self.device)}
        if self.device != "cpu":
            kwargs["device_map"] = self.device
        self._model = qwen_tts.Qwen3TTSModel.from_pretrained(self.model_path, **kwargs)
        if self.sampling is None:
            self.sampling = TtsSampling.of_checkpoint(self._model)
        self.batch = TalkerBatch(
            self._model,
            slots=self.slots,
            max_len=self.max_len,
            device=self.device,
            dtype=_torch_dtype(self.dtype, self.device),
            graphs=self.graphs,
        )
        self.scheduler = SlotScheduler(
            slots=self.slots,
            max_len=self.max_len,
            prefill_chunk_tokens=self.prefill_chunk_tokens,
            keep_sessions=False,
        )
        self._mailbox.open()
        self._loop = threading.Thread(target=self._run, name="tts-batch", daemon=True)
        self._loop.start()

    def warmup(self) -> None:
        """One utterance; with CUDA Graphs, 1, 2, 4, ... streams at once up to the slots,
        so that every rows bucket's graph is captured before a session waits on it."""
        sizes = [1]
        if self.batch is not None and self.batch.decoder.graphs:
            sizes = [b for b in GRAPH_ROW_BUCKETS if b <= self.slots]
        errors: list[BaseException] = []
        for size in sizes:
            threads = [
                threading.Thread(target=self._say_hello, args=(errors,)) for _ in range(size)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:  # a warm-up that failed fails the stage's warm-up
                raise errors[0]

    def _say_hello(self, errors: list[BaseException]) -> None:
        try:
            for _ in self.stream(
                "Hello.", speaker="Vivian", language="Auto", stop=threading.Event()
            ):
                pass
        except BaseException as exc:
            errors.append(exc)

    def stream(
        self,
        text: str,
        *,
        speaker: str,
        language: str,
        stop: threading.Event,
        sampling: TtsSampling | None = None,
    ) -> Iterator[np.ndarray]:
        """Yield the stream's float32 chunks as the loop makes them; `stop` (or closing
        the iterator) takes it out of the batch at the next step."""
        if self._model is None or self._loop is None:
            raise RuntimeError("tts: the batched synthesizer is not loaded")
        prompt = talker_prompt(self._model, text, speaker=speaker, language=language)
        request_id = f"tts-{next(self._ids)}"
        chosen = sampling or self.sampling
        assert chosen is not None  # set at `load`
        stream = _Stream(request_id, prompt, chosen, queue.Queue(), time.perf_counter(), stop)
        self._mailbox.post(stream)
        try:
            while not stop.is_set():
                try:
                    item = stream.out.get(timeout=0.05)  # wakes to see `stop`
                except queue.Empty:
                    continue
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel(request_id)

    def cancel(self, request_id: str) -> None:
        self._mailbox.abort(request_id)

    def close(self) -> None:
        self._mailbox.close()
        if self._loop is not None:
            self._loop.join()
        self._loop = None
        self._model = None
        self.batch = None

    # -- the loop thread ------------------------------------------------------------

    def _run(self) -> None:
        import torch

        scheduler = self.scheduler
        assert scheduler is not None
        while (posted := self._mailbox.take(lambda: scheduler.busy)) is not None:
            inbox, aborts = posted
            for stream in inbox:
                request = SlotRequest(
                    stream.request_id,
                    stream.prompt.match_ids,
                    self.max_frames + 1,  # the id sampled after the last frame ends it
                    frozenset({self.batch.eos_id if self.batch else -1}),
                )
                try:
                    scheduler.submit(request)
                except (AdmissionRefused, ValueError) as exc:
                    stream.out.put(RuntimeError(f"tts: {exc}"))
                    continue
                self._streams[stream.request_id] = stream
            for request_id in aborts:
                scheduler.cancel(request_id)
            for stream in self._streams.values():  # a stop set by now frees its slot now
                if stream.stop.is_set():
                    scheduler.cancel(stream.request_id)
            try:
                audit = device_audit("tts", self.device, enabled=self.device_audit)
                with torch.inference_mode(), audit:
                    self._step(scheduler)
            except Exception as exc:  # every stream ends with it; the loop goes on
                for request_id in scheduler.drain():
                    ended = self._streams.pop(request_id, None)
                    if ended is not None:
                        ended.out.put(RuntimeError(f"tts: batched step failed: {exc}"))
        for request_id in scheduler.drain():
            ended = self._streams.pop(request_id, None)
            if ended is not None:
                ended.out.put(_END)
        for stream in self._mailbox.left():
            stream.out.put(_END)

    def _step(self, scheduler: SlotScheduler) -> None:
        batch = self.batch
        assert batch is not None
        plan = scheduler.plan()
        for request_id in plan.cancelled:
            cut = self._streams.pop(request_id, None)
            if cut is not None:
                self._end(cut)
        if plan.idle:
            scheduler.commit(plan, {})
            return
        started = time.perf_counter()
        for assignment in plan.assigned:
            stream = self._streams[assignment.request_id]
            stream.assigned_at = started
            stream.timing.queue_wait_s = started - stream.submitted
            batch.begin(assignment.slot, stream.prompt, stream.sampling, assignment.reused)
        first = []
        for chunk in plan.prefill:
            stream = self._streams[chunk.request_id]
            end = chunk.start + len(chunk.tokens)
            logits = batch.prefill(chunk.slot, stream.prompt, chunk.start, end)
            if chunk.last:
                assert logits is not None  # a prompt ends in text, never in the prefix
                first.append((chunk.slot, logits))
        decode = plan.decode
        frames, sampled_ids = batch.frame_step(
            [row.slot for row in decode], [row.token for row in decode], first
        )
        sampled = dict(zip(plan.sampled_slots, sampled_ids, strict=True))
        outcome = scheduler.commit(plan, sampled)
        now = time.perf_counter()
        if self.record_steps:
            self.steps.append(
                (
                    len(self.steps),
                    tuple(row.request_id for row in decode),
                    tuple(a.request_id for a in plan.assigned),
                )
            )
        for chunk in plan.prefill:
            prefilled = self._streams.get(chunk.request_id)
            if chunk.last and prefilled is not None and prefilled.assigned_at is not None:
                prefilled.timing.prefill_s = now - prefilled.assigned_at
        windows: list[_Window] = []
        for row, frame in zip(decode, frames, strict=True):
            served = self._streams.get(row.request_id)
            if served is not None:
                served.timing.decode_steps += 1
                served.timing.decode_s += now - started
                self._add_frame(served, frame, windows)
        if decode and self.on_timing is not None:
            self.on_timing("tts_decode_step", now - started)
        ended = [self._streams.pop(f.request_id) for f in outcome.finished]
        windows += [self._window(stream, whole=False) for stream in ended if stream.frames]
        self._decode_windows(windows)
        for stream in ended:
            self._end(stream)

    # -- a stream's chunks ----------------------------------------------------------

    def _add_frame(self, stream: _Stream, frame: list[int], windows: list[_Window]) -> None:
        if stream.sizes is None:
            stream.sizes = chunk_schedule(self.first_chunk_frames, self.chunk_frames)
            stream.size = next(stream.sizes)
        stream.frames.append(frame)
        if len(stream.frames) == stream.size:
            windows.append(self._window(stream, whole=True))
            stream.size = next(stream.sizes)

    def _window(self, stream: _Stream, *, whole: bool) -> _Window:
        """The stream's chunk of frames so far, as the Code2Wav window to decode."""
        if stream.cutter is None:
            stream.cutter = ChunkCutter(
                calibrate_frames=max(_DECODE_CONTEXT_FRAMES, self.chunk_frames),
                pad_frames=self.chunk_frames,
            )
        frames, length = stream.cutter.window(stream.frames, whole)
        stream.frames = []
        return stream, frames, length

    def _decode_windows(self, windows: list[_Window]) -> None:
        """Every chunk the step completed: one Code2Wav call per window length (rows of
        one shape; each alone without `batch_code2wav`), cut, sent."""
        groups: dict[int, list[_Window]] = {}
        for index, window in enumerate(windows):
            groups.setdefault(window[2] if self.batch_code2wav else -index, []).append(window)
        for group in groups.values():
            length = group[0][2]
            audios = self._decode([frames for _, frames, _ in group], length)
            for (stream, _, _), audio in zip(group, audios, strict=True):
                assert stream.cutter is not None
                chunk = stream.cutter.cut(audio)
                if stream.timing.first_chunk_s is None:
                    stream.timing.first_chunk_s = time.perf_counter() - stream.submitted
                stream.out.put(chunk)

    def _end(self, stream: _Stream) -> None:
        """The stream has left the batch (its last chunk sent, or cut off)."""
        stream.out.put(_END)
        timing = self.last_timing = stream.timing
        if self.on_timing is not None:
            for stage, seconds in (
                ("tts_queue_wait", timing.queue_wait_s),
                ("tts_prefill", timing.prefill_s),
                ("tts_first_chunk", timing.first_chunk_s),
            ):
                if seconds is not None:
                    self.on_timing(stage, seconds)

    def _decode(self, windows: list[list[Any]], length: int) -> list[Float32Array]:
        """Code2Wav of each window as the first `length` frames (-1: qwen_tts's
        padding, whose samples it cuts off), all in one call."""
        import numpy as np
        import torch

        padded = []
        for frames in windows:
            codes = torch.tensor(frames, dtype=torch.long)
            if length > codes.shape[0]:
                pad = codes.new_full((length - codes.shape[0], codes.shape[1]), -1)
                codes = torch.cat([codes, pad])
            padded.append({"audio_codes": codes.to(self._model.device)})
        wavs, rate = self._model.model.speech_tokenizer.decode(padded)
        self.sample_rate_hz = int(rate)
        return [np.asarray(wav, dtype=np.float32).reshape(-1) for wav in wavs]
