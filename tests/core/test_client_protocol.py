"""`ClientProtocol` invariants over seeded random walks (the same walks the browser
runtime replays), plus its small public helpers."""

from __future__ import annotations

import pytest

from core.client_protocol import ClientProtocol, base64_bytes, send_events, wire_event
from spec.events import ResponseOutputAudioDelta
from spec.tables.client_hold import AWAITING_REPLY_STATES
from tests.web.trace_scenarios import RANDOM_STEPS, random_walk

AWAITING = {s.value for s in AWAITING_REPLY_STATES}


@pytest.mark.parametrize("seed", range(40))
def test_invariants_hold_on_random_walks(seed: int) -> None:
    mode = "vad" if seed % 2 else "ptt"
    protocol = ClientProtocol(mode, camera=seed % 3 == 0)
    for entry in (
        {"kind": "connected", "now_ms": 0},
        {"kind": "server", "now_ms": 1, "event": {"type": "session.updated", "session": {}}},
    ):
        protocol.step(entry)
    walk = random_walk(seed, mode)
    commits_by_hold: dict[str, int] = {}
    for _ in range(RANDOM_STEPS * 2):
        outputs = protocol.step(next(walk)(protocol))
        snap = protocol.snapshot()
        holds = snap["holds"]
        # W1: the watchdog is armed iff some hold awaits a reply
        awaiting = any(h["state"] in AWAITING for h in holds)
        assert (snap["watchdog"] == "armed") == awaiting
        # C2: nothing is queued for a response that ended
        ended = {
            p["response_id"] for p in snap["playbacks"] if p["state"] in ("drained", "cleared")
        }
        assert not [o for o in outputs if o["kind"] == "play" and o["response_id"] in ended]
        # H1/H2: one commit per hold, only after it uploaded audio
        for hold in holds:
            if hold["commit_event_id"] is not None:
                commits_by_hold.setdefault(hold["hold_id"], 0)
                assert hold["uploaded_samples"] > 0 or hold["item_id"] is not None
            if hold["state"] == "empty":
                assert hold["commit_event_id"] is None
        commits = [e for e in send_events(outputs) if e["type"] == "input_audio_buffer.commit"]
        assert len(commits) <= 1
        # the pending commits are exactly the submitted holds
        assert snap["pending_commits"] == [
            h["commit_event_id"] for h in holds if h["state"] == "submitted"
        ]


def test_base64_bytes_counts_without_decoding() -> None:
    assert [base64_bytes(t) for t in ("", "AA==", "AAA=", "AAAA", "AAAAAA==")] == [0, 1, 2, 3, 4]


def test_wire_event_turns_a_typed_server_event_into_the_protocol_input() -> None:
    event = ResponseOutputAudioDelta(response_id="resp_1", item_id="item_2", delta=b"\x00\x00" * 24)
    data = wire_event(event)
    assert data["type"] == "response.output_audio.delta"
    protocol = ClientProtocol("vad")
    protocol.connected(0)
    protocol.server_event({"type": "session.updated"}, 1)
    [play] = protocol.server_event(data, 2)
    assert play == {"kind": "play", "response_id": "resp_1", "audio": data["delta"]}
    assert protocol.snapshot()["playbacks"][0]["queued_ms"] == 1.0


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown client mode"):
        ClientProtocol("walkie-talkie")


def test_unknown_trace_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown input kind"):
        ClientProtocol("ptt").step({"kind": "teleport", "now_ms": 0})
