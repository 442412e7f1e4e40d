"""Recorded client traces: named scenarios (B20-B23 and the call lifecycle) and seeded
random walks, run through the Python `ClientProtocol`.

`build_traces()` returns every trace as JSON data: `{name, mode, options, steps: [{input,
outputs, snapshot}]}`. `tools/web_gen_traces.py` writes them to `tests/web/traces/`;
`tests/web/test_web_traces_fresh.py` fails when the files are stale; `traces.test.mjs`
replays each through the browser's `ClientProtocol` and requires identical outputs and
snapshots at every step: the two runtimes agree on every trace.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.client_protocol import ClientProtocol

TRACE_DIR = Path(__file__).resolve().parent / "traces"
RANDOM_TRACES = 8
RANDOM_STEPS = 80
#: recorded random traces of a WebRTC call (media on tracks; `random_trace` puts half of
#: the seeds from RANDOM_TRACES on up on tracks)
TRACK_SEEDS = (102, 103)
#: recorded random traces of a resumable session (B42): numbered events, replays, drops
#: and resumes (`random_trace` makes every seed from RANDOM_TRACES on with seed % 5 == 4
#: resumable, the fresh seeds of test_web_runtimes_agree included)
RESUME_SEEDS = (104, 109, 114)

Input = dict[str, Any]

# 48 bytes of base64 -> 24 pcm16 samples at 24 kHz = 1 ms of reply audio; mic chunks say
# their sample count (the protocol counts, never decodes)
REPLY_CHUNK = "A" * 64
MIC_CHUNK = "BBBB"
JPEG = "/9j/" + "C" * 40


def at(now: int, kind: str, **fields: Any) -> Input:
    return {"kind": kind, "now_ms": now, **fields}


def srv(now: int, type_: str, **fields: Any) -> Input:
    return at(now, "server", event={"type": type_, **fields})


def mic(now: int) -> Input:
    return at(now, "mic", audio=MIC_CHUNK, samples=640)


def ready(now: int = 0) -> list[Input]:
    return [
        at(now, "connected"),
        srv(now + 5, "session.created", session={"id": "sess_1"}),
        srv(now + 10, "session.updated", session={"id": "sess_1"}),
    ]


def committed(now: int, item_id: str, client_event_id: str | None, **extra: Any) -> Input:
    fields: dict[str, Any] = {"item_id": item_id, **extra}
    if client_event_id is not None:
        fields["client_event_id"] = client_event_id
    return srv(now, "input_audio_buffer.committed", **fields)


def created(now: int, response_id: str) -> Input:
    return srv(now, "response.created", response={"id": response_id, "status": "in_progress"})


def delta(now: int, response_id: str, item_id: str) -> Input:
    return srv(
        now,
        "response.output_audio.delta",
        response_id=response_id,
        item_id=item_id,
        delta=REPLY_CHUNK,
    )


def done(now: int, response_id: str, status: str = "completed", reason: str | None = None) -> Input:
    response: dict[str, Any] = {"id": response_id, "status": status}
    if reason is not None:
        response["status_details"] = {"type": status, "reason": reason}
    return srv(now, "response.done", response=response)


def error(now: int, code: str, event_id: str | None) -> Input:
    detail: dict[str, Any] = {"type": "invalid_request_error", "code": code, "message": code}
    if event_id is not None:
        detail["event_id"] = event_id
    return srv(now, "error", error=detail)


def hold(now: int, chunks: int = 3) -> list[Input]:
    """Press, upload `chunks` mic chunks, release."""
    uploads = [mic(now + 40 * (i + 1)) for i in range(chunks)]
    return [at(now, "press"), *uploads, at(now + 40 * (chunks + 1), "release")]


def _transcript_piece(now: int, response_id: str, item_id: str, i: int) -> Input:
    """The reply's transcript piece `i` (its words: `w<i> `)."""
    return srv(
        now,
        "response.output_audio_transcript.delta",
        response_id=response_id,
        item_id=item_id,
        delta=f"w{i} ",
    )


def reply(now: int, response_id: str, item_id: str, chunks: int = 3) -> list[Input]:
    """A complete reply: created, audio deltas with transcript, done chain."""
    steps = [created(now, response_id)]
    for i in range(chunks):
        steps.append(delta(now + 10 + i, response_id, item_id))
        steps.append(_transcript_piece(now + 10 + i, response_id, item_id, i))
    steps += [
        srv(now + 20, "response.output_audio.done", response_id=response_id, item_id=item_id),
        srv(
            now + 20,
            "response.output_audio_transcript.done",
            response_id=response_id,
            item_id=item_id,
            transcript="w0 w1 w2",
        ),
        done(now + 21, response_id),
    ]
    return steps


# --- named scenarios -----------------------------------------------------------------


def ptt_turn_with_camera() -> list[Input]:
    return [
        *ready(),
        at(20, "camera", on=True),
        at(25, "frame", jpeg=JPEG),
        *hold(100),
        at(300, "frame", jpeg=JPEG),
        committed(310, "item_1", "evt_7"),
        srv(
            320,
            "conversation.item.input_audio_transcription.completed",
            item_id="item_1",
            transcript="what colour is this",
        ),
        *reply(330, "resp_1", "item_2"),
        at(345, "playback_started", response_id="resp_1"),
        at(1020, "timeout"),
        at(1021, "frame", jpeg=JPEG),
        at(1400, "playback_drained", response_id="resp_1", played_ms=60.0),
    ]


def b20_muted_hold() -> list[Input]:
    return [
        *ready(),
        at(20, "camera", on=True),
        at(21, "frame", jpeg=JPEG),
        at(30, "mute", muted=True),
        *hold(100),
        at(1020, "timeout"),
        at(1021, "frame", jpeg=JPEG),
        at(1100, "mute", muted=False),
    ]


def b20_hold_muted_midway_before_upload() -> list[Input]:
    return [
        *ready(),
        at(100, "press"),
        at(110, "mute", muted=True),
        mic(140),
        at(150, "mute", muted=False),
        at(160, "release"),
    ]


def b20_empty_hold() -> list[Input]:
    return [*ready(), at(20, "camera", on=True), at(100, "press"), at(130, "release")]


def b20_rejected_commit_while_another_pending() -> list[Input]:
    return [
        *ready(),
        *hold(100),  # commit evt_5
        *hold(300),  # commit evt_9
        error(500, "input_audio_buffer_empty", "evt_9"),
        committed(510, "item_1", "evt_5"),
        *reply(520, "resp_1", "item_2"),
    ]


def b20_quiet_hold_after_done_before_drain() -> list[Input]:
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        *reply(310, "resp_1", "item_2", chunks=6),
        at(320, "playback_started", response_id="resp_1"),
        *hold(400),  # quiet hold after response.done, reply still draining
        committed(600, "item_3", "evt_10", no_response=True),
        srv(601, "response.listen", reason="silence_or_noise"),
        at(700, "playback_drained", response_id="resp_1", played_ms=120.0),
    ]


def b20_quiet_hold_rejected_after_done_before_drain() -> list[Input]:
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        *reply(310, "resp_1", "item_2", chunks=6),
        at(320, "playback_started", response_id="resp_1"),
        *hold(400),
        error(600, "input_audio_buffer_empty", "evt_10"),
        at(700, "playback_drained", response_id="resp_1", played_ms=120.0),
    ]


def b20_no_response_two_pending_first_acknowledged_first() -> list[Input]:
    return [
        *ready(),
        *hold(100),  # evt_5
        *hold(300),  # evt_9
        committed(500, "item_1", "evt_5", no_response=True),
        srv(501, "response.listen", reason="silence_or_noise"),
        committed(510, "item_2", "evt_9"),
        *reply(520, "resp_1", "item_3"),
    ]


def b20_no_response_two_pending_second_acknowledged_first() -> list[Input]:
    return [
        *ready(),
        *hold(100),  # evt_5
        *hold(300),  # evt_9
        committed(500, "item_1", "evt_9", no_response=True),
        srv(501, "response.listen", reason="silence_or_noise"),
        committed(510, "item_2", "evt_5"),
        *reply(520, "resp_1", "item_3"),
    ]


def vad_turn(now: int, item_id: str) -> list[Input]:
    return [
        srv(now, "input_audio_buffer.speech_started", audio_start_ms=now, item_id=item_id),
        *[mic(now + 40 * i) for i in range(1, 4)],
        srv(now + 200, "input_audio_buffer.speech_stopped", audio_end_ms=now, item_id=item_id),
        committed(now + 201, item_id, None),
    ]


def b21_vad_speech_start_during_generation() -> list[Input]:
    return [
        *ready(),
        *vad_turn(100, "item_1"),
        created(310, "resp_1"),
        delta(320, "resp_1", "item_2"),
        at(330, "playback_started", response_id="resp_1"),
        delta(340, "resp_1", "item_2"),
        srv(400, "input_audio_buffer.speech_started", audio_start_ms=380, item_id="item_3"),
        delta(401, "resp_1", "item_2"),  # late audio of the interrupted reply
        at(402, "playback_stopped", response_id="resp_1", played_ms=35.0),
        done(403, "resp_1", "cancelled", "turn_detected"),
        delta(404, "resp_1", "item_2"),
    ]


def b21_vad_speech_start_after_generation_completed() -> list[Input]:
    return [
        *ready(),
        *vad_turn(100, "item_1"),
        *reply(310, "resp_1", "item_2", chunks=8),
        at(335, "playback_started", response_id="resp_1"),
        srv(400, "input_audio_buffer.speech_started", audio_start_ms=380, item_id="item_3"),
        at(401, "playback_stopped", response_id="resp_1", played_ms=60.0),
        srv(402, "output_audio_buffer.cleared", response_id="resp_1"),
        at(403, "playback_drained", response_id="resp_1", played_ms=160.0),
    ]


def b21_late_audio_of_older_response_after_interrupt() -> list[Input]:
    return [
        *ready(),
        *vad_turn(100, "item_1"),
        created(310, "resp_1"),
        delta(320, "resp_1", "item_2"),
        at(330, "playback_started", response_id="resp_1"),
        *vad_turn(400, "item_3"),  # barge-in, then a new turn
        done(401, "resp_1", "cancelled", "turn_detected"),
        created(610, "resp_2"),
        delta(611, "resp_2", "item_4"),
        delta(612, "resp_1", "item_2"),  # late: dropped
        srv(613, "output_audio_buffer.cleared", response_id="resp_1"),  # late: no effect
        at(614, "playback_stopped", response_id="resp_1", played_ms=20.0),
        at(620, "playback_started", response_id="resp_2"),
    ]


def b21_cancelled_done_and_cleared_clear_playback() -> list[Input]:
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        created(310, "resp_1"),
        delta(311, "resp_1", "item_2"),
        done(320, "resp_1", "cancelled", "client_cancelled"),
        at(321, "playback_stopped", response_id="resp_1", played_ms=0.0),
        *hold(400),
        committed(600, "item_3", "evt_10"),
        *reply(610, "resp_2", "item_4"),
        srv(640, "output_audio_buffer.cleared"),
        at(641, "playback_stopped", response_id="resp_2", played_ms=10.0),
    ]


def b21_stop_button() -> list[Input]:
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        created(310, "resp_1"),
        delta(311, "resp_1", "item_2"),
        at(320, "stop_reply"),
        srv(330, "output_audio_buffer.cleared", response_id="resp_1"),
        done(331, "resp_1", "cancelled", "output_audio_buffer_clear"),
        at(332, "playback_stopped", response_id="resp_1", played_ms=5.0),
    ]


def b22_vad_frames_ride_with_speech_appends() -> list[Input]:
    return [
        *ready(),
        at(20, "camera", on=True),
        at(21, "frame", jpeg=JPEG),
        mic(60),
        mic(100),
        at(1020, "timeout"),
        at(1021, "frame", jpeg=JPEG),
        at(1022, "frame", jpeg=JPEG + "D"),
        mic(1040),
        at(1100, "mute", muted=True),
        at(2020, "timeout"),
        at(2021, "frame", jpeg=JPEG),
        at(2100, "mute", muted=False),
        at(2200, "camera", on=False),
        at(3020, "timeout"),
    ]


def b22_ptt_camera_cadence_outside_recording() -> list[Input]:
    steps = [*ready(), at(20, "camera", on=True), at(21, "frame", jpeg=JPEG)]
    for second in range(1, 4):
        steps += [at(20 + 1000 * second, "timeout"), at(21 + 1000 * second, "frame", jpeg=JPEG)]
    steps += [
        at(3500, "press"),
        mic(3540),
        at(4020, "timeout"),
        at(4021, "frame", jpeg=JPEG),  # rides with the next append
        mic(4060),
        at(4500, "timeout"),  # not due
        at(4600, "press"),  # ignored: already held
        at(4700, "release"),
        at(5020, "timeout"),
        at(5021, "frame", jpeg=JPEG),
    ]
    return steps


def b23_watchdog_each_terminal_path() -> list[Input]:
    return [
        *ready(),
        # done
        *hold(100),
        committed(300, "item_1", "evt_5"),
        *reply(310, "resp_1", "item_2"),
        # no_response
        *hold(400),
        committed(600, "item_3", "evt_10", no_response=True),
        # rejection
        *hold(700),
        error(900, "input_backpressure", "evt_15"),
        # interrupt (stop button) and failed done
        *hold(1000),
        committed(1200, "item_4", "evt_20"),
        created(1210, "resp_2"),
        delta(1211, "resp_2", "item_5"),
        at(1220, "stop_reply"),
        *hold(1300),
        committed(1500, "item_6", "evt_26"),
        created(1510, "resp_3"),
        srv(1511, "error", error={"type": "server_error", "code": "stage_failed", "message": "x"}),
        done(1512, "resp_3", "failed", "stage_failed"),
    ]


def b23_watchdog_vad_interrupt_and_done() -> list[Input]:
    return [
        *ready(),
        *vad_turn(100, "item_1"),
        created(310, "resp_1"),
        delta(320, "resp_1", "item_2"),
        srv(400, "input_audio_buffer.speech_started", audio_start_ms=380, item_id="item_3"),
        done(401, "resp_1", "cancelled", "turn_detected"),
        mic(440),
        srv(600, "input_audio_buffer.speech_stopped", audio_end_ms=580, item_id="item_3"),
        committed(601, "item_3", None, no_response=True),
        *vad_turn(700, "item_4"),
        *reply(910, "resp_2", "item_5"),
    ]


def b23_watchdog_expiry_ends_the_call() -> list[Input]:
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        at(60_000, "timeout"),
        *hold(70_000),  # restarts the timer
        at(120_300, "timeout"),  # not due any more
        at(190_200, "timeout"),
        mic(190_300),
        srv(190_400, "response.created", response={"id": "resp_1"}),
    ]


def call_lifecycle_errors_are_notices() -> list[Input]:
    return [
        *ready(),
        error(100, "invalid_video_frames", "evt_99"),
        error(110, "unknown_event", None),
        at(120, "server_text", text="{not json"),
        at(121, "server_text", text="[1, 2]"),
        srv(130, "rate_limits.updated", rate_limits=[]),
        srv(140, "session.closed", reason="idle_timeout"),
        at(150, "press"),
        at(160, "disconnected", reason="socket_closed"),
    ]


def handshake_refused() -> list[Input]:
    return [at(0, "connected"), error(10, "unsupported_turn_detection", "evt_1"), at(20, "press")]


def handshake_timeout() -> list[Input]:
    return [at(0, "connected"), at(14_999, "timeout"), at(15_000, "timeout")]


def b31_follow_up_reply_plays_like_any_reply() -> list[Input]:
    """A delegated question: the note answers the hold; the background answer comes as a
    response the server created (no hold of its own), played and shown like any reply; a
    later background failure is a notice."""
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        *reply(330, "resp_1", "item_2"),
        at(345, "playback_started", response_id="resp_1"),
        at(400, "playback_drained", response_id="resp_1", played_ms=3.0),
        *reply(900, "resp_2", "item_3"),
        at(915, "playback_started", response_id="resp_2"),
        at(960, "playback_drained", response_id="resp_2", played_ms=3.0),
        srv(
            1200,
            "error",
            error={
                "type": "server_error",
                "code": "delegation_failed",
                "message": "the background model did not answer",
            },
        ),
    ]


def _call_done(now: int, response_id: str, call_id: str, status: str = "completed") -> Input:
    item = {
        "id": f"item_{call_id}",
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": status,
    }
    return srv(now, "response.output_item.done", response_id=response_id, item=item)


def b39_function_calls_are_run_answered_and_followed_up() -> list[Input]:
    """A response makes two calls (one answered before its done, one after) and a cut
    one: the completed calls are to be run, the cut one shown only; the follow-up is asked
    for once, when the response is done and both are answered; a second answer sends
    nothing."""
    return [
        *ready(),
        *hold(100),
        committed(300, "item_1", "evt_5"),
        created(330, "resp_1"),
        _call_done(340, "resp_1", "call_1"),
        _call_done(345, "resp_1", "call_2"),
        _call_done(346, "resp_1", "call_3", status="incomplete"),
        at(350, "function_output", call_id="call_1", output="sunny"),
        srv(
            355,
            "conversation.item.added",
            item={"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ),
        done(360, "resp_1"),
        at(370, "function_output", call_id="call_2", output="21 C"),
        at(380, "function_output", call_id="call_2", output="again"),
        at(390, "function_output", call_id="call_3", output="cut"),
    ]


def b33_vad_live_transcript_then_completed() -> list[Input]:
    return [
        *ready(),
        srv(100, "input_audio_buffer.speech_started", audio_start_ms=100, item_id="item_1"),
        mic(140),
        srv(
            150,
            "conversation.item.input_audio_transcription.delta",
            item_id="item_1",
            delta="what colour",
        ),
        mic(180),
        srv(
            190,
            "conversation.item.input_audio_transcription.delta",
            item_id="item_1",
            delta=" is this",
        ),
        srv(300, "input_audio_buffer.speech_stopped", audio_end_ms=300, item_id="item_1"),
        committed(301, "item_1", None),
        srv(
            320,
            "conversation.item.input_audio_transcription.completed",
            item_id="item_1",
            transcript="What colour is this?",
        ),
    ]


def track_reply(now: int, response_id: str, item_id: str, chunks: int = 3) -> list[Input]:
    """A reply on a WebRTC call: no audio delta; the server's output buffer starts it."""
    steps = [
        created(now, response_id),
        srv(now + 5, "output_audio_buffer.started", response_id=response_id),
    ]
    for i in range(chunks):
        steps.append(_transcript_piece(now + 10 + i, response_id, item_id, i))
    steps += [
        srv(now + 20, "response.output_audio.done", response_id=response_id, item_id=item_id),
        done(now + 21, response_id),
    ]
    return steps


def b36_tracks_vad_turn_camera_and_barge_in() -> list[Input]:
    """Over WebRTC: no appends and no captures (the tracks carry them), the server's
    output buffer starts and stops the playback, a barge-in clears it (no ack)."""
    return [
        *ready(),
        at(20, "camera", on=True),
        *vad_turn(100, "item_1"),
        at(1100, "timeout"),
        *track_reply(310, "resp_1", "item_2"),
        srv(900, "output_audio_buffer.stopped", response_id="resp_1"),
        *vad_turn(1000, "item_3"),
        *track_reply(1210, "resp_2", "item_4"),
        srv(1300, "input_audio_buffer.speech_started", audio_start_ms=1290, item_id="item_5"),
        srv(1301, "output_audio_buffer.cleared", response_id="resp_2"),
        srv(1302, "output_audio_buffer.stopped", response_id="resp_2"),
        srv(1303, "output_audio_buffer.started", response_id="resp_2"),
        at(1304, "stop_reply"),
        at(1310, "camera", on=False),
    ]


def b36_tracks_ptt_hold_clears_the_streamed_audio_first() -> list[Input]:
    """Push-to-talk over WebRTC: a press clears what the track streamed before it; the
    hold still counts its samples (the audio clock) and commits on release."""
    return [
        *ready(),
        *[mic(20 + 40 * i) for i in range(2)],
        *hold(100),
        committed(310, "item_1", "evt_3"),
        *track_reply(330, "resp_1", "item_2"),
        srv(700, "output_audio_buffer.stopped", response_id="resp_1"),
        at(720, "mute", muted=True),
        *hold(800),
    ]


def started(now: int, response_id: str) -> Input:
    return srv(now, "output_audio_buffer.started", response_id=response_id)


def b21_tracks_barge_in_mutes_the_cut_reply_until_the_next_starts() -> list[Input]:
    """The reply gate of a call: a barge-in mutes the cut reply's track at once; its late
    `output_audio_buffer.started` keeps it muted; the next reply's start unmutes it."""
    return [
        *ready(),
        *vad_turn(100, "item_1"),
        created(310, "resp_1"),
        started(315, "resp_1"),
        srv(400, "input_audio_buffer.speech_started", audio_start_ms=390, item_id="item_3"),
        srv(401, "output_audio_buffer.cleared", response_id="resp_1"),
        started(402, "resp_1"),  # the cut reply's late start
        srv(600, "input_audio_buffer.speech_stopped", audio_end_ms=590, item_id="item_3"),
        committed(601, "item_3", None),
        created(700, "resp_2"),
        started(705, "resp_2"),
        srv(900, "output_audio_buffer.stopped", response_id="resp_2"),
    ]


def b21_tracks_clear_of_every_reply_mutes_each_live_one() -> list[Input]:
    """The stop button (a clear of every reply) with two replies live on the track: both
    are cut and their late starts keep it muted; a cancelled response.done of one still
    live cuts it too; a third reply's start unmutes."""
    return [
        *ready(),
        created(100, "resp_1"),
        started(105, "resp_1"),
        created(110, "resp_2"),
        started(115, "resp_2"),
        at(200, "stop_reply"),
        started(201, "resp_2"),
        started(202, "resp_1"),
        created(300, "resp_3"),
        started(305, "resp_3"),
        created(400, "resp_4"),
        started(405, "resp_4"),
        done(410, "resp_4", "cancelled"),
        started(411, "resp_4"),
        created(500, "resp_5"),
        started(505, "resp_5"),
    ]


# --- resume through a network drop (B42) ------------------------------------------------


def numbered(steps: list[Input], first_seq: int) -> list[Input]:
    """`steps` with each server event numbered from `first_seq` on, as a resumable
    session's server numbers them (`server_event_seq`)."""
    seq = first_seq
    out: list[Input] = []
    for step in steps:
        if step["kind"] == "server":
            step = {**step, "event": {**step["event"], "server_event_seq": seq}}
            seq += 1
        out.append(step)
    return out


def ready_resumable(now: int = 0) -> list[Input]:
    """The handshake of a resumable session: `session.created` names the first token."""
    return [
        at(now, "connected"),
        srv(
            now + 5,
            "session.created",
            session={"id": "sess_1"},
            resume_token="tok_1",
            attachment_generation=1,
            server_event_seq=1,
        ),
        srv(now + 10, "session.updated", session={"id": "sess_1"}, server_event_seq=2),
    ]


def resumed(now: int, token: str, replay_from: int, last: int) -> Input:
    return srv(
        now,
        "session.resumed",
        session_id="sess_1",
        resume_token=token,
        attachment_generation=2,
        replay_from_seq=replay_from,
        last_server_event_seq=last,
    )


def retimed(steps: list[Input], now: int) -> list[Input]:
    """`steps` again, one ms apart from `now` on (a replay arrives after the drop)."""
    return [{**step, "now_ms": now + i} for i, step in enumerate(steps)]


def b42_drop_mid_reply_resumes_and_the_replay_applies_once() -> list[Input]:
    """A reply streams; the socket fails mid-reply; one backoff later the host opens a new
    socket, which sends session.resume with the cursor; the replay resends the last event
    already applied (skipped: no second transcript piece) and then what the drop missed;
    the reply finishes and the next turn works in the same session."""
    first = numbered(reply(300, "resp_1", "item_2", chunks=3), 6)  # seq 6..15
    return [
        *ready_resumable(),  # seq 1..2
        *numbered(vad_turn(100, "item_1"), 3),  # seq 3..5
        *first[:3],  # created, the first chunk and its transcript piece: up to seq 8
        at(312, "playback_started", response_id="resp_1"),
        at(330, "disconnected", reason="socket_closed:1006", jitter=0.2),
        mic(350),  # hands-free: nothing goes out while the link is down
        at(480, "timeout"),  # the first attempt: reconnect
        at(500, "connected"),  # the new socket: session.resume {last: 8}
        resumed(520, "tok_2", 9, 15),
        *retimed(first[2:], 521),  # seq 8 again (skipped), then 9..15
        at(560, "playback_drained", response_id="resp_1", played_ms=3.0),
        *numbered(vad_turn(600, "item_3"), 16),
        *numbered(reply(820, "resp_2", "item_4", chunks=1), 19),
    ]


def b42_ptt_hold_cut_by_the_drop_is_cleared_on_resume() -> list[Input]:
    """The link drops while the button is down: the hold is cut (no commit), the camera
    and the button pause; the playback ack of a reply drained during the drop waits; the
    first attempt's socket fails too, so the second waits a doubled backoff; on resume the
    held ack goes out, the cut hold's audio is cleared from the server's input buffer,
    the camera resumes and the next hold commits as usual."""
    return [
        *ready_resumable(),
        at(20, "camera", on=True),
        at(30, "frame", jpeg=JPEG),
        *numbered(reply(40, "resp_0", "item_0", chunks=1), 3),  # seq 3..8
        at(70, "playback_started", response_id="resp_0"),
        *hold(100, chunks=2)[:-1],  # press and two uploads, no release yet
        at(200, "disconnected", reason="socket_closed:1006", jitter=0.0),
        at(205, "playback_drained", response_id="resp_0", played_ms=1.0),
        at(210, "release"),
        at(220, "press"),
        mic(230),
        at(240, "release"),
        at(330, "timeout"),  # attempt 1
        at(400, "disconnected", reason="connection_refused", jitter=1.0),
        at(900, "timeout"),  # attempt 2, after 2 x 250 ms
        at(950, "connected"),
        resumed(970, "tok_2", 9, 8),
        *hold(1000, chunks=2),
        *numbered(
            [committed(1200, "item_1", "evt_10"), *reply(1210, "resp_1", "item_2", chunks=1)], 9
        ),
    ]


def b42_resume_after_the_grace_is_refused_and_the_call_is_lost() -> list[Input]:
    """The server forgot the session (its resume grace expired): `unknown_session` loses
    the call at once, with a notice saying that Connect starts a new session."""
    return [
        *ready_resumable(),
        at(100, "disconnected", reason="socket_closed:1006", jitter=0.5),
        at(300, "timeout"),
        at(320, "connected"),
        error(330, "unknown_session", "evt_2"),
        at(340, "disconnected", reason="socket_closed:1008", jitter=0.5),
        at(350, "press"),
    ]


def b42_attempts_end_after_the_give_up_time() -> list[Input]:
    """Every attempt's socket fails; backoffs double up to the cap; no attempt starts
    later than the give-up time after the drop: the call is lost."""
    steps: list[Input] = [*ready_resumable(), at(100, "disconnected", jitter=0.5)]
    now = 100
    for _ in range(15):
        now += 2_000
        steps.append(at(now, "timeout"))
        steps.append(at(now + 50, "disconnected", reason="connection_refused", jitter=0.5))
        now += 50
    return steps


def b42_an_attempt_that_hangs_is_abandoned() -> list[Input]:
    """A socket that opens no session.resumed within the attempt timeout is abandoned
    (`abandon_socket`); its late close changes nothing; the next attempt resumes."""
    return [
        *ready_resumable(),
        at(100, "disconnected", jitter=0.5),
        at(300, "timeout"),
        at(5_300, "timeout"),  # attempt 1's deadline: abandon it, back off
        at(5_310, "disconnected", reason="socket_closed:1006", jitter=0.5),
        at(5_800, "timeout"),
        at(5_820, "connected"),
        resumed(5_840, "tok_2", 3, 2),
    ]


def b42_resync_required_cuts_the_reply_in_flight() -> list[Input]:
    """The journal lost events of the drop: the reply in flight is cut (its local audio
    cleared, its hold settled), not continued, and a notice says so."""
    return [
        *ready_resumable(),
        *numbered(vad_turn(100, "item_1"), 3),
        *numbered(reply(300, "resp_1", "item_2", chunks=3)[:3], 6),
        at(330, "disconnected", jitter=0.5),
        at(520, "timeout"),
        at(540, "connected"),
        resumed(560, "tok_2", 9, 40),
        srv(561, "session.resync_required", reason="journal_overflow", last_server_event_seq=40),
        srv(
            570,
            "response.output_audio.delta",
            response_id="resp_1",
            delta=REPLY_CHUNK,
            server_event_seq=41,
        ),
    ]


def b42_tracks_drop_stops_the_microphone_track_until_the_resume() -> list[Input]:
    """On a call's media (the WebRTC data channel is the link): the microphone track stops
    while the link is down and is sent again once resumed; the replay finishes the reply."""
    first = numbered(track_reply(300, "resp_1", "item_2", chunks=2), 6)
    return [
        *ready_resumable(),
        *numbered(vad_turn(100, "item_1"), 3),
        *first[:3],
        at(330, "disconnected", jitter=0.5),
        at(520, "timeout"),
        at(540, "connected"),
        resumed(560, "tok_2", 9, 11),
        *retimed(first[3:], 561),
    ]


def b42_hang_up_of_a_resumed_call_closes_the_session_first() -> list[Input]:
    return [
        *ready_resumable(),
        at(50, "disconnected", jitter=0.5),
        at(250, "timeout"),
        at(260, "connected"),
        resumed(270, "tok_2", 3, 2),
        at(280, "hang_up"),  # ready and resumable: session.close first, then the close
    ]


def b42_hang_up_while_reconnecting_ends_the_call() -> list[Input]:
    return [
        *ready_resumable(),
        at(100, "disconnected", jitter=0.5),
        at(300, "timeout"),
        at(310, "hang_up"),
        at(320, "connected"),
        at(330, "timeout"),
    ]


def b42_a_silent_link_is_probed_then_dropped() -> list[Input]:
    """No close reaches the client (a tunnel): while it sends and hears nothing for the
    quiet time it sends session.heartbeat; an answer keeps the link; a second quiet spell
    whose probe goes unanswered drops it (the socket abandoned) and the resume follows."""
    return [
        *ready_resumable(),  # last heard at 10
        mic(100),  # sent
        at(4_010, "timeout"),  # quiet for 4 s while sending: the probe
        srv(4_050, "session.heartbeat_ack", server_event_seq=3),
        mic(4_100),
        at(8_050, "timeout"),  # quiet again: a second probe
        at(12_050, "timeout"),  # unanswered: the link is dropped
        at(12_300, "timeout"),  # the first attempt
        at(12_320, "connected"),
        resumed(12_340, "tok_2", 4, 3),
    ]


def b42_a_session_without_a_token_ends_on_a_drop() -> list[Input]:
    """A session the server did not make resumable (no token) ends as before."""
    return [*ready(), at(100, "disconnected", reason="socket_closed:1006", jitter=0.5)]


SCENARIOS: dict[str, tuple[str, dict[str, Any], Callable[[], list[Input]]]] = {
    "ptt_turn_with_camera": ("ptt", {}, ptt_turn_with_camera),
    "b39_function_calls_are_run_answered_and_followed_up": (
        "ptt",
        {},
        b39_function_calls_are_run_answered_and_followed_up,
    ),
    "b31_follow_up_reply_plays_like_any_reply": (
        "ptt",
        {},
        b31_follow_up_reply_plays_like_any_reply,
    ),
    "b20_muted_hold": ("ptt", {}, b20_muted_hold),
    "b20_hold_muted_midway_before_upload": ("ptt", {}, b20_hold_muted_midway_before_upload),
    "b20_empty_hold": ("ptt", {}, b20_empty_hold),
    "b20_rejected_commit_while_another_pending": (
        "ptt",
        {},
        b20_rejected_commit_while_another_pending,
    ),
    "b20_quiet_hold_after_done_before_drain": ("ptt", {}, b20_quiet_hold_after_done_before_drain),
    "b20_quiet_hold_rejected_after_done_before_drain": (
        "ptt",
        {},
        b20_quiet_hold_rejected_after_done_before_drain,
    ),
    "b20_no_response_two_pending_first_acknowledged_first": (
        "ptt",
        {},
        b20_no_response_two_pending_first_acknowledged_first,
    ),
    "b20_no_response_two_pending_second_acknowledged_first": (
        "ptt",
        {},
        b20_no_response_two_pending_second_acknowledged_first,
    ),
    "b21_vad_speech_start_during_generation": ("vad", {}, b21_vad_speech_start_during_generation),
    "b33_vad_live_transcript_then_completed": ("vad", {}, b33_vad_live_transcript_then_completed),
    "b21_vad_speech_start_after_generation_completed": (
        "vad",
        {},
        b21_vad_speech_start_after_generation_completed,
    ),
    "b21_late_audio_of_older_response_after_interrupt": (
        "vad",
        {},
        b21_late_audio_of_older_response_after_interrupt,
    ),
    "b21_cancelled_done_and_cleared_clear_playback": (
        "ptt",
        {},
        b21_cancelled_done_and_cleared_clear_playback,
    ),
    "b21_stop_button": ("ptt", {}, b21_stop_button),
    "b22_vad_frames_ride_with_speech_appends": ("vad", {}, b22_vad_frames_ride_with_speech_appends),
    "b22_ptt_camera_cadence_outside_recording": (
        "ptt",
        {},
        b22_ptt_camera_cadence_outside_recording,
    ),
    "b23_watchdog_each_terminal_path": ("ptt", {}, b23_watchdog_each_terminal_path),
    "b23_watchdog_vad_interrupt_and_done": ("vad", {}, b23_watchdog_vad_interrupt_and_done),
    "b23_watchdog_expiry_ends_the_call": ("ptt", {}, b23_watchdog_expiry_ends_the_call),
    "call_lifecycle_errors_are_notices": ("vad", {}, call_lifecycle_errors_are_notices),
    "handshake_refused": ("ptt", {}, handshake_refused),
    "handshake_timeout": ("vad", {}, handshake_timeout),
    "b21_tracks_barge_in_mutes_the_cut_reply_until_the_next_starts": (
        "vad",
        {"media": "tracks"},
        b21_tracks_barge_in_mutes_the_cut_reply_until_the_next_starts,
    ),
    "b21_tracks_clear_of_every_reply_mutes_each_live_one": (
        "vad",
        {"media": "tracks"},
        b21_tracks_clear_of_every_reply_mutes_each_live_one,
    ),
    "b36_tracks_vad_turn_camera_and_barge_in": (
        "vad",
        {"media": "tracks"},
        b36_tracks_vad_turn_camera_and_barge_in,
    ),
    "b36_tracks_ptt_hold_clears_the_streamed_audio_first": (
        "ptt",
        {"media": "tracks"},
        b36_tracks_ptt_hold_clears_the_streamed_audio_first,
    ),
    "b42_drop_mid_reply_resumes_and_the_replay_applies_once": (
        "vad",
        {},
        b42_drop_mid_reply_resumes_and_the_replay_applies_once,
    ),
    "b42_ptt_hold_cut_by_the_drop_is_cleared_on_resume": (
        "ptt",
        {},
        b42_ptt_hold_cut_by_the_drop_is_cleared_on_resume,
    ),
    "b42_resume_after_the_grace_is_refused_and_the_call_is_lost": (
        "ptt",
        {},
        b42_resume_after_the_grace_is_refused_and_the_call_is_lost,
    ),
    "b42_attempts_end_after_the_give_up_time": ("ptt", {}, b42_attempts_end_after_the_give_up_time),
    "b42_an_attempt_that_hangs_is_abandoned": ("vad", {}, b42_an_attempt_that_hangs_is_abandoned),
    "b42_resync_required_cuts_the_reply_in_flight": (
        "vad",
        {},
        b42_resync_required_cuts_the_reply_in_flight,
    ),
    "b42_hang_up_while_reconnecting_ends_the_call": (
        "ptt",
        {},
        b42_hang_up_while_reconnecting_ends_the_call,
    ),
    "b42_hang_up_of_a_resumed_call_closes_the_session_first": (
        "vad",
        {"media": "tracks"},
        b42_hang_up_of_a_resumed_call_closes_the_session_first,
    ),
    "b42_a_silent_link_is_probed_then_dropped": (
        "vad",
        {},
        b42_a_silent_link_is_probed_then_dropped,
    ),
    "b42_a_session_without_a_token_ends_on_a_drop": (
        "vad",
        {},
        b42_a_session_without_a_token_ends_on_a_drop,
    ),
    "b42_tracks_drop_stops_the_microphone_track_until_the_resume": (
        "vad",
        {"media": "tracks"},
        b42_tracks_drop_stops_the_microphone_track_until_the_resume,
    ),
}


# --- random walks ----------------------------------------------------------------------


def random_walk(
    seed: int, mode: str, media: str = "events", *, resumable: bool = False
) -> Iterator[Callable[[ClientProtocol], Input]]:
    """Input makers that look at the protocol's state to pick plausible ids. A resumable
    walk numbers the server's events (now and then resending a recent one, as a replay
    does) and drops, reconnects and resumes its link."""
    rng = random.Random(seed)
    clock = [0]
    responses = [0]
    items = [0]

    def tick(low: int = 1, high: int = 60) -> int:
        clock[0] += rng.randint(low, high)
        return clock[0]

    def known_response(p: ClientProtocol) -> str:
        ids = list(p.playbacks) or [f"resp_{max(1, responses[0])}"]
        return rng.choice(ids)

    def new_item() -> str:
        items[0] += 1
        return f"item_{items[0]}"

    def server_commit(p: ClientProtocol) -> Input:
        pending = list(p.pending_commits)
        no_response = rng.random() < 0.3
        if pending and rng.random() < 0.85:
            return committed(tick(), new_item(), rng.choice(pending), no_response=no_response)
        return committed(tick(), new_item(), None, no_response=no_response)

    def server_error(p: ClientProtocol) -> Input:
        pending = list(p.pending_commits)
        choice = rng.choice([*pending, None, "evt_999"]) if pending else rng.choice([None, "x"])
        return error(tick(), rng.choice(["input_audio_buffer_empty", "input_backpressure"]), choice)

    def new_response(p: ClientProtocol) -> Input:
        responses[0] += 1
        return created(tick(), f"resp_{responses[0]}")

    def audio(p: ClientProtocol) -> Input:
        rid = f"resp_{max(1, responses[0])}" if rng.random() < 0.7 else known_response(p)
        return delta(tick(), rid, f"item_a{rid}")

    def finish(p: ClientProtocol) -> Input:
        rid = f"resp_{max(1, responses[0])}" if rng.random() < 0.7 else known_response(p)
        if rng.random() < 0.5:
            return srv(tick(), "response.output_audio.done", response_id=rid, item_id="x")
        status = rng.choice(["completed", "completed", "cancelled", "failed"])
        return done(tick(), rid, status, "turn_detected" if status == "cancelled" else None)

    def report(p: ClientProtocol) -> Input:
        rid = known_response(p)
        kind = rng.choice(["playback_started", "playback_stopped", "playback_drained"])
        if kind == "playback_started":
            return at(tick(), kind, response_id=rid)
        return at(tick(), kind, response_id=rid, played_ms=float(rng.randint(0, 400)))

    def speech(p: ClientProtocol) -> Input:
        item = new_item()
        if rng.random() < 0.5:
            return srv(tick(), "input_audio_buffer.speech_started", audio_start_ms=0, item_id=item)
        return srv(tick(), "input_audio_buffer.speech_stopped", audio_end_ms=0, item_id=item)

    def cleared(p: ClientProtocol) -> Input:
        if rng.random() < 0.3:
            return srv(tick(), "output_audio_buffer.cleared")
        return srv(tick(), "output_audio_buffer.cleared", response_id=known_response(p))

    makers: list[tuple[float, Callable[[ClientProtocol], Input]]] = [
        (3, lambda p: at(tick(), "press")),
        (3, lambda p: at(tick(), "release")),
        (1, lambda p: at(tick(), "mute", muted=rng.random() < 0.5)),
        (1, lambda p: at(tick(), "camera", on=rng.random() < 0.7)),
        (5, lambda p: mic(tick())),
        (2, lambda p: at(tick(), "frame", jpeg=JPEG)),
        (2, lambda p: at(tick(200, 1500), "timeout")),
        (3, server_commit),
        (1, server_error),
        (2, new_response),
        (4, audio),
        (2, finish),
        (3, report),
        (2 if mode == "vad" else 0.2, speech),
        (1, cleared),
        (0.5, lambda p: at(tick(), "stop_reply")),
    ]
    if media == "tracks":  # a WebRTC call: the server's output buffer reports playback

        def track(p: ClientProtocol) -> Input:
            rid = f"resp_{max(1, responses[0])}" if rng.random() < 0.7 else known_response(p)
            kind = rng.choice(["started", "started", "stopped"])
            return srv(tick(), f"output_audio_buffer.{kind}", response_id=rid)

        makers.append((4, track))
    if resumable:
        makers += [
            (1, lambda p: at(tick(), "disconnected", jitter=rng.random())),
            (1, lambda p: at(tick(), "connected")),
            (1, lambda p: resumed(tick(), f"tok_{rng.randint(2, 99)}", 0, 0)),
            (0.1, lambda p: error(tick(), "unknown_session", None)),
            (0.3, lambda p: at(tick(), "hang_up") if rng.random() < 0.3 else mic(tick())),
        ]
    weights = [w for w, _ in makers]
    seq = [2]  # the handshake's two events (`ready_resumable`)
    while True:
        maker = rng.choices([m for _, m in makers], weights)[0]
        if not resumable:
            yield maker
            continue

        def numbered_maker(p: ClientProtocol, maker: Any = maker) -> Input:
            entry = maker(p)
            event = entry.get("event")
            if entry["kind"] != "server" or event["type"] == "session.resumed":
                return entry
            if rng.random() < 0.1 and seq[0] > 2:  # a replay of an event applied already
                number = seq[0] - rng.randint(0, 2)
            else:
                seq[0] += 1
                number = seq[0]
            return {**entry, "event": {**event, "server_event_seq": number}}

        yield numbered_maker


def run(mode: str, options: dict[str, Any], inputs: list[Input]) -> list[dict[str, Any]]:
    protocol = ClientProtocol(mode, **options)
    return [
        {"input": entry, "outputs": protocol.step(entry), "snapshot": protocol.snapshot()}
        for entry in inputs
    ]


def random_trace(seed: int) -> dict[str, Any]:
    mode = "vad" if seed % 2 else "ptt"
    options: dict[str, Any] = {"camera": seed % 3 == 0}
    media = "tracks" if seed % 4 >= 2 and seed >= RANDOM_TRACES else "events"
    if media == "tracks":
        options["media"] = media
    resumable = seed >= RANDOM_TRACES and seed % 5 == 4
    protocol = ClientProtocol(mode, **options)
    steps: list[dict[str, Any]] = []
    for entry in ready_resumable() if resumable else ready():
        steps.append(
            {"input": entry, "outputs": protocol.step(entry), "snapshot": protocol.snapshot()}
        )
    walk = random_walk(seed, mode, media, resumable=resumable)
    for _ in range(RANDOM_STEPS):
        entry = next(walk)(protocol)
        steps.append(
            {"input": entry, "outputs": protocol.step(entry), "snapshot": protocol.snapshot()}
        )
    return {"name": f"random_{seed:02d}", "mode": mode, "options": options, "steps": steps}


def build_traces() -> dict[str, dict[str, Any]]:
    """Every trace by file name."""
    traces: dict[str, dict[str, Any]] = {}
    for name, (mode, options, make) in SCENARIOS.items():
        traces[f"{name}.json"] = {
            "name": name,
            "mode": mode,
            "options": options,
            "steps": run(mode, options, make()),
        }
    for seed in (*range(RANDOM_TRACES), *TRACK_SEEDS, *RESUME_SEEDS):
        trace = random_trace(seed)
        traces[f"{trace['name']}.json"] = trace
    return traces


def render(trace: dict[str, Any]) -> str:
    """Compact JSON, one step per line (small files, readable diffs)."""
    head = {key: trace[key] for key in ("name", "mode", "options")}
    steps = ",\n".join(json.dumps(step, separators=(",", ":")) for step in trace["steps"])
    return json.dumps(head)[:-1] + ', "steps": [\n' + steps + "\n]}\n"
