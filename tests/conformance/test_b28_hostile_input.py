"""B28 at the protocol: hostile frames are decoded or refused with a typed error, and a
refusal changes nothing.

The wire fuzz's seeded frames (tests/wire_mutations.py) go through the codec and into one
`SessionProtocol`, sans-IO: each frame either decodes to a client event or raises
`InvalidEvent` with a documented code; each decoded event is either applied or refused
with a `RemoteProtocolError` (the `Driver.refuse` contract: nothing emitted, no state
changed); nothing else is ever raised. Stage requests the flood starts are answered by a
backend that fails them (`StageFailure`), so failures interleave with the flood too.
Afterwards the session still answers a heartbeat, was never closed, and a full turn
completes. The served-process version of this fuzz is
tests/transport/test_hostile_input.py; the stage-fault matrix is
tests/runtime/test_stage_faults.py.
"""

from __future__ import annotations

import os

from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ERROR_TYPE, ErrorCode, InvalidEvent, RemoteProtocolError
from spec.stage_results import StageFailure
from tests.conformance.harness import Driver, tag
from tests.wire_mutations import Frame, WireMutator
from transport.codec import decode_client_event

SEED = int(os.environ.get("JOYDUPLEX_FUZZ_SEED", "20261130"))
FRAMES = 10_000
MAX_EVENT_BYTES = 1024 * 1024


def _apply(driver: Driver, frame: Frame) -> str:
    """What became of `frame`: `applied`, or the code it was refused with."""
    try:
        event = decode_client_event(frame.data, max_bytes=MAX_EVENT_BYTES)
    except InvalidEvent as exc:
        return str(ErrorCode(exc.code))
    before = driver.p.statistics()
    try:
        driver.send(event)
    except RemoteProtocolError as exc:
        assert driver.p.next_outputs() == [], f"a refusal emitted events: {frame.describe()}"
        assert driver.p.statistics() == before, f"a refusal changed state: {frame.describe()}"
        return str(ErrorCode(exc.code))
    except Exception as exc:  # pragma: no cover - the failure this test exists for
        raise AssertionError(f"seed {SEED}: {frame.describe()} raised {exc!r}") from exc
    return "applied"


class FailingBackend:
    """Answers every stage request the session submitted since the last call with a
    `StageFailure` (the log is read from where the last call stopped)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.seen = 0

    def fail_open_requests(self) -> None:
        while self.seen < len(self.driver.log):
            effect = self.driver.log[self.seen]
            self.seen += 1
            if isinstance(effect, SubmitAsr | SubmitVlm | SubmitTts):
                failure = StageFailure(effect.request_id, ErrorCode.STAGE_FAILED, "fuzzed")
                self.driver.result(failure)


def test_b28_seeded_hostile_frames_are_applied_or_refused_and_a_refusal_changes_nothing() -> None:
    print(f"\nprotocol fuzz seed {SEED} (JOYDUPLEX_FUZZ_SEED={SEED} replays it)")
    driver = Driver()
    mutator = WireMutator(SEED, MAX_EVENT_BYTES)
    backend = FailingBackend(driver)
    outcomes: dict[str, int] = {}
    for index in range(FRAMES):
        frame = mutator.next()
        outcome = _apply(driver, frame)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if index % 50 == 0:
            backend.fail_open_requests()
        for out in driver.take():
            if isinstance(out, ev.ConversationItemAdded) and out.item.id:
                mutator.item_ids.append(out.item.id)
            elif isinstance(out, ev.ResponseCreated):
                mutator.response_ids.append(out.response.id)
    backend.fail_open_requests()
    print(f"outcomes of {FRAMES} frames: {dict(sorted(outcomes.items()))}")
    assert outcomes.get("applied", 0) > FRAMES // 10
    for error in driver.events("error"):
        assert error.error.code != ErrorCode.INTERNAL_ERROR
        assert ERROR_TYPE[ErrorCode(error.error.code)] == error.error.type
    assert "session.closed" not in driver.tags()
    assert driver.p.statistics().closed is False
    out = driver.send(ev.SessionHeartbeat())
    assert "session.heartbeat_ack" in [tag(o) for o in out]
    # a clean turn: clear what the flood left, cancel what may still run, then one turn
    driver.send(ev.InputAudioBufferClear())
    driver.send(ev.SessionUpdate(session=ev.SessionPatch(turn_detection=None)))
    if driver.p.statistics().active_response is not None:
        driver.send(ev.ResponseCancel())
    backend.fail_open_requests()
    start = len(driver.log)
    driver.full_turn()
    done = driver.events("response.done", driver.log[start:])
    assert [d.response.status for d in done][-1:] == ["completed"], driver.tags(driver.log[start:])
