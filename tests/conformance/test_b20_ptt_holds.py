"""B20 PTT holds (client): a muted or empty hold sends no commit and leaves camera
observations running; a rejected commit releases only its own pending state; a quiet hold
made after `response.done` but before that reply's audio drained keeps the reply's state
and settles its own watchdog; a `no_response` ack finishes exactly its hold."""

from __future__ import annotations

import pytest

from tests.web.client_driver import JPEG, Driver


def test_b20_muted_hold_sends_no_commit_and_camera_keeps_running() -> None:
    d = Driver("ptt", camera=True).ready()
    d.step("frame", jpeg=JPEG)
    d.step("mute", muted=True)
    assert d.hold(3) is None
    assert d.sent("input_audio_buffer.commit") == []
    assert d.hold_state("hold_1") == "empty"
    assert d.snapshot()["watchdog"] == "disarmed"
    out = d.step("timeout", now_ms=5000)
    assert d.of("capture_frame", out)
    d.step("frame", jpeg=JPEG)
    frames_alone = [e for e in d.sent("input_audio_buffer.append") if "audio" not in e]
    assert len(frames_alone) == 2
    assert d.snapshot()["camera"] == "standalone"


def test_b20_hold_muted_before_any_upload_sends_no_commit() -> None:
    d = Driver("ptt").ready()
    d.step("press")
    d.step("mute", muted=True)
    d.step("mic", audio="BBBB", samples=640)  # muted: not uploaded
    d.step("release")
    assert d.sent("input_audio_buffer.append") == []
    assert d.sent("input_audio_buffer.commit") == []
    assert d.hold_state("hold_1") == "empty"


def test_b20_empty_hold_sends_no_commit_and_never_arms_the_watchdog() -> None:
    d = Driver("ptt").ready()
    d.step("press")
    d.step("release")
    assert d.sent("input_audio_buffer.commit") == []
    assert d.of("watchdog") == []


def test_b20_rejected_commit_while_another_is_pending_releases_only_its_own_hold() -> None:
    d = Driver("ptt").ready()
    first, second = d.hold(), d.hold()
    out = d.error("input_audio_buffer_empty", second)
    assert [o["kind"] for o in out] == ["notice"]
    assert d.hold_state("hold_2") == "rejected"
    assert d.hold_state("hold_1") == "submitted"
    assert d.snapshot()["pending_commits"] == [first]
    assert d.snapshot()["watchdog"] == "armed"
    assert d.snapshot()["connection"] == "ready"
    d.committed("item_1", first)
    d.created("resp_1")
    d.done("resp_1")
    assert d.hold_state("hold_1") == "settled"
    assert d.snapshot()["watchdog"] == "disarmed"


@pytest.mark.parametrize("answer", ["no_response", "rejected"])
def test_b20_quiet_hold_after_done_before_drain_keeps_reply_and_settles_its_watchdog(
    answer: str,
) -> None:
    d = Driver("ptt").ready()
    d.committed("item_1", d.hold())
    d.created("resp_1")
    for _ in range(5):
        d.delta("resp_1", "item_2")
    d.step("playback_started", response_id="resp_1")
    d.done("resp_1")
    assert d.playback_state("resp_1") == "draining"
    quiet = d.hold()
    assert d.snapshot()["watchdog"] == "armed"
    if answer == "no_response":
        d.committed("item_3", quiet, no_response=True)
        d.server("response.listen", reason="silence_or_noise")
    else:
        d.error("input_audio_buffer_empty", quiet)
    assert d.hold_state("hold_2") == answer
    assert d.snapshot()["watchdog"] == "disarmed"
    assert d.playback_state("resp_1") == "draining"  # the older reply is untouched
    assert d.of("clear") == []
    d.step("playback_drained", response_id="resp_1", played_ms=5.0)
    assert d.playback_state("resp_1") == "drained"
    assert [(a["response_id"], a["played_ms"]) for a in d.sent("playback.ack")] == [("resp_1", 5.0)]
    assert d.snapshot()["pending_commits"] == []


@pytest.mark.parametrize("quiet_first", [True, False], ids=["first_quiet", "second_quiet"])
def test_b20_no_response_ack_with_two_pending_commits_finishes_exactly_its_hold(
    quiet_first: bool,
) -> None:
    d = Driver("ptt").ready()
    ids = [d.hold(), d.hold()]
    quiet, spoken = (0, 1) if quiet_first else (1, 0)
    # acknowledge in both orders: the quiet one first, then the spoken one
    d.committed("item_1", ids[quiet], no_response=True)
    assert d.hold_state(f"hold_{quiet + 1}") == "no_response"
    assert d.hold_state(f"hold_{spoken + 1}") == "submitted"
    assert d.snapshot()["watchdog"] == "armed"
    d.committed("item_2", ids[spoken])
    d.created("resp_1")
    assert d.hold_state(f"hold_{spoken + 1}") == "answering"
    d.done("resp_1")
    assert d.hold_state(f"hold_{spoken + 1}") == "settled"
    assert d.hold_state(f"hold_{quiet + 1}") == "no_response"
    assert d.snapshot()["watchdog"] == "disarmed"


def test_b20_spoken_ack_before_quiet_ack_of_two_pending_commits() -> None:
    d = Driver("ptt").ready()
    first, second = d.hold(), d.hold()
    d.committed("item_1", first)
    d.created("resp_1")
    d.committed("item_2", second, no_response=True)
    assert d.hold_state("hold_1") == "answering"
    assert d.hold_state("hold_2") == "no_response"
    assert d.snapshot()["watchdog"] == "armed"
    d.done("resp_1")
    assert d.snapshot()["watchdog"] == "disarmed"
