"""B23 Watchdog: the client's 120 s turn watchdog is armed only while a turn awaits a reply
and disarmed by every terminal path (done, no_response, rejection, interrupt)."""

from __future__ import annotations

import pytest

from spec.tables.client_constants import TURN_WATCHDOG_MS
from tests.web.client_driver import Driver


def armed(d: Driver) -> bool:
    return bool(d.snapshot()["watchdog"] == "armed")


def submitted(d: Driver) -> tuple[Driver, str]:
    d.ready()
    commit = d.hold()
    assert commit is not None
    assert armed(d)
    return d, commit


def test_b23_watchdog_is_120_s_and_armed_by_a_submitted_hold() -> None:
    d, _ = submitted(Driver("ptt"))
    assert TURN_WATCHDOG_MS == 120_000
    assert d.snapshot()["watchdog_deadline_ms"] == d.now + TURN_WATCHDOG_MS


def test_b23_disarmed_by_response_done() -> None:
    d, commit = submitted(Driver("ptt"))
    d.committed("item_1", commit)
    d.created("resp_1")
    assert armed(d)
    d.done("resp_1")
    assert not armed(d)


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_b23_disarmed_by_a_cancelled_or_failed_done(status: str) -> None:
    d, commit = submitted(Driver("ptt"))
    d.committed("item_1", commit)
    d.created("resp_1")
    d.done("resp_1", status)
    assert not armed(d)


def test_b23_disarmed_by_no_response() -> None:
    d, commit = submitted(Driver("ptt"))
    d.committed("item_1", commit, no_response=True)
    assert not armed(d)


def test_b23_disarmed_by_rejection() -> None:
    d, commit = submitted(Driver("ptt"))
    d.error("input_backpressure", commit)
    assert not armed(d)


def test_b23_disarmed_by_interrupt_stop_button() -> None:
    d, commit = submitted(Driver("ptt"))
    d.committed("item_1", commit)
    d.created("resp_1")
    d.delta("resp_1")
    d.step("stop_reply")
    assert not armed(d)
    assert d.sent("output_audio_buffer.clear")


@pytest.mark.parametrize("trigger", ["speech_started", "cleared"])
def test_b23_disarmed_by_vad_interrupt(trigger: str) -> None:
    d = Driver("vad").ready()
    d.committed("item_1", None)
    d.created("resp_1")
    assert armed(d)
    if trigger == "speech_started":
        d.speech_started()
    else:
        d.server("output_audio_buffer.cleared", response_id="resp_1")
    assert not armed(d)


def test_b23_not_armed_by_empty_or_muted_holds_nor_by_vad_quiet_commits() -> None:
    d = Driver("ptt").ready()
    d.step("press")
    d.step("release")
    d.step("mute", muted=True)
    d.hold()
    assert d.of("watchdog") == []
    v = Driver("vad").ready()
    v.committed("item_1", None, no_response=True)
    assert v.of("watchdog") == []


def test_b23_stays_armed_while_another_hold_awaits() -> None:
    d, first = submitted(Driver("ptt"))
    second = d.hold()
    d.committed("item_1", first, no_response=True)
    assert armed(d)
    d.committed("item_2", second)
    d.created("resp_1")
    d.done("resp_1")
    assert not armed(d)


def test_b23_new_submission_restarts_and_expiry_ends_the_call() -> None:
    d, _ = submitted(Driver("ptt"))
    d.step("timeout", now_ms=60_000)
    d.hold()
    deadline = d.snapshot()["watchdog_deadline_ms"]
    assert deadline == d.now + TURN_WATCHDOG_MS
    assert d.protocol.next_deadline() == deadline
    assert d.step("timeout", now_ms=deadline - 1) == []
    out = d.step("timeout", now_ms=deadline)
    assert [o["code"] for o in d.of("notice", out)] == ["turn_watchdog"]
    assert d.of("close", out) == [{"kind": "close", "reason": "turn_watchdog"}]
    assert d.snapshot()["connection"] == "closed"
    assert d.step("press") == []
