"""B12: an idle camera session's memory is flat.

Ten minutes of simulated time through the runtime: a `SessionRunner` over an in-memory
channel, server VAD on, the real Silero model behind the runtime's `VadBatcher` (scored
inline, see `InlineSilero`), and a client that sends 100 ms of near-silence per append
and a fresh camera frame every second (1 fps). Time is a simulated clock advanced by the
audio sent, so ten minutes take about half a minute. After every simulated minute the
test waits for the runner to drain (a heartbeat round trip), collects garbage and records
`protocol.pending_bytes` and the bytes tracemalloc sees allocated. `pending_bytes` must
stay within I6 (one frame and the pre-roll); tracemalloc may grow only by noise from the
first minute on (measured: under 16 KiB over nine minutes, mostly interpreter free lists
and onnxruntime's small result objects; one leaked frame per second would be ~800 KiB).
"""

from __future__ import annotations

import gc
import math
import tracemalloc
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
import pytest

from backends.base import score_in_steps
from runtime.channel import MemoryChannel
from runtime.clock import Clock
from runtime.metrics import Metrics
from runtime.session_runner import SessionRunner
from runtime.vad_batcher import VadBatcher
from spec import events as ev
from spec.limits import Limits
from spec.session_config import validate_session
from tests.backends.cpu_audio import require_cpu_extra, solid_jpeg

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

MINUTES = 10
APPEND_MS = 100
APPENDS_PER_S = 1000 // APPEND_MS
PREROLL_BYTES = 500 * 32  # PREROLL_MS of 16 kHz pcm16
#: tracemalloc growth allowed between minute 1 and minute 10 (noise: interned strings,
#: caches filled lazily, free lists); a leak of one frame per second would be 600 frames
GROWTH_LIMIT_BYTES = 64 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class InlineSilero:
    """The Silero stage scored on the event loop (`score_sync`): the runtime's thread hop
    per 32 ms frame costs more than the model on two busy cores, and memory is the
    question here, not latency."""

    def __init__(self, vad: Any) -> None:
        self._vad = vad

    def new_state(self) -> Any:
        return self._vad.new_state()

    async def score(self, states: Any, frames: Any) -> Any:
        return self._vad.score_sync(states, frames)

    async def score_sequences(self, states: Any, sequences: Any) -> Any:
        return score_in_steps(self._vad.score_sync, states, sequences)


class SimulatedClock(Clock):
    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now


@dataclass
class Sample:
    minute: int
    pending_bytes: int
    traced_bytes: int


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    session_bytes: int = 0  # traced bytes held by the open session after minute 1
    frame_bytes: int = 0
    events_out: list[str] = field(default_factory=list)
    snapshots: dict[int, tracemalloc.Snapshot] = field(default_factory=dict)


async def idle_camera_session(
    minutes: int = MINUTES, snapshot_minutes: tuple[int, ...] = ()
) -> Run:
    from backends.cpu.backend import create_backend
    from core.session import SessionProtocol

    backend = create_backend()  # only the VAD is loaded: an idle session uses nothing else
    assert backend.vad is not None
    run = Run()
    frames = [solid_jpeg(rgb) for rgb in ((200, 30, 30), (30, 200, 30), (30, 30, 200))]
    run.frame_bytes = max(len(f) for f in frames)
    rng = np.random.default_rng(3)
    silence = [  # a few distinct near-silent chunks (RMS ~ 0.0003)
        (rng.normal(0, 10, APPEND_MS * 16)).astype("<i2").tobytes() for _ in range(8)
    ]
    async with backend.vad:
        await backend.vad.warmup()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            clock = SimulatedClock()
            c_send, c_recv = anyio.create_memory_object_stream[ev.ClientEvent](16)
            s_send, s_recv = anyio.create_memory_object_stream[ev.ServerEvent](math.inf)
            channel = MemoryChannel(c_recv, s_send)
            protocol = SessionProtocol(
                session_id="sess_idle",
                config=validate_session({"turn_detection": {"type": "server_vad"}}),
                limits=Limits(),
                profile="speech",
                now_ms=0,
            )
            runner = SessionRunner(
                protocol,
                backend,
                channel,
                clock=clock,
                metrics=Metrics(),
                # no tick: the clock is simulated and memory, not batching, is the question
                vad=VadBatcher(InlineSilero(backend.vad), tick_s=0),  # type: ignore[arg-type]
                max_outbound_events=Limits().max_outbound_events,
            )
            acks = anyio.Event()

            async def drain() -> None:
                nonlocal acks
                async with s_recv:
                    async for event in s_recv:
                        tag = str(type(event).__struct_config__.tag)
                        if tag == "session.heartbeat_ack":
                            acks.set()
                        elif tag not in run.events_out:
                            run.events_out.append(tag)

            async with anyio.create_task_group() as tg:
                tg.start_soon(runner.run)
                tg.start_soon(drain)
                appended = 0
                for minute in range(1, minutes + 1):
                    for _ in range(60 * APPENDS_PER_S):
                        clock.now += APPEND_MS
                        frame = []
                        if appended % APPENDS_PER_S == 0:  # 1 fps, a new bytes object each
                            frame = [bytes(bytearray(frames[appended // APPENDS_PER_S % 3]))]
                        await c_send.send(
                            ev.InputAudioBufferAppend(
                                audio=silence[appended % len(silence)], video_frames=frame
                            )
                        )
                        appended += 1
                    acks = anyio.Event()
                    await c_send.send(ev.SessionHeartbeat())
                    with anyio.fail_after(30):
                        await acks.wait()
                    gc.collect()
                    run.samples.append(
                        Sample(minute, protocol.pending_bytes, tracemalloc.get_traced_memory()[0])
                    )
                    if minute in snapshot_minutes:
                        run.snapshots[minute] = tracemalloc.take_snapshot()
                    if minute == 1:
                        run.session_bytes = run.samples[0].traced_bytes - before
                await c_send.aclose()
        finally:
            tracemalloc.stop()
    return run


async def test_idle_camera_session_memory_stays_flat_for_ten_minutes() -> None:
    require_cpu_extra()
    run = await idle_camera_session()
    first, last = run.samples[0], run.samples[-1]
    growth = last.traced_bytes - first.traced_bytes
    print(
        f"pending bytes {[s.pending_bytes for s in run.samples]}; "
        f"session holds {run.session_bytes} B (tracemalloc); "
        f"growth minute 1 -> {MINUTES}: {growth} B"
    )
    # silence never starts a turn; nothing but the heartbeat acks was sent
    assert run.events_out == ["session.created"]
    assert len(run.samples) == MINUTES
    # I6: at most the latest frame and PREROLL_MS of audio plus one append
    for sample in run.samples:
        assert sample.pending_bytes <= run.frame_bytes + PREROLL_BYTES + APPEND_MS * 32, sample
    assert growth < GROWTH_LIMIT_BYTES, run.samples
