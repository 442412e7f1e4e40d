"""B42 Resume through a network drop (client): a resumable session's call survives its
socket failing. The link drops (nothing but `session.resume` goes out, a live hold is cut,
the camera and the button pause), attempts follow a bounded, jittered backoff, the resume
carries the cursor, a replayed event already applied is skipped, and a refusal or the end
of the attempts loses the call with a notice. The same scenarios run in the browser's
port: tests/web/traces/b42_*.json (pytest and node)."""

from __future__ import annotations

from typing import Any

import pytest

from core.statemachines.client_resume import backoff_ms
from spec.tables.client_constants import (
    LINK_PROBE_TIMEOUT_MS,
    LINK_QUIET_MS,
    RESUME_ATTEMPT_TIMEOUT_MS,
    RESUME_BACKOFF_FIRST_MS,
    RESUME_BACKOFF_MAX_MS,
    RESUME_GIVE_UP_MS,
)
from tests.web.client_driver import Driver


class Resumable(Driver):
    """A driver whose server numbers its events and names a resume token."""

    def __init__(self, mode: str, **options: Any) -> None:
        super().__init__(mode, **options)
        self.seq = 0

    def server(self, type_: str, **fields: Any) -> list[Any]:
        if type_ not in ("session.resumed", "session.resync_required") and "seq" not in fields:
            self.seq += 1
            fields["server_event_seq"] = self.seq
        fields.pop("seq", None)
        return super().server(type_, **fields)

    def ready(self) -> Resumable:
        self.step("connected")
        self.server("session.created", session={"id": "sess_1"}, resume_token="tok_1")
        self.server("session.updated", session={"id": "sess_1"})
        return self

    def drop(self, jitter: float = 0.5) -> list[Any]:
        return self.step("disconnected", reason="socket_closed:1006", jitter=jitter)

    def attempt(self) -> list[Any]:
        """Wait for the next attempt's deadline; the host opens the socket it asks for."""
        deadline = self.protocol.next_deadline()
        assert deadline is not None
        out = self.step("timeout", now_ms=int(deadline) + 1)
        assert [o["attempt"] for o in out if o["kind"] == "reconnect"], out
        return out + self.step("connected")

    def resumed(self, token: str = "tok_2") -> list[Any]:
        return self.server(
            "session.resumed",
            session_id="sess_1",
            resume_token=token,
            attachment_generation=2,
            replay_from_seq=self.seq + 1,
            last_server_event_seq=self.seq,
        )

    def link(self) -> dict[str, Any]:
        return dict(self.snapshot()["link"])


def test_b42_a_drop_mid_reply_resumes_with_the_cursor_and_the_replay_applies_once() -> None:
    d = Resumable("vad").ready()
    d.committed("item_1", None)
    d.created("resp_1")
    d.delta("resp_1")
    piece = {"response_id": "resp_1", "item_id": "item_a", "delta": "Hello "}
    d.server("response.output_audio_transcript.delta", **piece)
    cursor = d.seq
    out = d.drop()
    assert d.snapshot()["connection"] == "resuming"
    assert d.link()["state"] == "dropped"
    assert not [o for o in out if o["kind"] in ("close", "clear")]  # the reply keeps playing
    out = d.attempt()
    resume = [o["event"] for o in out if o["kind"] == "send"]
    assert [e["type"] for e in resume] == ["session.resume"]
    assert resume[0]["resume_token"] == "tok_1"
    assert resume[0]["last_received_server_event_seq"] == cursor
    d.resumed()
    assert d.snapshot()["connection"] == "ready"
    assert d.link()["state"] == "resumed"
    # the replay starts with the piece already shown: skipped, not a second line
    again = d.server("response.output_audio_transcript.delta", seq=True, server_event_seq=cursor)
    assert [o["kind"] for o in again] == ["duplicate"]
    more = d.server("response.output_audio_transcript.delta", **{**piece, "delta": "there"})
    assert [o["text"] for o in more if o["kind"] == "transcript"] == ["there"]
    d.delta("resp_1")
    d.done("resp_1")
    assert d.playback_state("resp_1") == "draining"  # the reply continues to its end


def test_b42_nothing_goes_out_while_the_link_is_down_and_held_sends_follow_the_resume() -> None:
    d = Resumable("vad", camera=True).ready()
    d.created("resp_1")
    d.delta("resp_1")
    d.step("playback_started", response_id="resp_1")
    d.done("resp_1")
    d.drop()
    assert d.snapshot()["camera"] == "off"  # the camera pauses with the link
    during = d.step("mic", audio="BBBB", samples=640)
    during += d.step("playback_drained", response_id="resp_1", played_ms=1.0)
    assert not [o for o in during if o["kind"] == "send"]
    assert d.snapshot()["held_sends"] == 1
    d.attempt()
    out = d.resumed()
    assert [o["event"]["type"] for o in out if o["kind"] == "send"] == ["playback.ack"]
    assert d.snapshot()["camera"] != "off"
    assert [o["kind"] for o in d.step("mic", audio="BBBB", samples=640)] == ["send"]


def test_b42_a_hold_cut_by_the_drop_sends_no_commit_and_the_resume_clears_its_audio() -> None:
    d = Resumable("ptt").ready()
    d.step("press")
    d.step("mic", audio="BBBB", samples=640)
    d.drop()
    assert d.snapshot()["holds"][-1]["state"] == "cut"
    paused = d.step("release") + d.step("press") + d.step("mic", audio="BBBB", samples=640)
    assert paused == []  # push-to-talk pauses while the link is down
    d.attempt()
    out = d.resumed()
    assert [o["event"]["type"] for o in out if o["kind"] == "send"] == ["input_audio_buffer.clear"]
    assert d.hold() is not None  # the next hold commits as usual


@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.999])
def test_b42_the_backoff_doubles_up_to_the_cap_scaled_by_the_hosts_jitter(jitter: float) -> None:
    d = Resumable("vad").ready()
    d.drop(jitter)
    waits = []
    for attempts in range(6):
        link = d.link()
        waits.append(link["next_attempt_ms"] - d.now)
        assert waits[-1] == backoff_ms(attempts, jitter)
        d.attempt()
        d.step("disconnected", reason="connection_refused", jitter=jitter)
    scale = 0.5 + jitter / 2
    assert waits[0] == RESUME_BACKOFF_FIRST_MS * scale
    assert waits[1] == 2 * RESUME_BACKOFF_FIRST_MS * scale
    assert max(waits) == RESUME_BACKOFF_MAX_MS * scale


def test_b42_attempts_are_bounded_in_time_then_the_call_is_lost() -> None:
    d = Resumable("vad").ready()
    dropped_at = d.now
    d.drop()
    while d.snapshot()["connection"] == "resuming":
        deadline = d.protocol.next_deadline()
        assert deadline is not None
        out = d.step("timeout", now_ms=int(deadline) + 1)
        if any(o["kind"] == "reconnect" for o in out):
            d.step("disconnected", reason="connection_refused", jitter=0.5)
    notices = [o for o in d.outputs if o["kind"] == "notice"]
    assert [n["code"] for n in notices] == ["session_lost"]
    assert "Connect starts a new session" in notices[0]["message"]
    assert d.now - dropped_at <= RESUME_GIVE_UP_MS + RESUME_BACKOFF_MAX_MS
    assert d.of("close")[-1]["reason"] == "resume_lost"


def test_b42_an_attempt_that_never_answers_is_abandoned_and_retried() -> None:
    d = Resumable("vad").ready()
    d.drop()
    d.attempt()
    out = d.step("timeout", now_ms=d.now + RESUME_ATTEMPT_TIMEOUT_MS)
    assert [o["kind"] for o in out][:1] == ["abandon_socket"]
    assert d.step("disconnected", reason="socket_closed:1006", jitter=0.5) == []
    d.attempt()
    d.resumed()
    assert d.snapshot()["connection"] == "ready"


@pytest.mark.parametrize("code", ["unknown_session", "invalid_resume_token"])
def test_b42_a_refused_resume_loses_the_call_at_once(code: str) -> None:
    d = Resumable("ptt").ready()
    d.drop()
    d.attempt()
    out = d.error(code, None)
    assert [o["kind"] for o in out] == ["notice", "close"]
    assert out[0]["code"] == "session_lost" and code in out[0]["message"]
    assert d.snapshot()["connection"] == "closed"
    assert d.link()["state"] == "lost"


def test_b42_resync_required_marks_the_reply_in_flight_as_cut() -> None:
    d = Resumable("vad").ready()
    d.committed("item_1", None)
    d.created("resp_1")
    d.delta("resp_1")
    d.drop()
    d.attempt()
    d.resumed()
    out = d.server("session.resync_required", reason="journal_overflow", last_server_event_seq=99)
    assert [o["kind"] for o in out][:2] == ["notice", "clear"]
    assert d.playback_state("resp_1") == "cleared"
    assert d.snapshot()["watchdog"] == "disarmed"


def test_b42_a_session_without_a_token_ends_on_a_drop_as_before() -> None:
    d = Driver("vad").ready()
    out = d.step("disconnected", reason="socket_closed:1006", jitter=0.5)
    assert [o["kind"] for o in out] == ["close"]
    assert d.snapshot()["connection"] == "closed"


def test_b42_the_resume_token_stays_inside_the_protocol() -> None:
    d = Resumable("vad").ready()
    assert "tok_1" not in repr(d.snapshot())
    assert d.link()["resumable"] is True


def test_b42_a_silent_link_is_probed_while_sending_then_dropped() -> None:
    d = Resumable("vad").ready()
    heard = d.now
    d.step("mic", audio="BBBB", samples=640)
    assert d.protocol.next_deadline() == heard + LINK_QUIET_MS
    probe = d.step("timeout", now_ms=heard + LINK_QUIET_MS)
    assert [o["event"]["type"] for o in probe if o["kind"] == "send"] == ["session.heartbeat"]
    d.server("session.heartbeat_ack")  # answered: the link is alive
    assert d.snapshot()["connection"] == "ready"
    heard = d.now
    d.step("mic", audio="BBBB", samples=640)
    d.step("timeout", now_ms=heard + LINK_QUIET_MS)
    out = d.step("timeout", now_ms=heard + LINK_QUIET_MS + LINK_PROBE_TIMEOUT_MS)
    assert [o["kind"] for o in out][:2] == ["abandon_socket", "link"]
    assert d.snapshot()["connection"] == "resuming"


def test_b42_an_idle_client_sends_no_probe() -> None:
    """A client that sends nothing is not probed: the probe never keeps a session from
    idling out on the server (its own sends do that)."""
    d = Resumable("ptt").ready()
    assert d.protocol.next_deadline() is None
    assert d.step("timeout", now_ms=d.now + 60_000) == []
