"""Continuous batching over a fixed set of KV slots: who runs in each engine step.

One model's batched transformers runtime (`batched_decode.py` executes, the engine loop
drives) serves up to `slots` requests at once, each in its own row of a static KV cache.
This module owns only the bookkeeping, sans-IO: it never sleeps, never touches a thread
or a tensor, and takes typed inputs and returns typed plans. The engine loop does

    plan = scheduler.plan()          # admit, free, choose this step's work
    ...run plan.prefill chunks and plan.decode rows, sample plan.sampled_slots...
    outcome = scheduler.commit(plan, {slot: token, ...})   # tokens out, finishes

What it owns:

- Admission: a FIFO queue of requests waiting for a slot, at most `max_waiting` long
  (`QueueFull` past it, a typed refusal; `PromptTooLong` for a prompt the slot cannot
  hold). A request takes, in order of preference, its session's kept slot, the lowest
  free slot, or the least recently used kept slot (evicting that session's KV).
- Per-slot state: free, kept (a finished session's KV, resident), prefilling (k of n
  prompt tokens written), decoding (one token a step); finished requests leave at once.
- The step plan: every decoding slot decodes one token (`DecodeRow`), and prefill chunks
  of at most `prefill_chunk_tokens` prompt tokens in all run in the same step
  (`PrefillChunk`), served round-robin over the prefilling slots, so a long prompt
  costs the decoding slots at most one chunk's forward per step (see
  `PREFILL_CHUNK_TOKENS`) instead of its whole prefill.
- Cancellation and completion: a cancelled request's slot is released by the next
  `plan()`; a request that stops (a stop token, `max_tokens`, the slot's `max_len`) is
  released by the `commit()` of the step that sampled its last token.
- Session KV kept between turns: a request with a `session` key leaves its slot kept
  for that key (one kept slot per session, the most recent). Every slot remembers the
  token ids whose KV it still holds, so a request placed in a slot reuses the longest
  common prefix of its prompt and those ids (its session's previous prompt and reply,
  when the conversation kept them as they were) and prefills only the rest. Ids are
  compared as given: an engine serving images gives each image's placeholders ids that
  name the image, so two frames never match as one.

Invariants (`tests/backends/test_gpu_slot_scheduler.py` checks them after every step of
random admit/cancel/step sequences):

1. Memory is bounded: `slots` slots, each holding at most `max_len` positions, and at
   most `max_waiting` requests queued.
2. FIFO, work-conserving admission: requests take slots in the order they were
   submitted, and after `plan()` a request waits only if every slot is busy
   (prefilling or decoding): a free or kept slot is always given to the queue's head.
3. No starvation: a prefilling slot gets a chunk in every step in which it is at the
   head of the rotation, and at most `prefilling - 1` others are ahead of it, so it
   gets one within `slots` steps; each step's chunks total at most
   `prefill_chunk_tokens` and at least one token while any slot is prefilling.
4. First token at once: the step whose chunk completes a prompt samples the request's
   first token (`PrefillChunk.last`: its slot is in `sampled_slots`), and the next
   step decodes it.
5. Cancellation within one step: after `cancel()`, the next plan names the request in
   `cancelled` and no slot holds it (its slot is free, or kept for its session).
6. Every decoding slot decodes in every step, at the position after its filled ones,
   which is always below `max_len`.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_SLOTS",
    "PREFILL_CHUNK_TOKENS",
    "AdmissionRefused",
    "DecodeRow",
    "Emitted",
    "FinishReason",
    "Finished",
    "PrefillChunk",
    "PromptTooLong",
    "QueueFull",
    "SlotAssignment",
    "SlotPhase",
    "SlotRequest",
    "SlotScheduler",
    "SlotView",
    "StepOutcome",
    "StepPlan",
    "shared_prefix",
]

#: rows of the batched KV cache: what one model's engine serves at once
DEFAULT_SLOTS: Final = 32

#: prompt tokens prefilled per engine step, all chunks together. A forward of a few
#: hundred tokens costs about what a one-token forward does on a large GPU (both read
#: every weight once) plus the tokens' matmuls: for an 8B model in bf16 on an H100/H200
#: (16 GFLOP a token, some 400 TFLOP/s achieved) 256 tokens are about 10 ms, so the
#: decoding slots' next token is held up by about one more step's time at most
PREFILL_CHUNK_TOKENS: Final = 256

#: requests waiting for a slot before `submit` refuses
DEFAULT_MAX_WAITING: Final = 256

#: a stop token (not emitted), the request's `max_tokens`, the slot's `max_len`; a
#: cancelled request is named in `StepPlan.cancelled` instead
FinishReason = Literal["stop", "max_tokens", "length"]


class SlotPhase(enum.Enum):
    FREE = "free"  # no request, no session (its old KV may still be reused by prefix)
    KEPT = "kept"  # no request; a session's KV, resident for its next turn
    PREFILLING = "prefilling"
    DECODING = "decoding"


class AdmissionRefused(Exception):
    """A request the scheduler will not take; the engine reports it to its caller."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"{request_id}: {reason}")
        self.request_id = request_id


class QueueFull(AdmissionRefused):
    """Every slot is busy and `max_waiting` requests already wait."""

    def __init__(self, request_id: str, limit: int) -> None:
        super().__init__(request_id, f"{limit} requests already wait for a slot")
        self.limit = limit


class PromptTooLong(AdmissionRefused):
    """The prompt leaves no position of the slot's `max_len` for a generated token."""

    def __init__(self, request_id: str, tokens: int, max_len: int) -> None:
        super().__init__(request_id, f"prompt of {tokens} tokens does not fit {max_len}")
        self.tokens = tokens
        self.max_len = max_len


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """One generation: its prompt's token ids, how many tokens it may generate, the ids
    that end it (not emitted), and the session whose KV its slot keeps afterwards."""

    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    stop_ids: frozenset[int] = frozenset()
    session: str | None = None


@dataclass(frozen=True, slots=True)
class SlotAssignment:
    """A request took `slot` this step; `reused` of its prompt tokens' KV the slot
    already holds (the decoder keeps them; the prefill starts after them)."""

    slot: int
    request_id: str
    reused: int
    evicted_session: str | None = None  # whose kept KV the request took the slot of


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Prompt tokens `tokens` of the request in `slot`, written at positions `start`..;
    `last`: they end the prompt, so the chunk's last logits give the first token."""

    slot: int
    request_id: str
    tokens: tuple[int, ...]
    start: int
    last: bool


@dataclass(frozen=True, slots=True)
class DecodeRow:
    """Feed `token` (sampled last step) to `slot` at `position`; sample the next."""

    slot: int
    request_id: str
    token: int
    position: int


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One engine step. The engine resets the sampling state of `assigned` slots, runs
    the `prefill` chunks and one forward over the `decode` rows, and samples one token
    for each of `sampled_slots` (decode rows first, then completed prompts)."""

    step: int
    cancelled: tuple[str, ...]
    assigned: tuple[SlotAssignment, ...]
    prefill: tuple[PrefillChunk, ...]
    decode: tuple[DecodeRow, ...]

    @property
    def sampled_slots(self) -> tuple[int, ...]:
        return tuple(row.slot for row in self.decode) + tuple(
            chunk.slot for chunk in self.prefill if chunk.last
        )

    @property
    def idle(self) -> bool:
        """Nothing to run (the engine waits for a submission)."""
        return not self.prefill and not self.decode


@dataclass(frozen=True, slots=True)
class Emitted:
    request_id: str
    token: int


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: str
    reason: FinishReason
    generated: int


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What a committed step produced: tokens to stream, requests that ended."""

    emitted: tuple[Emitted, ...] = ()
    finished: tuple[Finished, ...] = ()


@dataclass(frozen=True, slots=True)
class SlotView:
    """A slot as the tests and metrics see it."""

    index: int
    phase: SlotPhase
    request_id: str | None
    session: str | None
    filled: int  # positions whose KV the slot holds
    prompt_done: int  # of the request's prompt, tokens written (0 without a request)
    prompt_tokens: int


@dataclass(slots=True)
class _Slot:
    index: int
    phase: SlotPhase = SlotPhase.FREE
    request: SlotRequest | None = None
    #: ids whose KV rows hold, position by position: what a new prompt may reuse
    tokens: list[int] = field(default_factory=list)
    prompt_done: int = 0
    pending: int | None = None  # sampled, fed at the next decode
    generated: int = 0
    cancelled: bool = False
    session: str | None = None  # of a kept slot
    released_at: int = 0  # step of release: the LRU order of kept slots


def shared_prefix(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int:
    """How many leading ids `a` and `b` share (slices compared in C, then narrowed)."""
    n = min(len(a), len(b))
    low, high = 0, n  # a[:low] == b[:low]; the first difference is before `high`
    if tuple(a[:n]) == tuple(b[:n]):
        return n
    while high - low > 64:
        middle = (low + high) // 2
        if tuple(a[low:middle]) == tuple(b[low:middle]):
            low = middle
        else:
            high = middle
    while low < high and a[low] == b[low]:
        low += 1
    return low


class SlotScheduler:
    """Admission, slot states and step plans of one model's batch: see the module.

    Args:
        slots: rows of the batched KV cache.
        max_len: positions of one slot (prompt plus generated tokens).
        prefill_chunk_tokens: prompt tokens prefilled per step, all chunks together.
        max_waiting: queued requests before `submit` raises `QueueFull`.
        keep_sessions: leave a finished session's KV kept in its slot.
    """

    def __init__(
        self,
        *,
        slots: int = DEFAULT_SLOTS,
        max_len: int,
        prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS,
        max_waiting: int = DEFAULT_MAX_WAITING,
        keep_sessions: bool = True,
    ) -> None:
        if slots < 1 or max_len < 2 or prefill_chunk_tokens < 1 or max_waiting < 0:
            raise ValueError("slots, max_len, prefill_chunk_tokens or max_waiting too small")
        self.slots = slots
        self.max_len = max_len
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.max_waiting = max_waiting
        self.keep_sessions = keep_sessions
        self._slots = [_Slot(index) for index in range(slots)]
        self._waiting: deque[SlotRequest] = deque()
        self._by_request: dict[str, _Slot] = {}
        self._kept_for: dict[str, _Slot] = {}  # session -> its kept slot
        self._rotation: deque[_Slot] = deque()  # prefilling slots, next served first
        self._cancelled: list[str] = []  # taken out of the queue, reported by plan()
        self._step = 0
        self._in_flight: StepPlan | None = None

    # -- inputs ---------------------------------------------------------------------

    def submit(self, request: SlotRequest) -> None:
        """Queue `request` for a slot (it may take one at the next `plan()`)."""
        rid = request.request_id
        if not request.prompt:
            raise ValueError(f"{rid}: empty prompt")
        if request.max_tokens < 1:
            raise ValueError(f"{rid}: max_tokens must be at least 1")
        if rid in self._by_request or any(w.request_id == rid for w in self._waiting):
            raise ValueError(f"{rid}: a request of that id is already running")
        if len(request.prompt) >= self.max_len:
            raise PromptTooLong(rid, len(request.prompt), self.max_len)
        if len(self._waiting) >= self.max_waiting:
            raise QueueFull(rid, self.max_waiting)
        self._waiting.append(request)

    def cancel(self, request_id: str) -> bool:
        """Stop a request: a queued one leaves the queue now, a running one's slot is
        released by the next `plan()`. False for an unknown or finished request."""
        for request in self._waiting:
            if request.request_id == request_id:
                self._waiting.remove(request)
                self._cancelled.append(request_id)
                return True
        slot = self._by_request.get(request_id)
        if slot is None or slot.cancelled:
            return False
        slot.cancelled = True
        return True

    # -- the step -------------------------------------------------------------------

    def plan(self) -> StepPlan:
        """The next step: cancellations applied, queued requests admitted, the chunks
        and decode rows to run. `commit()` must follow before the next `plan()`."""
        if self._in_flight is not None:
            raise RuntimeError("the previous step was not committed")
        self._step += 1
        cancelled = self._cancelled
        self._cancelled = []
        for slot in self._slots:
            if slot.request is not None and slot.cancelled:
                cancelled.append(slot.request.request_id)
                self._release(slot)
        assigned = self._admit()
        plan = StepPlan(
            self._step,
            tuple(cancelled),
            tuple(assigned),
            self._chunks(),
            tuple(
                DecodeRow(slot.index, slot.request.request_id, slot.pending, len(slot.tokens))
                for slot in self._slots
                if slot.phase is SlotPhase.DECODING
                and slot.request is not None
                and slot.pending is not None
            ),
        )
        self._in_flight = plan
        return plan

    def commit(self, plan: StepPlan, sampled: Mapping[int, int]) -> StepOutcome:
        """The engine ran `plan` and sampled `sampled[slot]` for each of its
        `sampled_slots`: record the written KV, emit tokens, end finished requests."""
        if plan is not self._in_flight:
            raise RuntimeError("commit() takes the plan of the step in flight")
        missing = [s for s in plan.sampled_slots if s not in sampled]
        if missing:
            raise ValueError(f"no sampled token for slots {missing}")
        self._in_flight = None
        for chunk in plan.prefill:
            slot = self._slots[chunk.slot]
            slot.tokens.extend(chunk.tokens)
            slot.prompt_done += len(chunk.tokens)
            if chunk.last:
                slot.phase = SlotPhase.DECODING
        for row in plan.decode:
            self._slots[row.slot].tokens.append(row.token)
        emitted: list[Emitted] = []
        finished: list[Finished] = []
        for index in plan.sampled_slots:
            slot = self._slots[index]
            request = slot.request
            if request is None or slot.cancelled:
                continue  # released, and reported, by the next plan
            token = sampled[index]
            reason: FinishReason | None = None
            if token in request.stop_ids:
                reason = "stop"
            else:
                emitted.append(Emitted(request.request_id, token))
                slot.generated += 1
                slot.pending = token
                if slot.generated >= request.max_tokens:
                    reason = "max_tokens"
                elif len(slot.tokens) >= self.max_len:
                    reason = "length"  # no position left to write the token's KV
            if reason is not None:
                finished.append(Finished(request.request_id, reason, slot.generated))
                self._release(slot)
        return StepOutcome(tuple(emitted), tuple(finished))

    def drain(self) -> tuple[str, ...]:
        """End every request (the engine's step failed): ids of those running or
        queued, every slot free and forgetting its KV, nothing in flight."""
        ended = [slot.request.request_id for slot in self._slots if slot.request is not None]
        ended += [request.request_id for request in self._waiting]
        ended += self._cancelled
        self._slots = [_Slot(index) for index in range(self.slots)]
        self._waiting.clear()
        self._by_request.clear()
        self._kept_for.clear()
        self._rotation.clear()
        self._cancelled = []
        self._in_flight = None
        return tuple(ended)

    # -- views ----------------------------------------------------------------------

    def waiting(self) -> tuple[str, ...]:
        """Queued request ids, head first."""
        return tuple(request.request_id for request in self._waiting)

    def slot_views(self) -> tuple[SlotView, ...]:
        return tuple(
            SlotView(
                slot.index,
                slot.phase,
                None if slot.request is None else slot.request.request_id,
                slot.session if slot.request is None else slot.request.session,
                len(slot.tokens),
                slot.prompt_done if slot.request is not None else 0,
                0 if slot.request is None else len(slot.request.prompt),
            )
            for slot in self._slots
        )

    def slot_tokens(self, index: int) -> tuple[int, ...]:
        """The ids whose KV slot `index` holds, in position order."""
        return tuple(self._slots[index].tokens)

    @property
    def busy(self) -> bool:
        """Any request queued or running."""
        return bool(self._waiting or self._by_request or self._cancelled)

    # -- policy ---------------------------------------------------------------------

    def _release(self, slot: _Slot) -> None:
        """The slot's request ends: the slot is kept for its session, or free. Its ids
        stay either way (the KV is still there until something overwrites it)."""
        request = slot.request
        assert request is not None
        del self._by_request[request.request_id]
        if slot in self._rotation:
            self._rotation.remove(slot)
        slot.request = None
        slot.pending = None
        slot.cancelled = False
        slot.generated = 0
        slot.prompt_done = 0
        slot.released_at = self._step
        session = request.session if self.keep_sessions else None
        if session is None:
            slot.phase, slot.session = SlotPhase.FREE, None
            return
        older = self._kept_for.get(session)
        if older is not None and older is not slot:
            older.phase, older.session = SlotPhase.FREE, None
        slot.phase, slot.session = SlotPhase.KEPT, session
        self._kept_for[session] = slot

    def _place(self, request: SlotRequest) -> tuple[_Slot, str | None] | None:
        """The slot for the queue's head: its session's kept one, the lowest free one,
        else the least recently used kept one (whose session loses its KV)."""
        if request.session is not None:
            own = self._kept_for.get(request.session)
            if own is not None:
                return own, None
        for slot in self._slots:
            if slot.phase is SlotPhase.FREE:
                return slot, None
        kept = [slot for slot in self._slots if slot.phase is SlotPhase.KEPT]
        if not kept:
            return None
        oldest = min(kept, key=lambda slot: (slot.released_at, slot.index))
        return oldest, oldest.session

    def _admit(self) -> list[SlotAssignment]:
        assigned = []
        while self._waiting:
            placed = self._place(self._waiting[0])
            if placed is None:
                break  # every slot busy: nobody behind the head can have one either
            request = self._waiting.popleft()
            slot, evicted = placed
            if slot.session is not None:
                del self._kept_for[slot.session]
                slot.session = None
            # the prompt's last token is always prefilled: its logits start the reply
            reused = min(shared_prefix(slot.tokens, request.prompt), len(request.prompt) - 1)
            del slot.tokens[reused:]
            slot.phase = SlotPhase.PREFILLING
            slot.request = request
            slot.prompt_done = reused
            self._by_request[request.request_id] = slot
            self._rotation.append(slot)
            assigned.append(SlotAssignment(slot.index, request.request_id, reused, evicted))
        return assigned

    def _chunks(self) -> tuple[PrefillChunk, ...]:
        """Chunks totalling at most `prefill_chunk_tokens`, round-robin: each served
        slot goes to the back of the rotation, the others keep their turn."""
        budget = self.prefill_chunk_tokens
        chunks = []
        for _ in range(len(self._rotation)):
            if budget == 0:
                break
            slot = self._rotation.popleft()
            request = slot.request
            assert request is not None
            start = slot.prompt_done
            take = min(budget, len(request.prompt) - start)
            budget -= take
            last = start + take == len(request.prompt)
            chunks.append(
                PrefillChunk(
                    slot.index,
                    request.request_id,
                    request.prompt[start : start + take],
                    start,
                    last,
                )
            )
            if not last:
                self._rotation.append(slot)
        return tuple(chunks)
