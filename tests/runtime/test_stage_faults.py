"""B28: a stage fault fails only the response that owns it.

The matrix: each stage (asr, vlm, tts) x each step of a request (at submit, at its first
streamed item, mid-stream, at finish: ASR does not stream, so it has submit and finish)
x each fault (it raises `StageFailed`; it hangs past the stage timeout; its engine
reports itself dead, `EngineDead`). The scripted backend's `Script.inject` aims the fault
at one session's request (by its id prefix), in-process through `hosted()`.

For every case: the owning response ends `failed` with the documented code in its
`response.done` (`StageFailed` and `EngineDead` carry `runtime_data_plane_stream_failed`,
a missed stage deadline is the same code, spec/errors.py), a concurrent session's turn on
the same backend completes with no error, the faulted session's next turn completes,
and once both sessions closed no asyncio task is left over. Only the faulted stage gets a
short timeout (hang cases), so a loaded machine cannot time out anything else.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backends.base import EngineDead, StageFailed
from backends.scripted.script import FAULT_STEPS, STAGES, FaultKind, FaultStep, StageName
from runtime.stage_executor import StageTimeouts
from spec import events as ev
from spec.errors import ERROR_TYPE, ErrorCode
from spec.limits import Limits
from tests.runtime.conftest import Client, Harness, eventually, hosted, tone

pytestmark = pytest.mark.anyio

KINDS: tuple[FaultKind, ...] = ("raise", "hang", "dead")
#: the faulted stage's deadline in hang cases: the hang's whole cost
HANG_TIMEOUT_S = 1.0
EXPECTED_CODE: dict[FaultKind, str] = {
    "raise": StageFailed.code.value,
    "hang": ErrorCode.STAGE_FAILED.value,
    "dead": EngineDead.code.value,
}
CASES = [
    pytest.param(stage, step, kind, id=f"{stage}-{step}-{kind}")
    for stage, steps in FAULT_STEPS.items()
    for step in steps
    for kind in KINDS
]
MANUAL = {"turn_detection": None}


def _session_id(client: Client) -> str:
    created = next(e for e in client.seen if e.__struct_config__.tag == "session.created")
    return str(created.session.id)


def _errors(client: Client) -> list[Any]:
    return [e for e in client.seen if e.__struct_config__.tag == "error"]


async def _commit_turn(client: Client) -> None:
    await client.send(ev.InputAudioBufferAppend(audio=tone(300)))
    await client.send(ev.InputAudioBufferCommit(create_response=True))


async def _done(client: Client) -> Any:
    return (await client.until("response.done")).response


async def _tasks_after_a_session(h: Harness) -> int:
    """Tasks alive once one session came and went (the host's lazily started helpers
    included): the baseline nothing may outlive."""
    warm = await h.connect(config=MANUAL)
    await _commit_turn(warm)
    assert (await _done(warm)).status == "completed"
    await warm.close()
    await eventually("the warm-up session to end", lambda: h.host.sessions == 0)
    return len(asyncio.all_tasks())


@pytest.mark.parametrize(("stage", "step", "kind"), CASES)
async def test_b28_a_stage_fault_fails_only_its_response(
    stage: StageName, step: FaultStep, kind: FaultKind
) -> None:
    timeouts = StageTimeouts(**{stage: HANG_TIMEOUT_S}) if kind == "hang" else None
    limits = Limits(max_sessions=8, slow_consumer_s=0)
    async with hosted(limits, timeouts=timeouts) as h:
        h.script.latency = dict.fromkeys(STAGES, 0.0)  # steps, not time, order these turns
        baseline = await _tasks_after_a_session(h)
        victim = await h.connect(config=MANUAL)
        other = await h.connect(config=MANUAL)
        h.script.inject(stage, step, kind, request_prefix=f"{_session_id(victim)}/")
        await _commit_turn(victim)
        await _commit_turn(other)
        failed = await _done(victim)
        assert failed.status == "failed", failed
        details = failed.status_details
        assert details is not None and details.error is not None, failed
        assert details.error["code"] == EXPECTED_CODE[kind], details
        assert (await _done(other)).status == "completed"
        assert not any(h.script.faults.values())  # the fault was spent on its request
        if kind == "dead":
            # the engine reported its death: the stage is out of service (B18) until its
            # health returns, as a remote replica's does
            assert stage in h.host.backend.dead
            h.host.backend.restore(stage)
        for client in (victim, other):
            await _commit_turn(client)
            assert (await _done(client)).status == "completed"
        assert _errors(other) == []
        # the failure's own `error` event, of the code's documented type, and nothing else
        codes = {(e.error.code, e.error.type) for e in _errors(victim)}
        assert codes == {(EXPECTED_CODE[kind], ERROR_TYPE[ErrorCode(EXPECTED_CODE[kind])])}
        for client in (victim, other):
            await client.close()
        await eventually("both sessions to end", lambda: h.host.sessions == 0)
        await eventually(
            f"the tasks to return to {baseline}", lambda: len(asyncio.all_tasks()) <= baseline
        )
