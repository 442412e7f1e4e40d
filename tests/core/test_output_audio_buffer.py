"""B36: what a WebRTC call says about the reply audio it plays (`OutputAudioBuffer`).

The machine is driven the way the call's pacer drives it: chunks queued as the session
sends them, 20 ms frames paced out (each response's share), `response.done`, the queue
running dry, the session's clears. A Hypothesis program of those steps must keep the
table's invariants O1-O4 at every step.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.outbox import Outbox
from core.statemachines.output_audio_buffer import OutputAudioBuffer
from spec import events as ev
from spec.tables import OutputBufferState

FRAME_MS = 20.0


def _events(out: Outbox) -> list[tuple[str, str]]:
    return [
        (str(type(e).__struct_config__.tag), e.response_id)  # type: ignore[union-attr]
        for e in out.drain()
    ]


def test_b36_started_goes_out_with_a_responses_first_paced_frame() -> None:
    out = Outbox(event_prefix="event_call")
    buffer = OutputAudioBuffer(out)
    buffer.queued("resp_1", 100.0)
    assert _events(out) == []  # queued is not played
    buffer.paced("resp_1", FRAME_MS)
    assert _events(out) == [("output_audio_buffer.started", "resp_1")]
    buffer.paced("resp_1", FRAME_MS)
    assert _events(out) == []
    assert buffer.state is OutputBufferState.PLAYING


def test_b36_stopped_waits_for_response_done_and_the_last_sample() -> None:
    out = Outbox()
    buffer = OutputAudioBuffer(out)
    buffer.queued("resp_1", 40.0)
    buffer.paced("resp_1", 40.0)
    out.drain()
    buffer.ran_dry()  # generation is still going: a gap, not the end (O2)
    assert _events(out) == []
    buffer.queued("resp_1", 20.0)
    buffer.finished("resp_1")
    buffer.paced("resp_1", 20.0)
    buffer.ran_dry()
    assert _events(out) == [("output_audio_buffer.stopped", "resp_1")]
    assert buffer.state is OutputBufferState.IDLE


def test_b36_a_clear_ends_playing_without_a_stop() -> None:
    out = Outbox()
    buffer = OutputAudioBuffer(out)
    buffer.queued("resp_1", 200.0)
    buffer.paced("resp_1", FRAME_MS)
    out.drain()
    assert buffer.cleared("resp_1") is True  # the pacer drops the queue (O3)
    buffer.finished("resp_1")
    buffer.ran_dry()
    assert _events(out) == []  # the session's own `cleared` said it
    assert buffer.state is OutputBufferState.IDLE


def test_b36_a_clear_of_another_response_keeps_the_playing_one() -> None:
    out = Outbox()
    buffer = OutputAudioBuffer(out)
    buffer.queued("resp_2", 100.0)
    buffer.paced("resp_2", FRAME_MS)
    assert buffer.cleared("resp_1") is False
    assert buffer.state is OutputBufferState.PLAYING


def test_b36_a_response_that_follows_another_stops_it_and_starts_itself() -> None:
    out = Outbox()
    buffer = OutputAudioBuffer(out)
    buffer.queued("resp_1", 20.0)
    buffer.finished("resp_1")
    buffer.queued("resp_2", 20.0)
    buffer.paced("resp_1", 10.0)
    buffer.paced("resp_2", 10.0)  # both in one frame: no gap between them
    assert _events(out) == [
        ("output_audio_buffer.started", "resp_1"),
        ("output_audio_buffer.stopped", "resp_1"),
        ("output_audio_buffer.started", "resp_2"),
    ]


def test_b36_the_played_position_never_passes_what_was_generated() -> None:
    buffer = OutputAudioBuffer(Outbox())
    buffer.queued("resp_1", 30.0)
    buffer.paced("resp_1", 20.0)
    assert buffer.ack_due() == ("resp_1", 20.0)
    assert buffer.ack_due() is None  # reported once until it moves
    buffer.paced("resp_1", 20.0)
    assert buffer.ack_due() == ("resp_1", 30.0)  # O4


def test_b36_kept_positions_are_bounded() -> None:
    buffer = OutputAudioBuffer(Outbox())
    for n in range(50):
        rid = f"resp_{n}"
        buffer.queued(rid, 20.0)
        buffer.finished(rid)
        buffer.paced(rid, 20.0)
        buffer.ran_dry()
    assert len(buffer._positions) <= 4


_STEP = st.one_of(
    st.tuples(st.just("queue"), st.integers(1, 3), st.sampled_from([10.0, 20.0, 60.0])),
    st.tuples(st.just("pace"), st.integers(0, 0), st.sampled_from([5.0, 20.0])),
    st.tuples(st.just("done"), st.integers(1, 3), st.just(0.0)),
    st.tuples(st.just("clear"), st.integers(0, 3), st.just(0.0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=60))
def test_b36_random_pacing_keeps_the_output_buffer_invariants(
    steps: list[tuple[str, int, float]],
) -> None:
    """A pacer model: a FIFO of (response, ms) chunks; the machine's events are checked
    against what the pacer actually did."""
    out = Outbox()
    buffer = OutputAudioBuffer(out)
    queue: list[list[object]] = []
    generated: dict[str, float] = {}
    done: set[str] = set()
    cleared: set[str] = set()
    playing: str | None = None
    for kind, n, ms in steps:
        rid = f"resp_{n}"
        # the session has one response at a time: another's audio comes only after the
        # earlier ones were done or cleared
        earlier_open = any(r != rid and r not in done and r not in cleared for r in generated)
        if kind == "queue" and rid not in done and rid not in cleared and not earlier_open:
            queue.append([rid, ms])
            generated[rid] = generated.get(rid, 0.0) + ms
            buffer.queued(rid, ms)
        elif kind == "done":
            done.add(rid)
            buffer.finished(rid)
        elif kind == "clear":
            target = None if n == 0 else rid
            if buffer.cleared(target):
                queue = [c for c in queue if target is not None and c[0] != target]
                cleared.update({target} if target else set(generated))
        elif kind == "pace":
            left = ms
            while left > 0 and queue:
                chunk = queue[0]
                take = min(left, float(chunk[1]))  # type: ignore[arg-type]
                assert chunk[0] not in cleared or chunk[0] == playing  # O3
                buffer.paced(str(chunk[0]), take)
                chunk[1] = float(chunk[1]) - take  # type: ignore[arg-type]
                left -= take
                if chunk[1] == 0:
                    queue.pop(0)
            if not queue:
                buffer.ran_dry()
        for event in out.drain():
            tag = type(event).__struct_config__.tag
            response_id = event.response_id  # type: ignore[union-attr]
            if tag == "output_audio_buffer.started":
                assert playing is None  # O1: started and stopped alternate
                playing = response_id
            else:
                assert tag == "output_audio_buffer.stopped"
                assert playing == response_id
                assert response_id in done  # O2
                assert not any(c[0] == response_id for c in queue)
                playing = None
        if buffer.state is OutputBufferState.IDLE:
            playing = None  # a clear ends the playing without a stop
        for rid, position in buffer._positions.items():
            assert position.played_ms <= generated.get(rid, 0.0) + 1e-9  # O4
    assert isinstance(ev.OutputAudioBufferStarted(response_id="r"), ev.ServerEvent)
