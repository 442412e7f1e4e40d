"""B18: submission compensation with fake engines (no vLLM)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest

from backends.base import EngineDead
from backends.gpu.compensation import submit_with_compensation

EngineDeadError = type("EngineDeadError", (Exception,), {"__module__": "vllm.v1.engine.exceptions"})


class FakeEngine:
    def __init__(self, abort: Callable[[], Awaitable[None]] | None = None) -> None:
        self.aborted: list[str] = []
        self._abort = abort

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        if self._abort is not None:
            await self._abort()


class Request:
    """What the runtime does with the one exception: fail the request (counted)."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.evictions: list[BaseException] = []

    async def run(self, engine: FakeEngine, submit: Callable[[], Awaitable[object]]) -> None:
        try:
            await submit_with_compensation(
                engine, "req-1", submit, evict=self.evictions.append, abort_timeout_s=1.0
            )
        except Exception as exc:
            self.failures.append(exc)
            raise


def _raiser(exc: BaseException) -> Callable[[], Awaitable[object]]:
    async def submit() -> object:
        await anyio.sleep(0)
        raise exc

    return submit


def test_success_returns_result_and_aborts_nothing() -> None:
    engine = FakeEngine()

    async def submit() -> str:
        return "stream"

    async def main() -> object:
        return await submit_with_compensation(engine, "r", submit, evict=pytest.fail)

    assert anyio.run(main) == "stream"
    assert engine.aborted == []


def test_plain_failure_aborts_once_and_keeps_the_original_error() -> None:
    engine, request = FakeEngine(), Request()
    original = RuntimeError("ack lost")
    with pytest.raises(RuntimeError) as info:
        anyio.run(request.run, engine, _raiser(original))
    assert info.value is original
    assert engine.aborted == ["req-1"]
    assert request.evictions == []
    assert request.failures == [original]


def test_cancellation_during_submit_still_aborts_and_propagates() -> None:
    engine = FakeEngine(abort=lambda: anyio.sleep(0.01))  # the abort itself awaits
    submitted = anyio.Event()

    async def submit() -> object:
        submitted.set()
        await anyio.sleep_forever()

    async def main() -> None:
        async def task() -> None:
            await submit_with_compensation(engine, "req-1", submit, evict=pytest.fail)

        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
            await submitted.wait()
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert engine.aborted == ["req-1"]


def test_native_cancellation_propagates_as_cancelled_error() -> None:
    engine = FakeEngine()

    async def main() -> None:
        submitted = asyncio.Event()

        async def submit() -> object:
            submitted.set()
            await asyncio.Event().wait()  # never answers
            return None

        task = asyncio.ensure_future(
            submit_with_compensation(engine, "req-1", submit, evict=pytest.fail)
        )
        await submitted.wait()  # cancel during the submission, not before it started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert engine.aborted == ["req-1"]


def test_second_cancellation_during_abort_keeps_original_error_observable() -> None:
    started_abort = asyncio.Event()
    finished_abort: list[bool] = []

    async def slow_abort() -> None:
        started_abort.set()
        await asyncio.sleep(0.05)
        finished_abort.append(True)

    engine = FakeEngine(abort=slow_abort)
    original = RuntimeError("submission failed")

    async def main() -> BaseException | None:
        task = asyncio.ensure_future(
            submit_with_compensation(engine, "req-1", _raiser(original), evict=pytest.fail)
        )
        await started_abort.wait()
        task.cancel()  # e.g. shutdown cancelling again while the abort runs
        try:
            await task
        except BaseException as exc:
            return exc
        return None

    seen = asyncio.run(main())
    assert seen is original
    assert engine.aborted == ["req-1"]
    # whether the abort finished or was cut short, what happened is recorded on the error
    assert finished_abort or any("compensating abort" in note for note in original.__notes__)


def test_abort_raising_engine_dead_evicts_once_and_fails_once() -> None:
    async def dead() -> None:
        raise EngineDeadError("engine core died")

    engine, request = FakeEngine(abort=dead), Request()
    original = RuntimeError("send failed")
    with pytest.raises(RuntimeError) as info:
        anyio.run(request.run, engine, _raiser(original))
    assert info.value is original
    assert len(request.evictions) == 1
    assert isinstance(request.evictions[0], EngineDeadError)
    assert request.failures == [original]
    assert any("EngineDeadError" in note for note in original.__notes__)


def test_submit_and_abort_both_engine_dead_evicts_once() -> None:
    async def dead() -> None:
        raise EngineDeadError("still dead")

    engine, request = FakeEngine(abort=dead), Request()
    original = EngineDeadError("died during add_request")
    with pytest.raises(EngineDeadError) as info:
        anyio.run(request.run, engine, _raiser(original))
    assert info.value is original
    assert request.evictions == [original]
    assert request.failures == [original]
    assert engine.aborted == ["req-1"]


def test_translated_engine_dead_also_evicts() -> None:
    engine, request = FakeEngine(), Request()
    original = EngineDead("dead", stage="vlm")
    with pytest.raises(EngineDead):
        anyio.run(request.run, engine, _raiser(original))
    assert request.evictions == [original]


def test_hanging_abort_is_bounded_by_its_deadline() -> None:
    engine = FakeEngine(abort=anyio.sleep_forever)
    original = RuntimeError("x")

    async def main() -> None:
        with anyio.fail_after(5):
            await submit_with_compensation(
                engine, "req-1", _raiser(original), evict=pytest.fail, abort_timeout_s=0.05
            )

    with pytest.raises(RuntimeError) as info:
        anyio.run(main)
    assert info.value is original
    assert any("compensating abort" in note for note in original.__notes__)
