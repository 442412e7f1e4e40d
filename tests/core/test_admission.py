"""Admission: each worker process admits its share of `max_sessions`, and an overloaded
process sheds new sessions instead of slowing down the admitted ones."""

from __future__ import annotations

import pytest

from core.admission import OverloadGate, worker_share
from spec.errors import ErrorCode


@pytest.mark.parametrize(
    ("max_sessions", "workers", "share"),
    [(64, 1, 64), (64, 2, 32), (5, 2, 3), (1, 4, 1), (7, 7, 1), (64, 3, 22)],
)
def test_each_worker_admits_the_ceiling_of_an_even_share(
    max_sessions: int, workers: int, share: int
) -> None:
    assert worker_share(max_sessions, workers) == share
    assert share * workers >= max_sessions > (share - 1) * workers


def test_a_server_has_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        worker_share(64, 0)


def test_overload_gate_closes_after_consecutive_periods_over_a_limit() -> None:
    gate = OverloadGate(loop_lag_limit_ms=30, vad_limit_ms=40, periods=2)
    gate.observe(80, 0)  # one late wake-up (a garbage collection) sheds nobody
    assert not gate.closed and gate.refusal() is None
    gate.observe(1, 0)
    gate.observe(35, 0)
    gate.observe(0, 45)  # audio waiting too long for its VAD verdict counts as well
    assert gate.closed
    refusal = gate.refusal()
    assert refusal is not None and refusal.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "overloaded" in refusal.message and "VAD verdicts 45 ms late" in refusal.message


def test_overload_gate_opens_only_below_half_its_limits() -> None:
    gate = OverloadGate(loop_lag_limit_ms=30, vad_limit_ms=40, periods=2)
    gate.observe(50, 0)
    gate.observe(50, 0)
    assert gate.closed
    gate.observe(20, 10)  # under the limit, not under half of it: still shedding
    assert gate.closed
    gate.observe(10, 30)
    assert gate.closed
    gate.observe(10, 10)
    assert not gate.closed and gate.refusal() is None


def test_overload_gate_with_a_zero_lag_limit_never_sheds() -> None:
    gate = OverloadGate(loop_lag_limit_ms=0, vad_limit_ms=40)
    for _ in range(5):
        gate.observe(10_000, 10_000)
    assert not gate.closed
