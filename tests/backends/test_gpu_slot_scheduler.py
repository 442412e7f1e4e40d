"""The continuous-batching scheduler of the batched transformers runtime
(`backends/gpu/slot_scheduler.py`), as bookkeeping: FIFO admission into a fixed set of
slots, chunked prefill between decode steps served round-robin, cancellation, session
slots kept and reused by prefix, evicted least recently used, and a bounded queue.

No torch and no time: the "engine" here is a loop that samples made-up tokens, so every
step is exact. A Hypothesis state machine drives random submit / cancel / step
sequences and checks the module's invariants after each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from backends.gpu.slot_scheduler import (
    PREFILL_CHUNK_TOKENS,
    PromptTooLong,
    QueueFull,
    SlotPhase,
    SlotRequest,
    SlotScheduler,
    StepOutcome,
    StepPlan,
    shared_prefix,
)

STOP = 0


def _request(
    rid: str, prompt_len: int, max_tokens: int = 4, *, session: str | None = None, base: int = 100
) -> SlotRequest:
    prompt = tuple(range(base, base + prompt_len))
    return SlotRequest(rid, prompt, max_tokens, frozenset({STOP}), session)


def _step(scheduler: SlotScheduler, token: int = 7) -> tuple[StepPlan, StepOutcome]:
    """One engine step whose sampler always picks `token`."""
    plan = scheduler.plan()
    outcome = scheduler.commit(plan, dict.fromkeys(plan.sampled_slots, token))
    return plan, outcome


def _run_until_idle(scheduler: SlotScheduler, limit: int = 1000) -> list[StepPlan]:
    plans = []
    for _ in range(limit):
        plan, _ = _step(scheduler)
        plans.append(plan)
        if not scheduler.busy:
            return plans
    raise AssertionError("the scheduler never went idle")


def test_the_default_chunk_is_a_few_hundred_tokens() -> None:
    assert 128 <= PREFILL_CHUNK_TOKENS <= 512
    assert SlotScheduler(max_len=64).slots == 32


def test_requests_beyond_the_slots_wait_in_fifo_order() -> None:
    scheduler = SlotScheduler(slots=2, max_len=64)
    for index in range(5):
        scheduler.submit(_request(f"r{index}", 3, max_tokens=2 + index))
    first = scheduler.plan()
    assert [a.request_id for a in first.assigned] == ["r0", "r1"]
    assert [a.slot for a in first.assigned] == [0, 1]
    assert scheduler.waiting() == ("r2", "r3", "r4")
    scheduler.commit(first, dict.fromkeys(first.sampled_slots, 7))
    admitted = [a.request_id for plan in _run_until_idle(scheduler) for a in plan.assigned]
    assert admitted == ["r2", "r3", "r4"]


def test_a_long_prompt_is_prefilled_in_chunks_between_decode_steps() -> None:
    scheduler = SlotScheduler(slots=2, max_len=64, prefill_chunk_tokens=4)
    scheduler.submit(_request("short", 2, max_tokens=20))
    plan, _ = _step(scheduler)  # the short prompt in one chunk, its first token sampled
    assert [(c.request_id, c.start, len(c.tokens), c.last) for c in plan.prefill] == [
        ("short", 0, 2, True)
    ]
    assert plan.sampled_slots == (0,)
    scheduler.submit(_request("long", 10, max_tokens=3, base=200))
    seen = []
    for _ in range(3):
        plan, outcome = _step(scheduler)
        # the decoding slot decodes in every step the long prompt is prefilled in
        assert [row.request_id for row in plan.decode] == ["short"]
        seen.append([(c.start, len(c.tokens), c.last) for c in plan.prefill])
    assert seen == [[(0, 4, False)], [(4, 4, False)], [(8, 2, True)]]
    # the step that completed the prompt sampled its first token ...
    assert plan.sampled_slots == (0, 1)
    assert [e.request_id for e in outcome.emitted] == ["short", "long"]
    # ... and the next one decodes it, at the position after the prompt
    plan, _ = _step(scheduler)
    assert [(row.request_id, row.position) for row in plan.decode] == [
        ("short", 2 + 3),
        ("long", 10),
    ]
    assert plan.prefill == ()


def test_short_prompts_share_one_step_s_chunk_budget() -> None:
    scheduler = SlotScheduler(slots=4, max_len=64, prefill_chunk_tokens=8)
    for index, length in enumerate((3, 3, 5)):
        scheduler.submit(_request(f"r{index}", length))
    plan, _ = _step(scheduler)
    assert [(c.request_id, len(c.tokens), c.last) for c in plan.prefill] == [
        ("r0", 3, True),
        ("r1", 3, True),
        ("r2", 2, False),  # the rest of the budget
    ]


def test_every_prefilling_slot_gets_a_chunk_within_n_steps() -> None:
    slots = 4
    scheduler = SlotScheduler(slots=slots, max_len=128, prefill_chunk_tokens=3)
    for index in range(slots):
        scheduler.submit(_request(f"r{index}", 20 + index, base=10 * index))
    last_served: dict[str, int] = {}
    completed = set()
    for step in range(1, 40):
        plan, _ = _step(scheduler)
        assert sum(len(c.tokens) for c in plan.prefill) <= 3
        for chunk in plan.prefill:
            last_served[chunk.request_id] = step
            if chunk.last:
                completed.add(chunk.request_id)
        for view in scheduler.slot_views():
            if view.phase is SlotPhase.PREFILLING and view.request_id is not None:
                assert step - last_served.get(view.request_id, 0) < slots
    assert completed == {f"r{index}" for index in range(slots)}


def test_a_cancelled_request_frees_its_slot_at_the_next_step() -> None:
    scheduler = SlotScheduler(slots=1, max_len=64)
    scheduler.submit(_request("a", 3, max_tokens=50))
    scheduler.submit(_request("b", 3, max_tokens=50))
    _step(scheduler)
    _step(scheduler)
    assert scheduler.waiting() == ("b",)
    assert scheduler.cancel("a")
    plan, _ = _step(scheduler)
    assert plan.cancelled == ("a",)
    assert [(a.slot, a.request_id) for a in plan.assigned] == [(0, "b")]
    assert not scheduler.cancel("a")  # finished: a no-op
    # cancelled while its step is in flight: nothing more is emitted for it
    plan = scheduler.plan()
    assert scheduler.cancel("b")
    outcome = scheduler.commit(plan, dict.fromkeys(plan.sampled_slots, 7))
    assert outcome.emitted == ()
    plan, _ = _step(scheduler)
    assert plan.cancelled == ("b",)
    assert not scheduler.busy
    assert scheduler.slot_views()[0].phase is SlotPhase.FREE


def test_a_queued_request_cancelled_never_takes_a_slot() -> None:
    scheduler = SlotScheduler(slots=1, max_len=64)
    scheduler.submit(_request("a", 3))
    scheduler.submit(_request("b", 3))
    assert scheduler.cancel("b")
    assert scheduler.waiting() == ("a",)
    plan, _ = _step(scheduler)
    assert plan.cancelled == ("b",)
    assert [a.request_id for a in plan.assigned] == ["a"]


def test_a_kept_session_slot_is_reused_for_its_next_prompt_and_evicted_lru() -> None:
    scheduler = SlotScheduler(slots=2, max_len=128)
    scheduler.submit(_request("s1-turn1", 10, max_tokens=3, session="s1"))
    plans = _run_until_idle(scheduler)
    [slot] = [a.slot for a in plans[0].assigned]
    view = scheduler.slot_views()[slot]
    assert (view.phase, view.session) == (SlotPhase.KEPT, "s1")
    # the prompt and the tokens the decode wrote (the last sampled one never was)
    prompt = tuple(range(100, 110))
    assert scheduler.slot_tokens(slot) == (*prompt, 7, 7)
    # the next turn begins with the previous prompt and its reply
    turn2 = SlotRequest("s1-turn2", (*prompt, 7, 7, 7, 1, 2, 3), 2, frozenset({STOP}), "s1")
    scheduler.submit(turn2)
    plan, _ = _step(scheduler)
    [assignment] = plan.assigned
    assert (assignment.slot, assignment.reused) == (slot, 12)
    assert [(c.start, len(c.tokens)) for c in plan.prefill] == [(12, 4)]  # only the rest
    _run_until_idle(scheduler)
    # a second session keeps the other slot; a third evicts the least recently used
    scheduler.submit(_request("s2", 5, max_tokens=1, session="s2", base=300))
    _run_until_idle(scheduler)
    assert {v.session for v in scheduler.slot_views()} == {"s1", "s2"}
    scheduler.submit(_request("s3", 5, max_tokens=1, session="s3", base=400))
    plan, _ = _step(scheduler)
    [assignment] = plan.assigned
    assert (assignment.slot, assignment.evicted_session, assignment.reused) == (slot, "s1", 0)
    _run_until_idle(scheduler)
    assert {v.session for v in scheduler.slot_views()} == {"s2", "s3"}


def test_a_session_s_next_prompt_that_differs_reuses_only_the_shared_prefix() -> None:
    scheduler = SlotScheduler(slots=1, max_len=64)
    scheduler.submit(_request("t1", 8, max_tokens=1, session="s"))
    _run_until_idle(scheduler)
    edited = (*range(100, 105), 50, 51)  # history rewritten after its fifth token
    scheduler.submit(SlotRequest("t2", edited, 1, frozenset(), "s"))
    plan, _ = _step(scheduler)
    assert plan.assigned[0].reused == 5
    # a prompt equal to the kept ids still prefills its last token (its logits)
    _run_until_idle(scheduler)
    scheduler.submit(SlotRequest("t3", edited, 1, frozenset(), "s"))
    plan, _ = _step(scheduler)
    assert plan.assigned[0].reused == len(edited) - 1
    assert [(c.start, c.tokens) for c in plan.prefill] == [(6, (51,))]


def test_a_full_queue_refuses_with_a_typed_error() -> None:
    scheduler = SlotScheduler(slots=1, max_len=16, max_waiting=2)
    scheduler.submit(_request("a", 3))
    scheduler.submit(_request("b", 3))
    with pytest.raises(QueueFull) as refused:
        scheduler.submit(_request("c", 3))
    assert (refused.value.request_id, refused.value.limit) == ("c", 2)
    _step(scheduler)  # "a" takes the slot: room for one more
    scheduler.submit(_request("c", 3))
    with pytest.raises(PromptTooLong):
        scheduler.submit(_request("d", 16))
    with pytest.raises(ValueError, match="already running"):
        scheduler.submit(_request("a", 3))


def test_a_request_stops_at_a_stop_token_at_max_tokens_or_at_the_slot_end() -> None:
    scheduler = SlotScheduler(slots=3, max_len=8)
    scheduler.submit(_request("stop", 2, max_tokens=10))
    scheduler.submit(_request("max", 2, max_tokens=2, base=200))
    scheduler.submit(_request("length", 5, max_tokens=10, base=300))
    finished = {}
    emitted: dict[str, int] = {}
    for step in range(10):
        plan = scheduler.plan()
        tokens = {slot: 7 for slot in plan.sampled_slots}
        if step == 3:
            tokens[0] = STOP
        outcome = scheduler.commit(plan, tokens)
        for token in outcome.emitted:
            emitted[token.request_id] = emitted.get(token.request_id, 0) + 1
        finished.update({f.request_id: (f.reason, f.generated) for f in outcome.finished})
    assert finished == {"stop": ("stop", 3), "max": ("max_tokens", 2), "length": ("length", 4)}
    assert emitted == {"stop": 3, "max": 2, "length": 4}


def test_shared_prefix_finds_the_first_difference() -> None:
    a = list(range(1000))
    for cut in (0, 1, 63, 64, 65, 500, 999):
        b = [*a[:cut], -1, *a[cut + 1 :]]
        assert shared_prefix(a, b) == cut
    assert shared_prefix(a, a[:300]) == 300
    assert shared_prefix((), (1,)) == 0


@dataclass
class _Tracked:
    request: SlotRequest
    emitted: list[int] = field(default_factory=list)


class SchedulerMachine(RuleBasedStateMachine):
    """Random submissions, cancellations and steps; the invariants after each step."""

    @initialize(
        slots=st.integers(1, 4),
        chunk=st.integers(1, 6),
        max_len=st.integers(4, 24),
        max_waiting=st.integers(0, 5),
    )
    def start(self, slots: int, chunk: int, max_len: int, max_waiting: int) -> None:
        self.scheduler = SlotScheduler(
            slots=slots, max_len=max_len, prefill_chunk_tokens=chunk, max_waiting=max_waiting
        )
        self.tracked: dict[str, _Tracked] = {}
        self.queue: list[str] = []  # what FIFO admission must follow
        self.running: set[str] = set()
        self.cancel_pending: set[str] = set()
        self.last_chunk: dict[str, int] = {}
        self.to_decode: set[str] = set()
        self.steps = 0
        self.next_id = 0

    @rule(
        length=st.integers(1, 12),
        alphabet=st.integers(1, 3),
        max_tokens=st.integers(1, 5),
        session=st.sampled_from([None, "a", "b", "c"]),
        data=st.data(),
    )
    def submit(
        self, length: int, alphabet: int, max_tokens: int, session: str | None, data: st.DataObject
    ) -> None:
        # a small alphabet: prompts share prefixes, so slots' kept ids get reused
        prompt = tuple(
            data.draw(st.lists(st.integers(1, alphabet), min_size=length, max_size=length))
        )
        rid = f"r{self.next_id}"
        self.next_id += 1
        request = SlotRequest(rid, prompt, max_tokens, frozenset({STOP}), session)
        try:
            self.scheduler.submit(request)
        except QueueFull:
            assert len(self.scheduler.waiting()) == self.scheduler.max_waiting
            return
        except PromptTooLong:
            assert length >= self.scheduler.max_len
            return
        self.tracked[rid] = _Tracked(request)
        self.queue.append(rid)

    @precondition(lambda self: bool(self.queue or self.running))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted({*self.queue, *self.running})))
        was_cancelled = rid in self.cancel_pending
        assert self.scheduler.cancel(rid) is not was_cancelled
        if rid in self.queue:
            self.queue.remove(rid)
        self.cancel_pending.add(rid)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        scheduler = self.scheduler
        self.steps += 1
        plan = scheduler.plan()
        views = scheduler.slot_views()
        holding = {v.request_id for v in views if v.request_id is not None}
        # 5. cancellations take effect at this plan
        assert set(plan.cancelled) == self.cancel_pending
        assert not holding & self.cancel_pending
        assert not set(scheduler.waiting()) & self.cancel_pending
        self.running -= self.cancel_pending
        self.to_decode -= self.cancel_pending
        self.cancel_pending = set()
        # 2. FIFO admission, and nobody waits while a slot is free or kept
        admitted = [a.request_id for a in plan.assigned]
        assert admitted == self.queue[: len(admitted)]
        del self.queue[: len(admitted)]
        assert list(scheduler.waiting()) == self.queue
        if self.queue:
            assert all(v.phase in (SlotPhase.PREFILLING, SlotPhase.DECODING) for v in views)
        for assignment in plan.assigned:
            prompt = self.tracked[assignment.request_id].request.prompt
            assert assignment.reused < len(prompt)
            assert scheduler.slot_tokens(assignment.slot) == prompt[: assignment.reused]
            self.running.add(assignment.request_id)
            self.last_chunk[assignment.request_id] = self.steps  # waiting for its first
        # 6. every decoding slot decodes, after its filled positions, inside the slot
        decoding = {v.index for v in views if v.phase is SlotPhase.DECODING}
        assert {row.slot for row in plan.decode} == decoding
        assert {row.request_id for row in plan.decode} >= self.to_decode  # 4.
        for row in plan.decode:
            assert row.position == views[row.slot].filled < scheduler.max_len
            tracked = self.tracked[row.request_id]
            assert row.token == tracked.emitted[-1]
            expected = (*tracked.request.prompt, *tracked.emitted[:-1])
            assert scheduler.slot_tokens(row.slot) == expected
        # 3. chunks: within the budget, progressing, and nobody starves
        total = sum(len(c.tokens) for c in plan.prefill)
        assert total <= scheduler.prefill_chunk_tokens
        prefilling = [v for v in views if v.phase is SlotPhase.PREFILLING]
        assert (total > 0) == bool(prefilling)
        assert len({c.slot for c in plan.prefill}) == len(plan.prefill)
        for chunk in plan.prefill:
            view = views[chunk.slot]
            prompt = self.tracked[chunk.request_id].request.prompt
            assert chunk.start == view.prompt_done
            assert chunk.tokens == prompt[chunk.start : chunk.start + len(chunk.tokens)]
            assert chunk.last == (chunk.start + len(chunk.tokens) == len(prompt))
            self.last_chunk[chunk.request_id] = self.steps
        for view in prefilling:
            assert view.request_id is not None
            assert self.steps - self.last_chunk[view.request_id] < scheduler.slots
        # 4. a completed prompt's first token is sampled in the same step
        assert {c.slot for c in plan.prefill if c.last} <= set(plan.sampled_slots)
        tokens = {
            slot: data.draw(st.integers(0, 3), label=f"token@{slot}") for slot in plan.sampled_slots
        }
        outcome = scheduler.commit(plan, tokens)
        slot_of = {v.request_id: v.index for v in views}
        self.to_decode = set()
        emitted = {e.request_id: e.token for e in outcome.emitted}
        for rid, token in emitted.items():
            self.tracked[rid].emitted.append(token)
            assert token != STOP
        ended = {f.request_id: f for f in outcome.finished}
        for rid in self.running:
            if rid in ended or slot_of.get(rid) not in tokens:
                continue
            assert rid in emitted  # sampled, not stopped: streamed
            self.to_decode.add(rid)
        for rid, finished in ended.items():
            tracked = self.tracked[rid]
            assert finished.generated == len(tracked.emitted)
            if finished.reason == "stop":
                assert tokens[slot_of[rid]] == STOP
            elif finished.reason == "max_tokens":
                assert len(tracked.emitted) == tracked.request.max_tokens
            else:
                filled = len(tracked.request.prompt) + len(tracked.emitted) - 1
                assert filled == scheduler.max_len
            self.running.discard(rid)

    @invariant()
    def memory_is_bounded(self) -> None:
        scheduler = self.scheduler
        views = scheduler.slot_views()
        assert len(views) == scheduler.slots
        assert len(scheduler.waiting()) <= scheduler.max_waiting
        assert all(v.filled <= scheduler.max_len for v in views)
        sessions = [v.session for v in views if v.phase is SlotPhase.KEPT]
        assert len(sessions) == len(set(sessions))  # one kept slot per session
        holding = [v.request_id for v in views if v.request_id is not None]
        assert len(holding) == len(set(holding))
        assert not set(holding) & set(scheduler.waiting())


SchedulerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_scheduler_invariants_hold_under_random_traffic = SchedulerMachine.TestCase
