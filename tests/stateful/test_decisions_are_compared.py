"""The stateful comparison sees the decisions the session makes for turn-taking: a core
that decides otherwise than the reference model is caught.

Each mutant below is the session with one decision of `core.turn_taking` undone, as the
runtime made them before they moved into the core: a commit's ASR always sent (no reuse
of the partial that heard its audio, B33), and a verdict applied at once (no wait for the
pause's words, B32). The hypothesis exploration of `test_session_vs_reference` must fail
on each.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

import core.session
from core.session import SessionProtocol
from core.turn_taking import TurnTaking
from spec.effects import SubmitAsr
from spec.limits import Limits
from spec.session_config import SessionConfig
from spec.stage_results import TurnEndVerdict
from tests.stateful.machine import SessionMachine


class _SendsEveryAsr(TurnTaking):
    __slots__ = ()

    def transcribe(self, submit: SubmitAsr) -> None:
        self._out.effect(submit)


class _AppliesVerdictsAtOnce(TurnTaking):
    __slots__ = ()

    def on_verdict(self, result: TurnEndVerdict, now_ms: int) -> None:
        self._apply_verdict(
            result.request_id, result.probability, result.transcript, result.punctuated, now_ms
        )


def _make_sut(config: SessionConfig, limits: Limits, profile: str, punctuated: bool) -> Any:
    return SessionProtocol(
        session_id="s1",
        config=config,
        limits=limits,
        profile=profile,
        punctuated_transcripts=punctuated,
    )


class _Mutated(SessionMachine):
    make_sut = staticmethod(_make_sut)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [_SendsEveryAsr, _AppliesVerdictsAtOnce])
def test_the_exploration_catches_a_core_that_decides_turn_taking_otherwise(
    mutant: type[TurnTaking], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core.session, "TurnTaking", mutant)
    case = _Mutated.TestCase("runTest")
    case.settings = settings(
        max_examples=800,
        stateful_step_count=40,
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],  # finding it is the point; shrinking it is not
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    with pytest.raises(AssertionError, match=r"outputs differ|next_deadline"):
        case.runTest()
