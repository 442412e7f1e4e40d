"""The scripted backend's batched GPU cost model (backends/scripted/cost_model.py): one
engine step serves every active request of a stage, at a cost that grows with the batch.

Time is a fake clock (`FakeClock`): the engine sleeps on it and reads it, and a test moves
it; every assertion is on the steps the engine recorded (batches, who joined, their
durations as the curve says) or on virtual time, never on elapsed seconds.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from pathlib import Path

import anyio
import anyio.lowlevel
import numpy as np
import pytest

from backends.base import (
    AsrRequest,
    BackendUnavailable,
    PromptContext,
    TtsRequest,
    VlmDecisionResult,
    VlmRequest,
)
from backends.registry import load_backend
from backends.scripted.backend import create_backend, script_of
from backends.scripted.cost_model import (
    COST_PROFILES,
    BatchedEngineModel,
    CostCurve,
    EngineRequest,
    engine_models,
)
from backends.scripted.script import Script
from backends.scripted.stages import ScriptedAsr, ScriptedTts, ScriptedVlm
from transport.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEVICE_CHECK = ROOT / "docs/measurements/gpu-device-check-h200-2026-11-30.json"

CURVE = CostCurve(
    base_s=0.010, per_item_s=0.001, prefill_s=0.100, prefill_per_item_s=0.010, max_batch=8
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    """Virtual time for the engine: `sleep` waits until `advance`/`run` moves the time to
    its deadline; `run` lets every task go as far as it can before each jump."""

    def __init__(self, *, late_s: float = 0.0) -> None:
        self.now = 0.0
        self.late_s = late_s  # each read of the clock moves it on: a loop running late
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        now = self.now
        self.now += self.late_s
        return now

    @property
    def sleeping(self) -> int:
        """How many tasks sleep on this clock now."""
        return len(self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds < 0:  # as anyio.sleep
            raise ValueError("delay must be a non-negative number")
        entry = (self.now + seconds, next(self._order), anyio.Event())
        heapq.heappush(self._sleepers, entry)
        try:
            await entry[2].wait()
        finally:
            if entry in self._sleepers:  # cancelled before its deadline
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)

    async def run(self, until: float = math.inf) -> None:
        """Jump from deadline to deadline up to `until` (to the last one when infinite),
        letting the tasks settle before and after each jump."""
        while True:
            await _settle()
            if not self._sleepers or self._sleepers[0][0] > until:
                break
            deadline, _, event = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            event.set()
        if math.isfinite(until):
            self.now = max(self.now, until)
        await _settle()


async def _settle() -> None:
    """Let every woken task run on (asyncio runs ready tasks in order: a few rounds do)."""
    for _ in range(50):
        await anyio.lowlevel.checkpoint()


def _engine(clock: FakeClock, curve: CostCurve = CURVE) -> BatchedEngineModel:
    return BatchedEngineModel("vlm", curve, clock=clock, sleep=clock.sleep)


async def _consume(
    request: EngineRequest, got: list[tuple[str, int, float]], clock: FakeClock
) -> None:
    """Wait for every item of `request`, noting (id, item, virtual time) as each is ready."""
    try:
        for index in range(request.items):
            if not await request.ready(index):
                got.append((request.request_id, -1, clock.now))
                return
            got.append((request.request_id, index, clock.now))
    finally:
        request.leave()


# --- the engine ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_step_serves_every_active_request_at_the_batch_cost() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(_consume, engine.join(name, 2), got, clock)
        await clock.run()
    steps = list(engine.steps)
    assert [s.batch for s in steps] == [("a", "b", "c"), ("a", "b", "c")]
    assert [s.joined for s in steps] == [("a", "b", "c"), ()]
    assert steps[0].duration_s == pytest.approx(CURVE.step_s(3, 3))
    assert steps[0].duration_s == pytest.approx(0.010 + 2 * 0.001 + 0.100 + 2 * 0.010)
    assert steps[1].duration_s == pytest.approx(0.010 + 2 * 0.001)
    # every request's item is ready at the end of the step that served it, together
    assert {(name, index) for name, index, _ in got} == {
        (n, i) for n in ("a", "b", "c") for i in (0, 1)
    }
    for index, step in enumerate(steps):
        assert [at for _, i, at in got if i == index] == [pytest.approx(step.end)] * 3
    assert engine.active == [] and not engine.waiting


@pytest.mark.anyio
async def test_requests_beyond_max_batch_wait_their_turn_in_order() -> None:
    clock = FakeClock()
    curve = CostCurve(base_s=0.010, per_item_s=0.002, max_batch=2, steps_per_item=2)
    engine = _engine(clock, curve)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(_consume, engine.join(f"r{i}", 1), got, clock)
        await clock.run()
    assert [s.batch for s in engine.steps] == [
        ("r0", "r1"),
        ("r0", "r1"),
        ("r2", "r3"),
        ("r2", "r3"),
        ("r4",),
        ("r4",),
    ]
    assert [s.joined for s in engine.steps if s.joined] == [("r0", "r1"), ("r2", "r3"), ("r4",)]
    assert max(len(s.batch) for s in engine.steps) == curve.max_batch
    assert [name for name, _, _ in got] == ["r0", "r1", "r2", "r3", "r4"]


@pytest.mark.anyio
async def test_a_request_joining_mid_stream_is_served_at_the_next_step() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 5), got, clock)
        first = CURVE.step_s(1, 1)
        await clock.run(until=first + CURVE.step_s(1) / 2)  # in the middle of step 1
        tg.start_soon(_consume, engine.join("b", 2), got, clock)
        await clock.run()
    steps = list(engine.steps)
    assert [s.batch for s in steps] == [
        ("a",),
        ("a",),
        ("a", "b"),
        ("a", "b"),
        ("a",),
    ]
    assert steps[2].joined == ("b",)
    assert steps[2].start == pytest.approx(steps[1].end)  # the next boundary, not at once
    assert steps[2].duration_s == pytest.approx(CURVE.step_s(2, 1))
    assert steps[3].duration_s == pytest.approx(CURVE.step_s(2))
    assert [(n, i) for n, i, _ in got if n == "b"] == [("b", 0), ("b", 1)]


@pytest.mark.anyio
async def test_a_cancelled_request_leaves_the_batch_at_the_next_step() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 6), got, clock)
        tg.start_soon(_consume, engine.join("b", 6), got, clock)
        first = CURVE.step_s(2, 2)
        await clock.run(until=first + CURVE.step_s(2) / 2)  # in the middle of step 1
        engine.cancel("b")
        await _settle()
        assert ("b", -1, clock.now) in got  # its waiter hears it at once
        await clock.run()
    assert engine.idle and engine.active == []
    steps = list(engine.steps)
    assert [s.batch for s in steps] == [("a", "b"), ("a", "b"), *[("a",)] * 4]
    assert steps[2].duration_s == pytest.approx(CURVE.step_s(1))  # the batch cost of one
    assert [i for n, i, _ in got if n == "a"] == [0, 1, 2, 3, 4, 5]


@pytest.mark.anyio
async def test_a_cancelled_step_task_hands_the_step_over_to_another_waiter() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    got: list[tuple[str, int, float]] = []
    first_waiter = anyio.CancelScope()

    async def consume_a() -> None:
        with first_waiter:
            await _consume(engine.join("a", 3), got, clock)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume_a)
        await _settle()  # a waits first: it is the step task, asleep until step 0 ends
        tg.start_soon(_consume, engine.join("b", 3), got, clock)
        await clock.run(until=CURVE.step_s(1, 1) / 2)
        first_waiter.cancel()  # a's task is cancelled in its sleep: b sleeps on
        await clock.run()
    assert [n for n, _, _ in got] == ["b", "b", "b"]
    assert [s.batch for s in engine.steps] == [("a",), ("b",), ("b",), ("b",)]
    assert engine.steps[1].start == pytest.approx(CURVE.step_s(1, 1))  # step 0 kept its time


@pytest.mark.anyio
async def test_a_step_that_ended_on_the_way_to_its_sleep_is_not_slept_on() -> None:
    clock = FakeClock(late_s=0.004)  # 4 ms per read against 10 ms steps: some end early
    engine = _engine(clock)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 20), got, clock)
        await clock.run()
    assert [i for _, i, _ in got] == list(range(20))
    assert [s.batch for s in engine.steps] == [("a",)] * 20


@pytest.mark.anyio
async def test_the_engine_keeps_its_pace_while_a_consumer_is_busy() -> None:
    clock = FakeClock()
    engine = _engine(clock)
    request = engine.join("a", 4)
    async with anyio.create_task_group() as tg:
        result: list[bool] = []

        async def first_item() -> None:
            result.append(await request.ready(0))

        tg.start_soon(first_item)
        await clock.run()
    assert result == [True]
    assert clock.now == pytest.approx(engine.steps[0].end)
    assert clock.sleeping == 0  # nobody waits: no step task sleeps
    clock.now += 1.0  # the consumer was busy for a second: the engine ran on meanwhile
    assert await request.ready(3)  # at once: its steps were served in that second
    assert engine.steps_run == 4 and request.done
    assert [s.batch for s in engine.steps] == [("a",)] * 4
    assert engine.steps[-1].end <= clock.now


@pytest.mark.anyio
async def test_no_request_starves_while_others_keep_arriving() -> None:
    clock = FakeClock()
    curve = CostCurve(base_s=0.010, per_item_s=0.001, prefill_s=0.02, max_batch=3)
    engine = _engine(clock, curve)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(_consume, engine.join(f"r{i:02}", 1 + i % 4), got, clock)
            await clock.run(until=clock.now + 0.007)
        await clock.run()
    finished = {n for n, i, _ in got if i == int(n[1:]) % 4}
    assert finished == {f"r{i:02}" for i in range(30)}
    admitted = [name for step in engine.steps for name in step.joined]
    assert admitted == sorted(admitted)  # FIFO: in the order they arrived
    assert max(len(s.batch) for s in engine.steps) == 3
    for step in engine.steps:  # each step's time is its batch's alone
        assert step.duration_s == pytest.approx(curve.step_s(len(step.batch), len(step.joined)))


@pytest.mark.anyio
async def test_a_first_item_costs_its_own_steps_then_each_item_its_steps() -> None:
    clock = FakeClock()
    curve = CostCurve(base_s=0.010, first_item_steps=3, steps_per_item=2, max_batch=4)
    engine = _engine(clock, curve)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 3), got, clock)
        await clock.run()
    steps = list(engine.steps)
    assert len(steps) == curve.steps_for(3) == 3 + 2 + 2
    # items ready at the ends of steps 3, 5 and 7
    assert [at for _, _, at in got] == [pytest.approx(steps[i].end) for i in (2, 4, 6)]


@pytest.mark.anyio
async def test_a_request_in_its_host_work_stalls_no_step_and_joins_after_it() -> None:
    clock = FakeClock()
    curve = CostCurve(base_s=0.010, prefill_s=0.005, admit_s=0.025, max_batch=4)
    engine = _engine(clock, curve)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 6), got, clock)
        await clock.run(until=curve.admit_s + curve.step_s(1, 1))  # a's first step ended
        tg.start_soon(_consume, engine.join("b", 1), got, clock)
        await clock.run()
    steps = list(engine.steps)
    assert steps[0].start == pytest.approx(curve.admit_s)  # alone: its host work first
    joined_at = next(s for s in steps if "b" in s.joined)
    # b's host work ran beside a's steps, each of them at a's batch-1 cost
    for step in steps[: steps.index(joined_at)]:
        assert step.batch == ("a",)
        assert step.duration_s == pytest.approx(curve.step_s(1, len(step.joined)))
    assert joined_at.start >= steps[0].end + curve.admit_s  # in the queue only after it
    assert joined_at.start == pytest.approx(steps[steps.index(joined_at) - 1].end)
    assert {n for n, i, _ in got if i >= 0} == {"a", "b"}


@pytest.mark.anyio
async def test_a_request_leaving_in_its_host_work_never_joins() -> None:
    clock = FakeClock()
    curve = CostCurve(base_s=0.010, admit_s=0.050, max_batch=4)
    engine = _engine(clock, curve)
    got: list[tuple[str, int, float]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_consume, engine.join("a", 2), got, clock)
        await clock.run(until=0.020)
        engine.cancel("a")
        await _settle()
        await clock.run()
    assert [(n, i) for n, i, _ in got] == [("a", -1)]  # it heard it at once, in its host work
    assert got[0][2] == pytest.approx(0.020)
    assert engine.steps_run == 0 and engine.idle and not engine.active


def test_a_first_output_alone_is_host_work_prefill_and_the_first_items_steps() -> None:
    curve = CostCurve(base_s=0.010, prefill_s=0.004, first_item_steps=2, admit_s=0.1)
    assert curve.first_output_s() == pytest.approx(0.1 + 0.014 + 0.010)
    assert curve.steps_for(1) == 2 and curve.steps_for(4) == 5
    plain = CostCurve(base_s=0.010, steps_per_item=3)
    assert plain.first_steps == 3 and plain.steps_for(2) == 6


# --- the profile and the options -------------------------------------------------------


def test_the_h200_profile_follows_the_device_check_at_batch_one() -> None:
    check = json.loads(DEVICE_CHECK.read_text())
    asr_on, vlm_on = check["asr"]["graphs_on"], check["vlm"]["graphs_on"]
    tts_on = check["tts"]["graphs_on"]
    asr, vlm, tts = (COST_PROFILES["h200"][s] for s in ("asr", "vlm", "tts"))
    asr_s = asr.step_s(1, 1) + (asr.steps_per_item - 1) * asr.step_s(1)
    expected_asr_ms = asr_on["prefill_ms"] + asr_on["tokens"] * asr_on["decode_ms_per_token"]
    assert asr_s * 1000 == pytest.approx(expected_asr_ms)
    assert vlm.step_s(1, 1) * 1000 == pytest.approx(vlm_on["ttft_1_frames_ms"])
    assert vlm.step_s(1) == pytest.approx(1 / vlm_on["decode_tokens_per_s_1_frames"])
    assert tts.first_output_s() * 1000 == pytest.approx(tts_on["ttfa_ms"])
    assert tts.step_s(1) == pytest.approx(tts_on["rtf"] * 0.1)  # a 100 ms chunk
    assert tts.max_batch == 32  # the batched streaming TTS's slots
    for curve in (asr, vlm, tts):  # the assumed batch scaling
        assert curve.step_s(32) / curve.step_s(1) == pytest.approx(1.6)


def test_without_a_cost_model_the_stages_keep_their_latency() -> None:
    assert script_of(create_backend()).engines == {}
    served = create_backend(cost_model="h200", cost_overrides={"vlm": {"max_batch": 16}})
    engines = script_of(served).engines
    assert set(engines) == {"asr", "vlm", "tts", "turn_end"}
    assert engines["vlm"].curve.max_batch == 16
    assert engines["asr"].curve == COST_PROFILES["h200"]["asr"]


def test_a_served_backend_takes_its_cost_model_from_the_backend_table(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(
        '[server]\nbackend = "scripted"\n\n[backend]\ncost_model = "h200"\n\n'
        "[backend.cost_overrides.tts]\nmax_batch = 32\nbase_s = 0.05\n"
    )
    settings = load_settings(config)
    backend = load_backend(settings.backend, profile="speech", **settings.backend_options)
    engines = script_of(backend).engines
    assert engines["tts"].curve.max_batch == 32
    assert engines["tts"].curve.base_s == 0.05
    assert engines["vlm"].curve == COST_PROFILES["h200"]["vlm"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cost_model": "a100"}, "unknown cost model `a100`"),
        ({"cost_model": "h200", "cost_overrides": {"vad": {"base_s": 1}}}, "stage `vad`"),
        ({"cost_model": "h200", "cost_overrides": {"vlm": {"slots": 4}}}, "field `slots`"),
        ({"cost_model": "h200", "cost_overrides": {"vlm": {"max_batch": 0}}}, "max_batch"),
        (
            {"cost_model": "h200", "cost_overrides": {"tts": {"first_item_steps": -1}}},
            "first_item_steps",
        ),
        ({"cost_model": "h200", "cost_overrides": {"tts": {"admit_s": -0.1}}}, "admit_s"),
        ({"cost_model": "h200", "cost_overrides": {"vlm": {"base_s": "fast"}}}, "a number"),
        ({"cost_overrides": {"vlm": {"max_batch": 2}}}, "needs a cost_model"),
    ],
)
def test_bad_cost_options_are_refused_naming_what_is_wrong(
    options: dict[str, object], says: str
) -> None:
    with pytest.raises(BackendUnavailable, match=says):
        create_backend(**options)  # type: ignore[arg-type]


# --- the stages on the engine ----------------------------------------------------------


def _fake_engines(script: Script, clock: FakeClock, **overrides: dict[str, object]) -> None:
    script.engines = engine_models("h200", overrides, clock=clock, sleep=clock.sleep)


@pytest.mark.anyio
async def test_concurrent_syntheses_share_the_tts_engine_steps_and_say_the_same() -> None:
    text = "I hear you: scripted transcript."

    async def speak(backend_script: Script, ids: list[str]) -> dict[str, list[bytes]]:
        chunks: dict[str, list[bytes]] = {i: [] for i in ids}
        async with create_backend(script=backend_script) as backend:
            tts = backend.tts
            assert isinstance(tts, ScriptedTts)

            async def one(request_id: str) -> None:
                request = TtsRequest(request_id, text, sample_rate_hz=24_000)
                async for chunk in tts.synthesize(request):
                    chunks[request_id].append(chunk.pcm16)

            async with anyio.create_task_group() as tg:
                for request_id in ids:
                    tg.start_soon(one, request_id)
                if backend_script.engines:
                    await clock.run()
        return chunks

    clock = FakeClock()
    timed = Script()
    _fake_engines(timed, clock)
    with_engine = await speak(timed, ["t1", "t2"])
    plain = await speak(Script(latency={"tts": 0.0}), ["t1", "t2"])
    assert with_engine == plain  # the cost model decides when, never what
    engine = timed.engines["tts"]
    steps = list(engine.steps)
    count = len(plain["t1"])
    assert len(steps) == engine.curve.steps_for(count)  # the first chunk's 2 frames first
    assert all(s.batch == ("t1", "t2") for s in steps)
    assert steps[0].joined == ("t1", "t2")
    # both did their host work side by side, then every step served both
    assert clock.now == pytest.approx(engine.curve.admit_s + sum(s.duration_s for s in steps))


@pytest.mark.anyio
async def test_asr_answers_in_order_after_its_steps_and_an_aborted_one_fails() -> None:
    clock = FakeClock()
    script = Script().say("first", "second")
    _fake_engines(script, clock, asr={"steps_per_item": 4, "max_batch": 1})
    async with create_backend(script=script) as backend:
        asr = backend.asr
        assert isinstance(asr, ScriptedAsr)
        answers: list[str] = []
        failures: list[str] = []

        async def transcribe(request_id: str) -> None:
            request = AsrRequest(request_id, np.zeros(1600, dtype=np.float32))
            try:
                answers.append((await asr.transcribe(request)).text)
            except Exception as exc:
                failures.append(type(exc).__name__)

        async with anyio.create_task_group() as tg:
            for request_id in ("a1", "a2", "a3"):
                tg.start_soon(transcribe, request_id)
                await _settle()
            await clock.run(until=0.05)  # a1 is in the batch, a2 and a3 queue
            await asr.abort("a3")
            await clock.run()
    assert answers == ["first", "second"]
    assert failures == ["StageFailed"]
    engine = script.engines["asr"]
    assert [s.batch for s in engine.steps] == [("a1",)] * 4 + [("a2",)] * 4  # a3 never ran
    assert script.aborted_ids("asr") == ["a3"]


@pytest.mark.anyio
async def test_an_aborted_reply_stops_quietly_and_leaves_the_vlm_engine() -> None:
    clock = FakeClock()
    script = Script().reply("one two three four five six")
    _fake_engines(script, clock)
    async with create_backend(script=script) as backend:
        vlm = backend.vlm
        assert isinstance(vlm, ScriptedVlm)
        items: list[object] = []

        async def generate() -> None:
            request = VlmRequest("v1", PromptContext(system="be brief", transcript="hi"))
            async for item in vlm.generate(request):
                items.append(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(generate)
            engine = script.engines["vlm"]
            await clock.run(until=engine.curve.step_s(1, 1) + engine.curve.step_s(1) / 2)
            assert len(items) == 1
            await vlm.abort("v1")
            await clock.run()
    assert len(items) == 1 and not any(isinstance(i, VlmDecisionResult) for i in items)
    clock.now += 1.0
    engine.advance()
    assert [s.batch for s in engine.steps] == [("v1",), ("v1",)]  # gone at the next step
    assert engine.active == [] and not engine.waiting and engine.idle
