"""B28 at the protocol: hostile frames are decoded or refused with a typed error, and a
refusal changes nothing.

The wire fuzz's seeded frames (tests/wire_mutations.py) go through the codec and into one
`SessionProtocol`, sans-IO: each frame either decodes to a client event or raises
`InvalidEvent` with a documented code; each decoded event is either applied or refused
with a `RemoteProtocolError` (the `Driver.refuse` contract: nothing emitted, no state
changed); nothing else is ever raised. Stage requests the flood starts are answered by a
backend that fails them (`StageFailure`), so failures interleave with the flood too.
Afterwards the session still answers a heartbeat, was never closed, and once its stages
are served a spoken turn (and whatever the flood left queued) completes without an error.
The served-process version of this fuzz is tests/transport/test_hostile_input.py; the
stage-fault matrix is tests/runtime/test_stage_faults.py.
"""

from __future__ import annotations

import os

from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import ERROR_TYPE, ErrorCode, InvalidEvent, RemoteProtocolError
from spec.stage_results import (
    AsrTranscript,
    StageFailure,
    TtsAudio,
    TtsDone,
    VlmDecisionResult,
    VlmDelta,
)
from tests.conformance.harness import Driver, speech_pcm, tag
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


class ScriptedStages:
    """Plays the backend: answers every stage request the session submitted since the
    last call, failing it (`StageFailure`) or serving it, until no new request is open."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.seen = 0

    def answer(self, *, fail: bool) -> None:
        while self.seen < len(self.driver.log):
            effect = self.driver.log[self.seen]
            self.seen += 1
            if not isinstance(effect, SubmitAsr | SubmitVlm | SubmitTts):
                continue
            request = effect.request_id
            if fail:
                self.driver.result(StageFailure(request, ErrorCode.STAGE_FAILED, "fuzzed"))
            elif isinstance(effect, SubmitAsr):
                self.driver.result(AsrTranscript(request, "what is this"))
            elif isinstance(effect, SubmitVlm):
                self.driver.result(VlmDelta(request, "A cup."))
                self.driver.result(VlmDecisionResult(request, "speak", "A cup."))
            else:
                self.driver.result(TtsAudio(request, bytes(500 * 48), effect.text))
                self.driver.result(TtsDone(request))


def test_b28_seeded_hostile_frames_are_applied_or_refused_and_a_refusal_changes_nothing() -> None:
    print(f"\nprotocol fuzz seed {SEED} (JOYDUPLEX_FUZZ_SEED={SEED} replays it)")
    driver = Driver()
    mutator = WireMutator(SEED, MAX_EVENT_BYTES)
    backend = ScriptedStages(driver)
    outcomes: dict[str, int] = {}
    for index in range(FRAMES):
        frame = mutator.next()
        outcome = _apply(driver, frame)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if index % 50 == 0:
            backend.answer(fail=True)
        for out in driver.take():
            if isinstance(out, ev.ConversationItemAdded) and out.item.id:
                mutator.item_ids.append(out.item.id)
            elif isinstance(out, ev.ResponseCreated):
                mutator.response_ids.append(out.response.id)
    backend.answer(fail=True)
    print(f"outcomes of {FRAMES} frames: {dict(sorted(outcomes.items()))}")
    assert outcomes.get("applied", 0) > FRAMES // 10
    for error in driver.events("error"):
        assert error.error.code != ErrorCode.INTERNAL_ERROR
        assert ERROR_TYPE[ErrorCode(error.error.code)] == error.error.type
    assert "session.closed" not in driver.tags()
    assert driver.p.statistics().closed is False
    out = driver.send(ev.SessionHeartbeat())
    assert "session.heartbeat_ack" in [tag(o) for o in out]
    # a clean turn, its stages served: whatever the flood left queued is answered too
    start = len(driver.log)
    driver.send(ev.SessionUpdate(session=ev.SessionPatch(turn_detection=None)))
    driver.append(speech_pcm(300))
    driver.commit(create_response=True)
    backend.answer(fail=False)
    after = driver.log[start:]
    assert driver.events("error", after) == [], driver.tags(after)
    done = driver.events("response.done", after)
    assert done and {d.response.status for d in done} == {"completed"}, driver.tags(after)
    assert driver.p.statistics().active_response is None
