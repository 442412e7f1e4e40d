"""The transformers VLM engine serving many requests at once: continuous batching.

`BatchedHfEngine` is `HfVlmEngine` (the same loading, tokenizing, image processing and
image prefill) with its one-request-at-a-time decode replaced by one loop thread that
executes `SlotScheduler` plans (`slot_scheduler.py`) on a `SlotDecoder`
(`batched_decode.py`): each step decodes a token for every running request and
prefills at most `prefill_chunk_tokens` prompt tokens, so a new request joins without
holding the others up for its whole prefill, and a finished or aborted one leaves at
once. `submit` / `abort` are `GenerationEngine`'s: `submit` hands the request to the
loop (returning at once), the stream yields its text (`PieceQueue`, as `hf_engines.py`).

Text-only prompts are prefilled in chunks by the decoder. A prompt with images is
prefilled whole, at its first chunk, by the engine's own forward (the vision tower,
M-RoPE positions, deepstack: `HfVlmEngine._prefill`) and copied into its slot
(`SlotDecoder.load_prefix`, with its rope offset); its later chunks then run nothing
(their KV is there already) and the last one gives the stored first logits. The
scheduler matches prompts by ids, so an image's placeholder ids are replaced, for the
matching only, by an id derived from the image's digest: two frames never match.

Owned by the loop thread alone: the scheduler, the decoder and the model. `submit`,
`abort` and `close` only post to it, under one lock. A failed step ends every request
with the error (the decoder's state is unknown after it) and the loop goes on.

Timing: each request's `DecodeTiming` (queue wait, prefill from its slot to its first
token, decode steps and their time, tokens) is `last_timing` once it ends;
`on_timing(stage, seconds)` (the server's stage latency histograms,
`EngineStage.observe_timing`) hears "vlm_queue_wait" and "vlm_prefill" per request and
"vlm_decode_step" per step.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from backends.base import StageFailed
from backends.gpu.batched_decode import SlotDecoder
from backends.gpu.device_audit import DeviceAuditError
from backends.gpu.hf_engines import (
    DecodeTiming,
    HfVlmEngine,
    PieceQueue,
    PieceStream,
    queue_streamer,
)
from backends.gpu.slot_scheduler import (
    DEFAULT_SLOTS,
    PREFILL_CHUNK_TOKENS,
    AdmissionRefused,
    SlotRequest,
    SlotScheduler,
    StepPlan,
)
from backends.gpu.step_mailbox import StepMailbox

if TYPE_CHECKING:
    from collections.abc import Callable

    from backends.gpu.engine_api import EnginePrompt, Sampling

__all__ = ["BatchedHfEngine"]


@dataclass(slots=True)
class _Job:
    """A request as the loop runs it: the engine's prepared prompt, its sampling, its
    text's way out, and (images) the prefill's first logits once computed."""

    request: Any  # the VLM engine's prepared prompt
    sampling: Sampling
    streamer: Any
    pieces: PieceQueue
    errors: list[BaseException]
    first_logits: Any = None
    submitted: float = 0.0  # perf_counter
    assigned: float | None = None
    timing: DecodeTiming = field(default_factory=DecodeTiming)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.errors.append(error)
        try:
            self.streamer.end()
        finally:
            self.pieces.close()


class BatchedHfEngine(HfVlmEngine):
    """`HfVlmEngine` with continuous batching over `batch_slots` KV rows: see the module.

    `session_of(request_id)` names the session a request belongs to (None: none), whose
    KV its slot then keeps for that session's next request.
    """

    def __init__(
        self,
        model_path: str,
        *,
        batch_slots: int = DEFAULT_SLOTS,
        prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS,
        max_waiting: int = 256,
        session_of: Callable[[str], str | None] | None = None,
        **options: Any,
    ) -> None:
        # the slots keep prompts' KV themselves: the VLM engine's own store is unused
        options["kv_slots"] = 0
        super().__init__(model_path, **options)
        self.batch_slots = batch_slots
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.max_waiting = max_waiting
        self.session_of = session_of
        self.batch: SlotDecoder | None = None
        self.scheduler: SlotScheduler | None = None
        self._mailbox: StepMailbox[tuple[SlotRequest, _Job]] = StepMailbox()
        self._jobs: dict[str, _Job] = {}  # the loop's
        self._loop: threading.Thread | None = None
        self.on_timing: Callable[[str, float], None] | None = None

    def _prepare_decoding(self) -> None:
        """The end and suppressed ids (as `_HfEngine` reads them), the batch's decoder
        and scheduler, and the loop; no one-request `StaticDecoder` is built."""
        import torch

        self._eos, never = self._stop_and_suppressed_ids()
        self.batch = SlotDecoder(
            self.model.model.language_model,
            self.model.lm_head,
            self._text_config,
            slots=self.batch_slots,
            max_len=self.max_len,
            device=self.device,
            dtype=getattr(torch, self.dtype),
            mrope=self.mrope,
            graphs=self.cuda_graphs,
            suppress_ids=never,
        )
        self.scheduler = SlotScheduler(
            slots=self.batch_slots,
            max_len=self.max_len,
            prefill_chunk_tokens=self.prefill_chunk_tokens,
            max_waiting=self.max_waiting,
        )
        self._mailbox.open()
        self._loop = threading.Thread(target=self._run, name="hf-vlm-batch", daemon=True)
        self._loop.start()

    async def close(self) -> None:
        self._mailbox.close()
        loop = self._loop
        if loop is not None:
            await anyio.to_thread.run_sync(loop.join)
        self._loop = None
        self.batch = None
        self.scheduler = None
        await super().close()

    async def submit(self, request_id: str, prompt: EnginePrompt, sampling: Sampling) -> Any:
        if self.model is None or self._loop is None:
            raise StageFailed(f"{self.name}: engine not started", stage=self.name)
        prepared = await anyio.to_thread.run_sync(self._prepared, prompt)
        pieces = PieceQueue()
        streamer = queue_streamer(
            self.tokenizer, pieces, skip_special_tokens=sampling.skip_special_tokens
        )
        errors: list[BaseException] = []
        job = _Job(prepared, sampling, streamer, pieces, errors, submitted=time.perf_counter())
        job.timing.prompt_tokens = len(prepared.ids)
        job.timing.graphs = self.cuda_graphs
        session = self.session_of(request_id) if self.session_of is not None else None
        request = SlotRequest(
            request_id, _match_ids(prepared), sampling.max_tokens, self._eos, session
        )
        self._mailbox.post((request, job))
        return PieceStream(pieces, errors)

    async def abort(self, request_id: str) -> None:
        self._mailbox.abort(request_id)

    # -- the loop thread ------------------------------------------------------------

    def _run(self) -> None:
        import torch

        scheduler = self.scheduler
        assert scheduler is not None
        while (posted := self._mailbox.take(lambda: scheduler.busy)) is not None:
            inbox, aborts = posted
            for request, job in inbox:
                try:
                    scheduler.submit(request)
                except (AdmissionRefused, ValueError) as exc:
                    job.end(StageFailed(f"{self.name}: {exc}", stage=self.name))
                    continue
                self._jobs[request.request_id] = job
            for request_id in aborts:
                scheduler.cancel(request_id)
            try:
                with torch.inference_mode(), self._audited():
                    self._step(scheduler)
            except DeviceAuditError as exc:  # named as it is: a placement bug, not a step's
                self._end_all(scheduler, exc)
            except Exception as exc:  # every request ends with it; the loop goes on
                failed = StageFailed(f"{self.name}: decode step failed: {exc}", stage=self.name)
                self._end_all(scheduler, failed)
        self._end_all(scheduler, None)
        for _, job in self._mailbox.left():
            job.end()

    def _end_all(self, scheduler: SlotScheduler, error: BaseException | None) -> None:
        for request_id in scheduler.drain():
            ended = self._jobs.pop(request_id, None)
            if ended is not None:
                ended.end(error)

    def _step(self, scheduler: SlotScheduler) -> None:
        import torch

        plan = scheduler.plan()
        for request_id in plan.cancelled:
            job = self._jobs.pop(request_id, None)
            if job is not None:
                self._ended(job)
        started = time.perf_counter()
        for assignment in plan.assigned:
            assigned = self._jobs[assignment.request_id]
            assigned.assigned = started
            assigned.timing.queue_wait_ms = (started - assigned.submitted) * 1000
            assigned.timing.reused_tokens = assignment.reused
        sampled = self._execute(plan) if not plan.idle else {}
        outcome = scheduler.commit(plan, sampled)
        self._timed(plan, started, time.perf_counter())
        for emitted in outcome.emitted:
            job = self._jobs[emitted.request_id]
            job.timing.tokens += 1
            job.streamer.put(torch.tensor([emitted.token]))
        for finished in outcome.finished:
            self._ended(self._jobs.pop(finished.request_id))

    def _timed(self, plan: StepPlan, started: float, now: float) -> None:
        """The step's time: a prefill done for the prompts it completed, one decode
        step more for the requests it decoded."""
        for chunk in plan.prefill:
            job = self._jobs.get(chunk.request_id)
            if chunk.last and job is not None and job.assigned is not None:
                job.timing.prefill_ms = (now - job.assigned) * 1000
        for row in plan.decode:
            decoded = self._jobs.get(row.request_id)
            if decoded is not None:
                decoded.timing.decode_steps += 1
                decoded.timing.decode_ms += (now - started) * 1000
        if plan.decode and self.on_timing is not None:
            self.on_timing("vlm_decode_step", now - started)

    def _ended(self, job: _Job) -> None:
        job.end()
        self.last_timing = job.timing
        if self.on_timing is not None:
            self.on_timing("vlm_queue_wait", job.timing.queue_wait_ms / 1000)
            if job.assigned is not None and job.timing.tokens:
                self.on_timing("vlm_prefill", job.timing.prefill_ms / 1000)

    def _execute(self, plan: StepPlan) -> dict[int, int]:
        batch = self.batch
        assert batch is not None
        for assignment in plan.assigned:
            batch.begin(assignment.slot, self._jobs[assignment.request_id].sampling)
        first = []
        for chunk in plan.prefill:
            job = self._jobs[chunk.request_id]
            request = job.request
            if request.spans:  # images: the engine's own forward, the whole prompt at once
                if job.first_logits is None:
                    prefill = self._prefill(request)
                    length = len(request.ids)
                    batch.load_prefix(chunk.slot, prefill.cache, length, prefill.rope_delta)
                    job.first_logits = prefill.logits
                logits = job.first_logits
            else:
                ids = request.ids[chunk.start : chunk.start + len(chunk.tokens)].tolist()
                logits = batch.prefill_chunk(chunk.slot, ids, chunk.start)
            if chunk.last:
                first.append((chunk.slot, logits))
        result = batch.step(
            [row.slot for row in plan.decode], [row.token for row in plan.decode], first=first
        )
        return dict(zip(plan.sampled_slots, result.tokens, strict=True))


def _match_ids(request: Any) -> tuple[int, ...]:
    """The prompt's ids for prefix matching: an image's placeholders as one id of its
    own (negative, from its digest), so different frames never match."""
    ids = [int(i) for i in request.ids]
    for span in request.spans:
        own = -1 - int.from_bytes(span.digest[:7], "big")
        ids[span.start : span.end] = [own] * (span.end - span.start)
    return tuple(ids)
