"""The call's reply track in talkspurts (transport/call_media.py `ReplyTrack`), through
aiortc's own RTP sender: a reply's packets, a few silent ones after it, then nothing
until the next reply, whose first packet is stamped with the time that passed.

The track reads a clock the test moves: it advances 20 ms with each packet sent (the
pacing never waits) and jumps over the gap between replies, so the timestamps are
checked exactly, with no wall-clock assert."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from aiortc.rtcrtpsender import RTCRtpSender
from aiortc.rtp import RtpPacket

from transport.call_media import HANGOVER_FRAMES, ReplyTrack

_OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48_000, channels=2, payloadType=111)
_FRAME = 960  # samples of a 20 ms frame at 48 kHz


class _PacedBuffer:
    """What `ReplyTrack` tells the call's output buffer, recorded."""

    def __init__(self) -> None:
        self.responses: list[str] = []

    def paced(self, response_id: str, ms: float) -> None:
        self.responses.append(response_id)

    def ran_dry(self) -> None:
        pass


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class _Wire:
    """The DTLS transport as the sender sees it: the packets it sends, parsed; each one
    moves the clock on to the next frame's time."""

    state = "connected"

    def __init__(self, clock: _Clock) -> None:
        self.packets: asyncio.Queue[RtpPacket] = asyncio.Queue()
        self._clock = clock

    async def _send_rtp(self, data: bytes) -> None:
        self.packets.put_nowait(RtpPacket.parse(data))
        self._clock.now += _FRAME / 48_000


def _reply(n_frames: int) -> np.ndarray:
    return np.full(_FRAME * n_frames, 1_000, dtype=np.int16)


async def _quiet(track: ReplyTrack) -> None:
    """Until the track waits for audio with no end: its talkspurt is over."""
    while track._silence_wait is None or track._hangover > 0:
        await asyncio.sleep(0)


def test_a_reply_is_a_talkspurt_no_packets_between_replies_and_the_gap_is_time() -> None:
    async def talk() -> tuple[list[RtpPacket], list[RtpPacket], int, list[str]]:
        clock = _Clock()
        buffer = _PacedBuffer()
        track = ReplyTrack(buffer, lambda: None, clock=clock)  # type: ignore[arg-type]
        wire = _Wire(clock)
        sender = RTCRtpSender(track, wire)  # type: ignore[arg-type]
        run = asyncio.ensure_future(sender._run_rtp(_OPUS))
        try:
            # the call opens with a few silent packets, then goes quiet
            opening = [await wire.packets.get() for _ in range(HANGOVER_FRAMES)]
            await _quiet(track)
            track.enqueue("resp_1", _reply(3))
            first = [await wire.packets.get() for _ in range(3 + HANGOVER_FRAMES)]
            await _quiet(track)
            for _ in range(200):  # the loop runs on: the quiet track sends nothing
                await asyncio.sleep(0)
            assert wire.packets.empty()
            clock.now += 1.5  # the person speaks, the server thinks
            track.enqueue("resp_2", _reply(2))
            second = [await wire.packets.get() for _ in range(2 + HANGOVER_FRAMES)]
            await _quiet(track)
            return opening + first, second, wire.packets.qsize(), buffer.responses
        finally:
            track.stop()
            run.cancel()

    before, after, left, responses = asyncio.run(talk())
    assert left == 0
    assert responses == ["resp_1"] * 3 + ["resp_2"] * 2
    # one stream: consecutive sequence numbers across the gap
    numbers = [p.sequence_number for p in before + after]
    assert numbers == [(numbers[0] + i) % 65_536 for i in range(len(numbers))]
    # within a talkspurt each packet is 20 ms on; across the gap, the time that passed
    steps = [(b.timestamp - a.timestamp) % 2**32 for a, b in itertools.pairwise(before)]
    assert steps == [_FRAME] * (len(before) - 1)
    gap = (after[0].timestamp - before[-1].timestamp) % 2**32
    assert gap == _FRAME + 1.5 * 48_000
    # each reply's first packet carries the marker bit (aiortc marks every audio packet)
    assert before[HANGOVER_FRAMES].marker == 1 and after[0].marker == 1


def test_a_replys_first_audio_goes_out_at_once_not_after_the_silent_frames_tick() -> None:
    """The track waits for the next 20 ms tick only while it has audio to pace; a reply
    that arrives while it waits to send a silent frame ends that wait, so its first
    packet carries it. The next tick is pushed a minute away, so a packet that came at
    its tick would be silence only after a minute: the recv returns with audio instead."""

    async def first_packet() -> tuple[Any, ReplyTrack, int]:
        track = ReplyTrack(_PacedBuffer(), lambda: None)  # type: ignore[arg-type]
        await track.recv()  # the call's first packet starts the pacing clock
        track._start = (track._start or 0.0) + 60  # the next tick: a minute from now
        pending = asyncio.ensure_future(track.recv())
        while track._silence_wait is None:  # the recv waits to send silence
            await asyncio.sleep(0)
        track.enqueue("resp_1", _reply(1))
        packet = await pending
        return packet, track, track._timestamp

    packet, track, timestamp = asyncio.run(first_packet())
    assert track._buffer.responses == ["resp_1"] and track._silence_wait is None
    assert packet.pts == timestamp == _FRAME
    track.stop()


def test_a_stopped_track_ends_its_quiet_wait() -> None:
    """Between replies the track's recv waits with no end; stopping the call's track
    ends it (the sender's loop stops), it does not hang."""

    async def stop_while_quiet() -> None:
        track = ReplyTrack(_PacedBuffer(), lambda: None)  # type: ignore[arg-type]
        for _ in range(HANGOVER_FRAMES):
            await track.recv()
        pending = asyncio.ensure_future(track.recv())
        await _quiet(track)
        track.stop()
        with pytest.raises(MediaStreamError):
            await pending

    asyncio.run(stop_while_quiet())


def test_a_response_done_after_its_audio_went_quiet_still_stops_the_buffer() -> None:
    """With no packets between replies there is no next silent frame to find the queue
    dry once `response.done` comes: the call settles the track after sending it, so
    `output_audio_buffer.stopped` follows the done at once."""
    from core.outbox import Outbox
    from core.statemachines.output_audio_buffer import OutputAudioBuffer
    from spec.events import OutputAudioBufferStarted, OutputAudioBufferStopped

    async def reply_then_done() -> tuple[list[Any], list[Any]]:
        outbox = Outbox()
        buffer = OutputAudioBuffer(outbox)
        clock = _Clock()
        track = ReplyTrack(buffer, lambda: None, clock=clock)
        for _ in range(HANGOVER_FRAMES):  # the call's opening silence
            await track.recv()
            clock.now += _FRAME / 48_000
        buffer.queued("resp_1", 20.0)
        track.enqueue("resp_1", _reply(1))
        for _ in range(1 + HANGOVER_FRAMES):
            await track.recv()
            clock.now += _FRAME / 48_000
        pending = asyncio.ensure_future(track.recv())
        await _quiet(track)
        before_done = outbox.drain()
        buffer.finished("resp_1")
        track.settle()
        after_done = outbox.drain()
        track.stop()
        with pytest.raises(MediaStreamError):
            await pending
        return before_done, after_done

    before_done, after_done = asyncio.run(reply_then_done())
    assert [type(e) for e in before_done] == [OutputAudioBufferStarted]
    assert [type(e) for e in after_done] == [OutputAudioBufferStopped]
