"""Admission: each worker process admits its share of `max_sessions`, and an overloaded
process sheds new sessions instead of slowing down the admitted ones."""

from __future__ import annotations

import pytest

from core.admission import MeasuredShare, OverloadGate, worker_share
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


def _measured(limit: float = 0.9) -> OverloadGate:
    """A gate that measured the event loop 50% busy with 100 sessions: 0.5% each."""
    gate = OverloadGate(loop_lag_limit_ms=50, vad_limit_ms=100, loop_busy_limit=limit)
    gate.observe(0, 0, loop_busy=0.5, sessions=100)
    return gate


def test_b25_a_burst_is_refused_once_the_measured_cost_of_what_it_adds_passes_the_limit() -> None:
    """A hundred connections a second are all in before the lag shows anything: the
    gate counts each admitted session at the measured per-session cost until a
    measurement includes it."""
    gate = _measured()
    for _ in range(70):  # 0.5 + 71 x 0.005 < 0.9
        assert gate.refusal() is None
        gate.admitted()
    for _ in range(15):
        gate.admitted()
    refusal = gate.refusal()  # 0.5 + 86 x 0.005 > 0.9
    assert refusal is not None and refusal.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "measured capacity (event loop 50% busy, 85 sessions admitted since" in refusal.message
    assert not gate.closed  # the lag and VAD-wait gate is another matter


def test_the_vad_share_is_predicted_alike_and_named_in_the_refusal() -> None:
    gate = OverloadGate(loop_lag_limit_ms=50, vad_limit_ms=100, vad_busy_limit=0.72)
    gate.observe(0, 0, loop_busy=0.3, vad_busy=0.6, sessions=400)  # 0.15% a session
    for _ in range(70):  # 0.6 + 71 x 0.0015 < 0.72
        assert gate.refusal() is None
        gate.admitted()
    for _ in range(10):
        gate.admitted()
    refusal = gate.refusal()
    assert refusal is not None and "VAD 60% busy, 80 sessions admitted since" in refusal.message
    assert "event loop" not in refusal.message  # no loop limit given: not predicted


def test_admitted_sessions_stop_counting_as_predicted_two_periods_after_admission() -> None:
    gate = _measured()
    for _ in range(90):
        gate.admitted()
    assert gate.refusal() is not None
    gate.observe(0, 0, loop_busy=0.5, sessions=190)  # partly measured: still predicted
    assert gate.loop.predicted() > gate.loop.busy
    gate.observe(0, 0, loop_busy=0.5, sessions=190)  # measured: they cost less than feared
    assert gate.loop.predicted() == pytest.approx(0.5)
    assert gate.refusal() is None


def test_the_busiest_of_the_last_four_periods_counts() -> None:
    """One quiet quarter second at the edge of capacity must not let a burst through."""
    share = MeasuredShare("VAD", 0.72)
    for busy in (0.7, 0.4, 0.45, 0.5):
        share.measure(busy, sessions=450)
    assert share.busy == 0.7
    share.measure(0.5, sessions=450)  # the 0.7 left the window
    assert share.busy == 0.5


def test_the_per_session_cost_is_smoothed_over_periods() -> None:
    share = MeasuredShare("event loop", 0.9)
    share.measure(0.5, sessions=100)  # 0.005
    share.measure(0.8, sessions=100)  # 0.008: half of each
    assert share.cost == pytest.approx(0.0065)


def test_no_cost_is_estimated_from_a_handful_of_sessions() -> None:
    """The process's own fixed work (the VAD tick, the watcher) shared by three sessions
    is not what a session costs: nothing is refused on it."""
    gate = OverloadGate(loop_lag_limit_ms=50, vad_limit_ms=100, loop_busy_limit=0.9)
    gate.observe(0, 0, loop_busy=0.95, sessions=3)
    for _ in range(100):
        gate.admitted()
    assert gate.refusal() is None


@pytest.mark.parametrize(("lag_limit", "busy_limit"), [(0, 0.9), (50, 0)])
def test_the_capacity_prediction_is_off_with_shedding_or_with_a_zero_busy_limit(
    lag_limit: float, busy_limit: float
) -> None:
    gate = OverloadGate(
        loop_lag_limit_ms=lag_limit,
        vad_limit_ms=100,
        loop_busy_limit=busy_limit,
        vad_busy_limit=busy_limit,
    )
    gate.observe(0, 0, loop_busy=0.95, vad_busy=0.95, sessions=100)
    for _ in range(100):
        gate.admitted()
    assert gate.refusal() is None
