"""`BatchedEngineModel`: when a scripted stage answers, as one batched GPU engine would.

Without a cost model the scripted stages wait `Script.latency` per answer or streamed
item, and concurrent requests cost the same as one. A GPU engine batches instead: one
engine step serves every active request of its stage, and a step takes longer the more
requests it serves. A `BatchedEngineModel` per stage (`Script.engines`) stands in for that
engine, so that the server's own scheduling (queueing, fairness, first audio at many
sessions) can be benchmarked on a CPU. It decides only *when* a request's items are ready;
what they are stays with the Script's queues.

What it owns, per stage: the cost curve (`CostCurve`), the requests in the batch (at most
`max_batch`), the FIFO queue of requests waiting for a slot, the step in progress and a
bounded history of the steps run (`steps`, `StepRecord`: what tests assert on).

    step time       `CostCurve.step_s(batch, joining)`:
                        base_s + per_item_s * (batch - 1)
                        + (prefill_s + prefill_per_item_s * (joining - 1) if joining else 0)
                    `base_s` is a decode step at batch 1; `prefill_s` what reading one new
                    request's prompt adds to the step it joins at (its first step), with
                    `prefill_per_item_s` for each further request joining at that step
    items           each item of a request costs `steps_per_item` steps: a streamed item
                    (a VLM word piece, a 100 ms TTS chunk) is ready after every
                    `steps_per_item` steps it was served, an ASR transcript or an
                    end-of-turn verdict (one item) after all of its steps; the first
                    item may cost `first_item_steps` instead (a TTS stream's first
                    chunk, 2 codec frames)
    admission       a request reaches the engine's queue `admit_s` after it joined: host
                    work (tokens, embeddings) that runs beside the others' steps and
                    stalls none of them; `first_output_s()` is its first item alone
    continuous      a request joins at the next step boundary (an idle engine begins a
    batching        step as soon as a queued request waits on it, taking every request
                    queued in that event-loop tick), is served by every step until it has
                    had all its steps, then leaves at that step's end; a request that
                    leaves early (`leave`, or `cancel` by id for an abort) is still served
                    by the step in progress and is gone from the next one

Invariants: admission is FIFO (a request joins only after every request that arrived
before it); no request starves (every admitted request leaves after at most its own number
of steps, so each queued one reaches a slot); each step's time is a function of its batch
alone (how many requests it serves and how many of them joined at it), never of the clock
or of other stages.

Timing: the engine is a timeline read from `clock` (default `anyio.current_time`). It
advances lazily: whoever waits on it first finishes every step whose end has passed, so
the engine keeps its pace while the requests' consumers are busy elsewhere (a real engine
runs ahead of a slow reader, its output buffered). While requests wait, one of them is the
step task: it sleeps (`sleep`, default `anyio.sleep`) until the step in progress ends,
then wakes every waiting request; if it is cancelled another waiter takes over the same
deadline. Tests inject a fake `clock` and `sleep` and assert on `steps`, never on elapsed
time. One engine serves one event loop.

The `h200` profile (`COST_PROFILES`) takes its batch-1 figures from the device check of
2026-11-30 (docs/measurements/gpu-device-check-h200-2026-11-30.json, CUDA Graphs on):

    asr       prefill 179.5 ms, then 6.84 ms per token, 32 tokens (3 s of audio): a
              transcript after 32 steps, about 398 ms at batch 1
    vlm       first token 237.4 ms (1 frame), then 78.2 tokens/s: one word piece per
              token (12.8 ms), the decision one more step
    tts       first audio 241.0 ms, real-time factor 0.316: a 100 ms chunk per step of
              31.6 ms; the first chunk (2 codec frames) after 2 steps, the joining
              step's text prefill taken as one step more (the speaker prefix's KV is
              reused), the remaining 146.2 ms host work beside the steps (`admit_s`):
              that split is an ASSUMPTION, as the batch scaling below
    turn_end  the gpu backend has no end-of-turn model: Smart Turn on one CPU core,
              82 ms a call, one at a time (docs/performance.md, section 3)

Its batch scaling is an ASSUMPTION, not a measurement, to be replaced by the device
check's batched figures once they are measured: decode on a memory-bound GPU grows slowly
with the batch, so a decode step at batch 32 is taken to cost 1.6x one at batch 1
(`per_item_s = 0.6 * base_s / 31`); prefill is compute-heavier, so 32 prompts read at one
step are taken to cost 2x one (`prefill_per_item_s = prefill_s / 31`). Its `max_batch` per
stage is the gpu backend's default placement (`max_num_seqs`, backends/gpu/placement.py,
sized for 32 sessions): asr 32, vlm 32; tts 32, the batched streaming TTS with
`batch_streams = 32` (backends/gpu/batched_tts.py; its default 0 serves one at a time).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

import anyio
import anyio.lowlevel

__all__ = [
    "COST_PROFILES",
    "COST_STAGES",
    "BatchedEngineModel",
    "CostCurve",
    "CostStage",
    "EngineRequest",
    "StepRecord",
    "engine_models",
]

#: the stages a cost model can time (of the Script's stages; VAD runs every tick on the
#: CPU: it keeps its latency)
CostStage = Literal["asr", "vlm", "tts", "turn_end"]
COST_STAGES: Final[tuple[CostStage, ...]] = get_args(CostStage)
#: what a step at batch 32 costs against batch 1 (assumed, see the module docstring)
DECODE_COST_AT_32: Final = 1.6
PREFILL_COST_AT_32: Final = 2.0


@dataclass(frozen=True, slots=True)
class CostCurve:
    """One stage's batched engine: the time of a step as a function of its batch, its slots
    and how many steps an item costs (see the module docstring for the formula)."""

    base_s: float
    per_item_s: float = 0.0
    prefill_s: float = 0.0
    prefill_per_item_s: float = 0.0
    max_batch: int = 1
    steps_per_item: int = 1
    #: steps the first item costs (0: `steps_per_item`), e.g. the codec frames a TTS
    #: stream decodes before its first chunk
    first_item_steps: int = 0
    #: seconds from a request's arrival to its place in the queue, run beside every other
    #: request's steps (host work: tokenizing, features, launches); stalls no one
    admit_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.base_s > 0:
            raise ValueError(f"base_s must be > 0 seconds, not {self.base_s!r}")
        for name in ("per_item_s", "prefill_s", "prefill_per_item_s", "admit_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, not {value!r}")
        for name in ("max_batch", "steps_per_item"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, not {value!r}")
        if type(self.first_item_steps) is not int or self.first_item_steps < 0:
            raise ValueError(
                f"first_item_steps must be a whole number >= 0, not {self.first_item_steps!r}"
            )

    @property
    def first_steps(self) -> int:
        """Steps that serve a request until its first item is ready."""
        return self.first_item_steps or self.steps_per_item

    def steps_for(self, items: int) -> int:
        """Steps that serve a request of `items` items until its last is ready."""
        return self.first_steps + (items - 1) * self.steps_per_item

    def first_output_s(self) -> float:
        """Seconds from a request's arrival to its first item, alone on the engine."""
        return self.admit_s + self.step_s(1, 1) + (self.first_steps - 1) * self.step_s(1)

    def step_s(self, batch: int, joining: int = 0) -> float:
        """Seconds of a step serving `batch` requests, `joining` of them new at it."""
        decode = self.base_s + self.per_item_s * (batch - 1)
        if joining == 0:
            return decode
        return decode + self.prefill_s + self.prefill_per_item_s * (joining - 1)

    def with_fields(self, fields: Mapping[str, object]) -> CostCurve:
        """This curve with some fields replaced (a config's overrides), checked.

        Raises:
            ValueError: an unknown field or a bad value.
        """
        known = [f.name for f in dataclasses.fields(self)]
        changes: dict[str, float | int] = {}
        for name, value in fields.items():
            if name not in known:
                raise ValueError(
                    f"unknown cost curve field `{name}`; expected one of {', '.join(known)}"
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"cost curve field `{name}` must be a number, not {value!r}")
            whole = name in ("max_batch", "steps_per_item", "first_item_steps")
            changes[name] = value if whole else float(value)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _batched(
    base_s: float,
    prefill_s: float,
    *,
    max_batch: int,
    steps_per_item: int = 1,
    first_item_steps: int = 0,
    admit_s: float = 0.0,
) -> CostCurve:
    """A GPU stage's curve from its batch-1 figures and the assumed batch scaling."""
    return CostCurve(
        base_s=base_s,
        per_item_s=base_s * (DECODE_COST_AT_32 - 1) / 31,
        prefill_s=prefill_s,
        prefill_per_item_s=prefill_s * (PREFILL_COST_AT_32 - 1) / 31,
        max_batch=max_batch,
        steps_per_item=steps_per_item,
        first_item_steps=first_item_steps,
        admit_s=admit_s,
    )


_VLM_TOKEN_S = 1 / 78.2  # decode_tokens_per_s_1_frames
_TTS_CHUNK_S = 0.316 * 0.1  # rtf x a 100 ms chunk
_TTS_TTFA_S = 0.241
#: the batched TTS's first chunk is 2 codec frames (160 ms of audio, 50.6 ms of steps at
#: rtf 0.316): 2 steps of a 100 ms chunk each, rounded up
_TTS_FIRST_STEPS = 2
#: a joining stream prefills only its text (the speaker prefix's KV is reused): a short
#: forward that, memory-bound like a decode step, is taken to cost one
_TTS_PREFILL_S = _TTS_CHUNK_S
#: the rest of the measured first audio is host work beside the other streams' steps
#: (text tokens, the prompt's embeddings, the first chunk's Code2Wav and copy out)
_TTS_ADMIT_S = _TTS_TTFA_S - _TTS_PREFILL_S - _TTS_FIRST_STEPS * _TTS_CHUNK_S

#: named cost profiles: `cost_model = "h200"` in a scripted backend's options
COST_PROFILES: Final[Mapping[str, Mapping[CostStage, CostCurve]]] = {
    "h200": {
        # the prefill step also decodes the first token: 179.5 + 32 * 6.84 ms in all
        "asr": _batched(0.00684, 0.1795, max_batch=32, steps_per_item=32),
        # first token at 237.4 ms = prefill + the first decode step
        "vlm": _batched(_VLM_TOKEN_S, 0.2374 - _VLM_TOKEN_S, max_batch=32),
        # batched streaming TTS (backends/gpu/batched_tts.py), 32 streams: first audio at
        # 241.0 ms = host work + a text prefill + the first chunk's 2 steps
        "tts": _batched(
            _TTS_CHUNK_S,
            _TTS_PREFILL_S,
            max_batch=32,
            first_item_steps=_TTS_FIRST_STEPS,
            admit_s=_TTS_ADMIT_S,
        ),
        # one CPU core, one call at a time: no batching, no scaling
        "turn_end": CostCurve(base_s=0.082, max_batch=1),
    },
}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step: when it began, how long it took, whom it served (request ids in
    admission order) and who joined at it."""

    index: int
    start: float
    duration_s: float
    batch: tuple[str, ...]
    joined: tuple[str, ...]

    @property
    def end(self) -> float:
        return self.start + self.duration_s


class EngineRequest:
    """One request in (or queued for) a `BatchedEngineModel`: `ready(i)` waits for item
    `i`; `leave()` when done with it (a stage's `finally`), however it ended."""

    def __init__(self, engine: BatchedEngineModel, request_id: str, items: int, at: float) -> None:
        self.engine = engine
        self.request_id = request_id
        self.items = items
        self.total_steps = engine.curve.steps_for(items)
        self.joined_at = at
        self.arrived_at = at + engine.curve.admit_s  # in the queue, its host work done
        self.admitted_at: float | None = None
        self.left_at: float | None = None
        self.served = 0  # steps that served it
        self._arrival_scope: anyio.CancelScope | None = None

    @property
    def done(self) -> bool:
        return self.served >= self.total_steps

    async def ready(self, index: int) -> bool:
        """Wait until item `index` is ready: True, or False once the request left first.

        Raises:
            ValueError: `index` is not one of its items.
        """
        if not 0 <= index < self.items:
            raise ValueError(f"{self.request_id}: no item {index} of {self.items}")
        engine = self.engine
        target = engine.curve.first_steps + index * engine.curve.steps_per_item
        while True:
            engine.advance()
            if self.served >= target:
                return True
            if self.left_at is not None:
                return False
            if self.admitted_at is None and self.arrived_at > engine.clock():
                await self._wait_arrival()  # its host work, beside the engine's steps
                continue
            if engine.idle:
                # the idle engine starts when its first request waits, once the requests
                # arriving in the same tick are in: they make one batch, as a real
                # engine's scheduler takes every queued request at once
                await anyio.lowlevel.checkpoint()
                engine.advance(start_idle=True)
                continue
            await engine.wait_for_step(self)

    async def _wait_arrival(self) -> None:
        """Sleep until it is in the queue; `leave` ends the sleep at once."""
        with anyio.CancelScope() as scope:
            self._arrival_scope = scope
            try:
                await self.engine._sleep(max(0.0, self.arrived_at - self.engine.clock()))
            finally:
                self._arrival_scope = None

    def leave(self) -> None:
        """Leave the batch (or the queue) at the next step boundary; idempotent."""
        if self.left_at is None and not self.done:
            self.left_at = self.engine.clock()
            if self._arrival_scope is not None:
                self._arrival_scope.cancel()
            self.engine.woken(self)


class BatchedEngineModel:
    """One stage's batched engine (see the module docstring: what it owns, its
    invariants). `join` a request, await its items' `ready`, `leave` it."""

    def __init__(
        self,
        stage: str,
        curve: CostCurve,
        *,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        history: int = 1024,
    ) -> None:
        self.stage = stage
        self.curve = curve
        self.clock = clock
        self._sleep = sleep
        #: the latest steps run, oldest first (at most `history`)
        self.steps: deque[StepRecord] = deque(maxlen=history)
        self.steps_run = 0
        self.active: list[EngineRequest] = []  # the batch, in admission order
        self.waiting: deque[EngineRequest] = deque()  # FIFO, for a slot
        self._step: StepRecord | None = None  # the step in progress
        self._last_end = float("-inf")
        self._sleeper: EngineRequest | None = None  # the step task's request
        self._sleep_scope: anyio.CancelScope | None = None
        self._wake: anyio.Event | None = None  # made in the loop, on first use

    # --- requests ------------------------------------------------------------------------

    def join(self, request_id: str, items: int) -> EngineRequest:
        """A request with `items` items, queued now for the next step boundary.

        Raises:
            ValueError: fewer than one item.
        """
        if items < 1:
            raise ValueError(f"{request_id}: a request has at least one item, not {items}")
        self.advance()
        request = EngineRequest(self, request_id, items, self.clock())
        self.waiting.append(request)
        return request

    def cancel(self, request_id: str) -> None:
        """Every request of that id leaves at the next step boundary (an abort)."""
        for request in [*self.active, *self.waiting]:
            if request.request_id == request_id:
                request.leave()

    # --- the timeline --------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No step in progress (after `advance`): the next one waits for a waiter."""
        return self._step is None

    def advance(self, *, start_idle: bool = False) -> None:
        """Finish every step that has ended by now, beginning the ones that follow at
        their boundaries; `start_idle`: an idle engine with requests queued begins a
        step now (a waiting request's call)."""
        now = self.clock()
        while True:
            step = self._step
            if step is None:
                start = self._next_start(now if start_idle else None)
                if start is None or start > now:
                    return
                step = self._begin(start)
                if step is None:
                    continue
            if step.end > now:
                return
            self._finish(step)

    def _next_start(self, idle_start: float | None) -> float | None:
        """When the next step begins: at the last one's end while requests remain in the
        batch or had queued by then; for requests that arrived while the engine was idle,
        at `idle_start` (None: not yet)."""
        self.active = [r for r in self.active if r.left_at is None or r.left_at > self._last_end]
        if self.active:
            return self._last_end
        while self.waiting:
            first = self.waiting[0]
            if first.arrived_at <= self._last_end:
                start: float | None = self._last_end
            else:
                start = idle_start
            if start is None or first.left_at is None or first.left_at > start:
                return start
            self.waiting.popleft()  # it left before a slot was free
        return None

    def _begin(self, start: float) -> StepRecord | None:
        """The step beginning at `start`: the batch less those who left, plus the queued
        requests that arrived by then, oldest first, while slots are free."""
        self.active = [r for r in self.active if r.left_at is None or r.left_at > start]
        joined: list[EngineRequest] = []
        while self.waiting and len(self.active) < self.curve.max_batch:
            first = self.waiting[0]
            if first.arrived_at > start:
                break
            self.waiting.popleft()
            if first.left_at is not None and first.left_at <= start:
                continue
            first.admitted_at = start
            self.active.append(first)
            joined.append(first)
        if not self.active:  # everyone who could have joined had left
            self._last_end = max(self._last_end, start)
            return None
        step = StepRecord(
            index=self.steps_run,
            start=start,
            duration_s=self.curve.step_s(len(self.active), len(joined)),
            batch=tuple(r.request_id for r in self.active),
            joined=tuple(r.request_id for r in joined),
        )
        self.steps_run += 1
        self.steps.append(step)
        self._step = step
        return step

    def _finish(self, step: StepRecord) -> None:
        for request in self.active:
            request.served += 1
        self.active = [r for r in self.active if not r.done]
        self._last_end = step.end
        self._step = None

    # --- waiting -------------------------------------------------------------------------

    async def wait_for_step(self, request: EngineRequest) -> None:
        """Wait for the end of the step in progress: the first waiter sleeps until then
        (the step task) and wakes the others; a cancelled sleeper hands over."""
        step = self._step
        if step is None:  # a request neither served nor gone is in a step: never here
            raise RuntimeError(f"{self.stage} engine: {request.request_id} waits with no step")
        if self._wake is None:
            self._wake = anyio.Event()
        if self._sleeper is not None:
            await self._wake.wait()
            return
        self._sleeper = request
        try:
            with anyio.CancelScope() as scope:
                self._sleep_scope = scope
                # the step may have ended since `advance` read the clock (a late loop)
                await self._sleep(max(0.0, step.end - self.clock()))
        finally:
            self._sleeper = None
            self._sleep_scope = None
            self._wake_all()

    def woken(self, request: EngineRequest) -> None:
        """`request` left: its waiter must see it at once (the sleeper's sleep ends)."""
        if self._sleeper is request and self._sleep_scope is not None:
            self._sleep_scope.cancel()
        else:
            self._wake_all()

    def _wake_all(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = anyio.Event()
            wake.set()


def engine_models(
    profile: str,
    overrides: Mapping[str, Mapping[str, object]] | None = None,
    *,
    clock: Callable[[], float] = anyio.current_time,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> dict[str, BatchedEngineModel]:
    """One engine per stage of the named profile, its curves' fields replaced by
    `overrides` (per stage, field -> value): what `Script.engines` takes.

    Raises:
        ValueError: an unknown profile, stage or field, or a bad value.
    """
    curves = COST_PROFILES.get(profile)
    if curves is None:
        raise ValueError(
            f"unknown cost model `{profile}`; expected one of {', '.join(COST_PROFILES)}"
        )
    chosen = dict(curves)
    for stage, fields in (overrides or {}).items():
        if stage not in chosen:
            raise ValueError(
                f"no cost curve for stage `{stage}`; expected one of {', '.join(chosen)}"
            )
        if not isinstance(fields, Mapping):
            raise ValueError(f"the cost overrides of `{stage}` must be a table of fields")
        chosen[stage] = chosen[stage].with_fields(fields)
    return {
        stage: BatchedEngineModel(stage, curve, clock=clock, sleep=sleep)
        for stage, curve in chosen.items()
    }
