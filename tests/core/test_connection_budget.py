"""A connection's budget of frames (D38): token buckets for events and bytes a second,
the refusal of a frame over either, and the close of a connection that keeps sending
over them; and the defaults, which a normal client never meets."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pytest

from core.connection_budget import ConnectionBudget, TokenBucket
from spec.errors import ErrorCode, ErrorType
from spec.limits import MIB, Limits


def _budget(**overrides: float) -> ConnectionBudget:
    values: dict[str, float] = {
        "max_events_per_s": 10.0,
        "event_burst": 5,
        "max_bytes_per_s": 0.0,
        "byte_burst": 1,
        "max_refusals": 0,
        "refusal_window_s": 10.0,
    }
    values.update(overrides)
    return ConnectionBudget(
        now_s=0.0,
        max_events_per_s=values["max_events_per_s"],
        event_burst=int(values["event_burst"]),
        max_bytes_per_s=values["max_bytes_per_s"],
        byte_burst=int(values["byte_burst"]),
        max_refusals=int(values["max_refusals"]),
        refusal_window_s=values["refusal_window_s"],
    )


def _admitted(budget: ConnectionBudget, frames: int, now_s: float, size: int = 100) -> int:
    return sum(budget.refusal(size, now_s) is None for _ in range(frames))


def test_a_full_bucket_admits_its_burst_at_once_then_refuses() -> None:
    budget = _budget()
    assert _admitted(budget, 5, 0.0) == 5
    refusal = budget.refusal(100, 0.0)
    assert refusal is not None
    assert refusal.code is ErrorCode.RATE_LIMIT_EXCEEDED
    assert refusal.error_type is ErrorType.RATE_LIMIT
    assert "more than 10 events a second (burst 5)" in refusal.message


def test_the_bucket_refills_at_its_rate_and_never_beyond_its_burst() -> None:
    budget = _budget()
    assert _admitted(budget, 5, 0.0) == 5
    assert _admitted(budget, 3, 0.1) == 1  # 10 a second: one token in 100 ms
    assert _admitted(budget, 3, 0.35) == 2
    assert _admitted(budget, 50, 1_000.0) == 5  # a long pause refills the burst, no more


def test_a_clock_that_steps_back_refills_nothing() -> None:
    bucket = TokenBucket(rate=4.0, burst=2, now_s=5.0)
    for _ in range(2):
        assert bucket.holds(1, 5.0)
        bucket.take(1)
    assert not bucket.holds(1, 4.0)
    assert not bucket.holds(1, 5.125)  # half a token since 5.0, not 4.5 since 4.0
    assert bucket.holds(1, 5.25)


def test_bytes_are_budgeted_apart_from_events_and_a_refused_frame_costs_nothing() -> None:
    budget = _budget(
        max_events_per_s=1_000.0, event_burst=1_000, max_bytes_per_s=1_000.0, byte_burst=3_000
    )
    assert budget.refusal(2_000, 0.0) is None
    refusal = budget.refusal(2_000, 0.0)  # 1,000 bytes left
    assert refusal is not None and refusal.code is ErrorCode.RATE_LIMIT_EXCEEDED
    assert "more than 1000 bytes a second (burst 3000; this frame: 2000 bytes)" in refusal.message
    assert budget.refusal(1_000, 0.0) is None  # the refused frame took no bytes
    assert budget.events.tokens == 998  # ... and no event token
    assert budget.refusal(500, 0.0) is not None
    assert budget.refusal(500, 0.5) is None  # 500 bytes refilled in half a second


def test_a_frame_larger_than_the_byte_burst_passes_only_from_a_full_bucket() -> None:
    budget = _budget(max_events_per_s=0.0, max_bytes_per_s=1_000.0, byte_burst=1_000)
    assert budget.refusal(5_000, 0.0) is None  # full: it passes, leaving the bucket in debt
    assert budget.bytes.tokens == -4_000
    assert budget.refusal(1, 3.5) is not None  # the debt is paid back at the rate first
    assert budget.refusal(1, 4.5) is None
    assert budget.refusal(5_000, 4.75) is not None  # not full: refused


def test_a_rate_of_zero_disables_its_bucket() -> None:
    events_off = _budget(max_events_per_s=0.0, max_bytes_per_s=1_000.0, byte_burst=10_000)
    assert _admitted(events_off, 100_000, 0.0, size=0) == 100_000
    assert events_off.refusal(6_000, 0.0) is None
    assert events_off.refusal(6_000, 0.0) is not None  # bytes still count
    both_off = _budget(max_events_per_s=0.0)
    assert not both_off.enabled
    assert _admitted(both_off, 100_000, 0.0, size=10 * MIB) == 100_000


def test_refusals_within_the_window_mark_the_connection_abusive() -> None:
    budget = _budget(max_refusals=3, refusal_window_s=10.0)
    _admitted(budget, 5, 0.0)
    budget.refusal(100, 0.0)
    budget.refusal(100, 0.01)
    assert not budget.abusive
    budget.refusal(100, 0.02)
    assert budget.abusive


def test_refusals_spread_wider_than_the_window_never_close() -> None:
    budget = _budget(max_events_per_s=1.0, event_burst=1, max_refusals=3, refusal_window_s=10.0)
    for second in range(0, 120, 6):  # one refusal every 6 s: never 3 within 10 s
        assert budget.refusal(100, float(second)) is None
        assert budget.refusal(100, float(second)) is not None
    assert not budget.abusive


def test_max_refusals_of_zero_never_closes() -> None:
    budget = _budget(max_refusals=0)
    assert _admitted(budget, 10_000, 0.0) == 5
    assert not budget.abusive


# --- the defaults and a normal client -------------------------------------------------

#: a normal client at its peak, in the duplex dialect (spec/limits.py states the figures)
APPENDS_PER_S = 50  # 20 ms appends
SERVER_EVENTS_PER_S = 75  # a reply: ~50 audio deltas, transcript deltas, turn events
PLAYBACK_ACKS_PER_S = 50  # one per delta played
HEARTBEATS_PER_S = 1
JPEG_BYTES = 300_000  # the largest camera frame of a normal client
FRAMES_PER_APPEND = 2  # `max_video_frames_per_append`


def _append(index: int, frames: int) -> str:
    audio = base64.b64encode(bytes(24_000 * 2 * 20 // 1000)).decode()  # 20 ms, 24 kHz pcm16
    event = {"type": "input_audio_buffer.append", "event_id": f"evt_{index}", "audio": audio}
    if frames:
        jpeg = base64.b64encode(b"\xff\xd8" + bytes(JPEG_BYTES - 2)).decode()
        event["video_frames"] = [jpeg] * frames  # type: ignore[assignment]
    return json.dumps(event)


ACK = json.dumps({"type": "session.event_ack", "event_id": "evt_100000", "server_event_seq": 10**6})
PLAYBACK_ACK = json.dumps(
    {
        "type": "playback.ack",
        "event_id": "evt_100000",
        "response_id": "resp_" + "x" * 20,
        "played_ms": 100000,
    }
)
HEARTBEAT = json.dumps({"type": "session.heartbeat", "event_id": "evt_100000"})


@dataclass
class NormalPeak:
    events_per_s: int
    bytes_per_s: int
    largest_burst_events: int
    largest_burst_bytes: int


def _normal_peak() -> NormalPeak:
    events = APPENDS_PER_S + SERVER_EVENTS_PER_S + PLAYBACK_ACKS_PER_S + HEARTBEATS_PER_S
    plain, with_frames = len(_append(1, 0)), len(_append(1, FRAMES_PER_APPEND))
    # the camera sends one frame a second; two riding one append, every second, bounds it
    byte_rate = (
        (APPENDS_PER_S - 1) * plain
        + with_frames
        + (SERVER_EVENTS_PER_S * len(ACK))
        + PLAYBACK_ACKS_PER_S * len(PLAYBACK_ACK)
        + HEARTBEATS_PER_S * len(HEARTBEAT)
    )
    # a resumed session replays up to its grace period of events; the client acks each
    replay = int(Limits().resume_grace_s) * SERVER_EVENTS_PER_S
    return NormalPeak(events, byte_rate, replay, 2 * with_frames)


def test_the_default_budgets_are_at_least_four_times_a_normal_clients_peak() -> None:
    limits, peak = Limits(), _normal_peak()
    assert peak.events_per_s == 176
    assert 850_000 < peak.bytes_per_s < 950_000
    assert limits.max_events_per_s >= 4 * peak.events_per_s
    assert limits.max_bytes_per_s >= 4 * peak.bytes_per_s
    assert limits.event_burst >= peak.largest_burst_events  # acks of a replay, at once
    assert limits.byte_burst >= 2 * limits.max_event_bytes >= peak.largest_burst_bytes


def test_a_normal_client_fast_forwarded_through_a_minute_at_its_peak_is_never_refused() -> None:
    """A minute of a duplex client at its peak, its frames at their own times, with a
    4-second network stall whose frames then arrive at once and the acks of a 30-second
    replay after a resume: every frame is admitted, and the connection is never closed."""
    limits = Limits()
    budget = ConnectionBudget.from_limits(limits, now_s=0.0)
    arrivals: list[tuple[float, int]] = []
    plain, with_frames = len(_append(1, 0)), len(_append(1, FRAMES_PER_APPEND))
    for tick in range(60 * APPENDS_PER_S):
        at = tick / APPENDS_PER_S
        arrivals.append((at, with_frames if tick % APPENDS_PER_S == 0 else plain))
    for per_s, size in (
        (SERVER_EVENTS_PER_S, len(ACK)),
        (PLAYBACK_ACKS_PER_S, len(PLAYBACK_ACK)),
        (HEARTBEATS_PER_S, len(HEARTBEAT)),
    ):
        arrivals += [(n / per_s + 0.003, size) for n in range(60 * per_s)]
    # the stall: 20 s to 24 s arrive together at 24 s
    arrivals = [(24.0 if 20.0 <= at < 24.0 else at, size) for at, size in arrivals]
    # a resume at 40 s: the acks of 30 s of replayed events, at once
    arrivals += [(40.0, len(ACK))] * int(limits.resume_grace_s) * SERVER_EVENTS_PER_S
    arrivals.sort(key=lambda arrival: arrival[0])
    refused = [at for at, size in arrivals if budget.refusal(size, at) is not None]
    assert refused == []
    assert not budget.abusive
    assert len(arrivals) > 60 * _normal_peak().events_per_s


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_events_per_s", -1),
        ("event_burst", 0),
        ("max_bytes_per_s", -0.5),
        ("byte_burst", 0),
        ("max_rate_refusals", -1),
        ("rate_refusal_window_s", -1),
    ],
)
def test_budget_limits_are_validated(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=key):
        Limits.from_mapping({key: value})
