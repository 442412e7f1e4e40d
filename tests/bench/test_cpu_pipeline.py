"""End of speech to first reply audio through a real server (the embedded CPU backend),
broken down by stage.

A spoken question over a red camera frame streams in real time (20 ms appends) to a
uvicorn on 127.0.0.1 with server VAD. Times, all on `time.monotonic()` in this process:

    end of speech   when the append holding the last speech sample was sent
    hangover        until the append that completed the VAD's silence run was sent
                    (`silence_duration_ms` rounded up to whole 32 ms frames, plus the
                    time Silero's probability takes to fall after the speech ends)
    asr, vlm        each stage call, timed by wrappers around the backend's stages
    tts first chunk from the synthesis call to its first chunk
    first audio     when the first `response.output_audio.delta` reached the client
    overhead        total - hangover - asr - vlm - tts first chunk: the server's own
                    work (transport, protocol, runtime hand-offs), the goal < 5 %

These durations are reported (`extra_info`, printed), never asserted: on a loaded machine
any of them can grow without a bug. What is asserted holds at any speed: the reply and
transcript, the VAD's hangover on the audio clock (`audio_end_ms` of speech_stopped against
the end of the speech in the streamed audio), the causal order of the wall times, and in
the server's own `/metrics` counts one VLM call per turn and at most one commit ASR call
(none when the commit took the live transcript of its pause, B33).

The server's `/metrics` stage histograms are read too, as a cross-check of the
wrappers (`extra_info["metrics_*"]`). The client runs in the server's process (another
thread and event loop), so it shares the GIL with the server: the overhead measured here
is an upper bound. Run with `--benchmark-enable` for several rounds.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pytest

from backends.base import VlmDecisionResult
from clients.duplex_client import DuplexClient
from spec.events import (
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionCompleted,
    ResponseDone,
    ResponseOutputAudioDelta,
    ResponseOutputAudioTranscriptDone,
)
from tests.backends.cpu_audio import (
    CpuServer,
    require_cpu_extra,
    shared_cpu_server,
    silence,
    solid_jpeg,
    speech,
    speech_bounds,
    to_pcm16,
)

QUESTION = "What colour is this?"
CHUNK_MS = 20
LEAD_S, TAIL_S = 0.3, 1.0
SILENCE_DURATION_MS = 500


@dataclass
class StageTimes:
    """Wall times (`time.monotonic()`) of the backend's stage calls, by engine request id."""

    asr: dict[str, tuple[float, float]] = field(default_factory=dict)
    vlm: dict[str, tuple[float, float]] = field(default_factory=dict)
    tts_first: dict[str, tuple[float, float]] = field(default_factory=dict)

    def clear(self) -> None:
        self.asr.clear()
        self.vlm.clear()
        self.tts_first.clear()


def _instrument(server: CpuServer) -> tuple[StageTimes, Any]:
    """Wrap the live backend's stage calls (instance attributes shadow the methods)."""
    backend = server.backend
    asr, vlm, tts = backend.asr, backend.vlm, backend.tts
    assert asr is not None
    times = StageTimes()
    transcribe, generate, synthesize = asr.transcribe, vlm.generate, tts.synthesize

    async def timed_transcribe(request: Any) -> Any:
        started = time.monotonic()
        result = await transcribe(request)
        times.asr[request.request_id] = (started, time.monotonic())
        return result

    async def timed_generate(request: Any) -> AsyncIterator[Any]:
        started = time.monotonic()
        async for item in generate(request):
            if isinstance(item, VlmDecisionResult):
                times.vlm[request.request_id] = (started, time.monotonic())
            yield item

    async def timed_synthesize(request: Any) -> AsyncIterator[Any]:
        started = time.monotonic()
        async for chunk in synthesize(request):
            times.tts_first.setdefault(request.request_id, (started, time.monotonic()))
            yield chunk

    asr.transcribe = timed_transcribe  # type: ignore[method-assign]
    vlm.generate = timed_generate  # type: ignore[method-assign]
    tts.synthesize = timed_synthesize  # type: ignore[method-assign]

    def restore() -> None:
        for stage, name in ((asr, "transcribe"), (vlm, "generate"), (tts, "synthesize")):
            vars(stage).pop(name, None)

    return times, restore


@pytest.fixture(scope="module")
def instrumented() -> Iterator[tuple[CpuServer, StageTimes]]:
    require_cpu_extra()
    server = shared_cpu_server()
    times, restore = _instrument(server)
    try:
        yield server, times
    finally:
        restore()


@dataclass
class Breakdown:
    total_s: float
    hangover_s: float
    asr_s: float  # the part of the ASR call after the turn ended
    asr_during_hangover_s: float  # a live-transcript partial's head start (B33)
    vlm_s: float
    tts_first_chunk_s: float
    overhead_s: float
    audio_hangover_ms: float  # on the audio clock: speech_stopped's audio_end_ms - end of speech
    reply: str
    transcript: str

    @property
    def overhead_fraction(self) -> float:
        return self.overhead_s / self.total_s


def _metric_sums(text: str, kind: str = "sum") -> dict[str, float]:
    pattern = rf'joyduplex_stage_latency_seconds_{kind}\{{stage="(\w+)"\}} ([0-9.e+-]+)'
    return {stage: float(value) for stage, value in re.findall(pattern, text)}


def _preemptive(text: str, outcome: str) -> float:
    pattern = rf'joyduplex_preemptive_responses_total\{{outcome="{outcome}"\}} ([0-9.e+-]+)'
    return sum(float(value) for value in re.findall(pattern, text))


async def _turn(server: CpuServer, times: StageTimes) -> Breakdown:
    voice = speech(QUESTION)
    audio = np.concatenate([silence(LEAD_S), voice, silence(TAIL_S)])
    _, voice_end_s = speech_bounds(voice)
    end_sample = round((LEAD_S + voice_end_s) * 16_000) - 1
    step = 16 * CHUNK_MS
    pcm16 = to_pcm16(audio)
    chunks = [pcm16[i : i + 2 * step] for i in range(0, len(pcm16), 2 * step)]
    sent: list[float] = []
    times.clear()
    async with DuplexClient.connect(server.ws_url) as client:
        await client.update_session(
            turn_detection={"type": "server_vad", "silence_duration_ms": SILENCE_DURATION_MS}
        )

        async def stream() -> None:
            start = time.monotonic()
            for index, chunk in enumerate(chunks):
                delay = start + index * CHUNK_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                frames = [solid_jpeg((220, 20, 30))] if index == 0 else []
                sent.append(time.monotonic())
                await client.append_audio(chunk, frames=frames)

        streamer = asyncio.create_task(stream())
        first_audio: float | None = None
        stopped: InputAudioBufferSpeechStopped | None = None
        reply = transcript = ""
        async with asyncio.timeout(60):
            async for event in client.events():
                if isinstance(event, InputAudioBufferSpeechStopped):
                    stopped = event
                elif isinstance(event, InputAudioTranscriptionCompleted):
                    transcript = event.transcript
                elif isinstance(event, ResponseOutputAudioDelta) and first_audio is None:
                    first_audio = time.monotonic()
                elif isinstance(event, ResponseOutputAudioTranscriptDone):
                    reply = event.transcript
                elif isinstance(event, ResponseDone):
                    break
        await streamer
    assert stopped is not None and first_audio is not None
    end_of_speech = sent[end_sample // step]
    # the append whose audio completed the silence run (ends at or after audio_end_ms)
    detected = sent[min(-(-stopped.audio_end_ms // CHUNK_MS) - 1, len(sent) - 1)]
    # the transcription the commit waited for is the last ASR call to end; with live
    # transcripts (B33) it may be the partial asked at the pause, started before the turn
    # ended: only its part after the detection is on the turn's path
    asr_start, asr_end = max(times.asr.values(), key=lambda call: call[1])
    asr_early = max(0.0, min(asr_end, detected) - asr_start)
    # the reply adopted is the last one prepared: one started at an earlier dip of the
    # speech's energy (B43) was discarded when the speech went on
    vlm_start, vlm_end = max(times.vlm.values())
    tts_start, tts_first = min(t for t in times.tts_first.values() if t[0] >= vlm_start)
    total = first_audio - end_of_speech
    hangover = detected - end_of_speech
    asr_waited = asr_end - asr_start - asr_early
    stages = asr_waited + (vlm_end - vlm_start) + (tts_first - tts_start)
    return Breakdown(
        total_s=total,
        hangover_s=hangover,
        asr_s=asr_waited,
        asr_during_hangover_s=asr_early,
        vlm_s=vlm_end - vlm_start,
        tts_first_chunk_s=tts_first - tts_start,
        overhead_s=total - hangover - stages,
        audio_hangover_ms=stopped.audio_end_ms - float(LEAD_S + voice_end_s) * 1000,
        reply=reply,
        transcript=transcript,
    )


@pytest.mark.slow
@pytest.mark.benchmark(group="cpu-pipeline-end-of-speech-to-first-audio")
def test_bench_end_of_speech_to_first_audio_breakdown(benchmark, instrumented) -> None:  # type: ignore[no-untyped-def]
    server, times = instrumented
    runs: list[Breakdown] = []
    metrics_text_before = server.metrics_text()
    metrics_before = _metric_sums(metrics_text_before)
    counts_before = _metric_sums(metrics_text_before, "count")

    def one_turn() -> Breakdown:
        result = asyncio.run(_turn(server, times))
        runs.append(result)
        return result

    benchmark.pedantic(one_turn, rounds=3, iterations=1, warmup_rounds=0)
    metrics_text_after = server.metrics_text()
    metrics_after = _metric_sums(metrics_text_after)
    counts_after = _metric_sums(metrics_text_after, "count")

    for run in runs:
        assert "red" in run.reply.lower(), run
        assert "colo" in run.transcript.lower(), run
        # the turn ends after the silence window, counted in audio, not in wall time
        assert run.audio_hangover_ms >= SILENCE_DURATION_MS - 50, run
        # causal order on one clock: first audio comes after the end of the silence window
        # and the rest of the ASR call (no bound on how long any of them takes)
        assert run.total_s > run.hangover_s + run.asr_s, run

    def calls(stage: str) -> float:
        return counts_after.get(stage, 0) - counts_before.get(stage, 0)

    # one VLM call a turn, and at most one more for each preemptive reply speech went on
    # after (B35: one prepared at a dip of the speech's energy, B43, is discarded when the
    # speech goes on; one discarded before its VLM call answered adds none)
    discarded = _preemptive(metrics_text_after, "discarded") - _preemptive(
        metrics_text_before, "discarded"
    )
    assert len(runs) <= calls("vlm") <= len(runs) + discarded
    assert calls("asr") <= len(runs)
    assert calls("asr") + calls("asr_partial") >= len(runs)  # every turn was transcribed

    fields = (
        "total_s",
        "hangover_s",
        "asr_s",
        "asr_during_hangover_s",
        "vlm_s",
        "tts_first_chunk_s",
        "overhead_s",
        "audio_hangover_ms",
    )
    for name in fields:
        benchmark.extra_info[f"median_{name}"] = statistics.median(asdict(r)[name] for r in runs)
    # the goal is < 5 %: reported, not asserted (a loaded machine inflates it, see above)
    benchmark.extra_info["median_overhead_fraction"] = statistics.median(
        r.overhead_fraction for r in runs
    )
    benchmark.extra_info["rounds"] = len(runs)
    for stage in ("asr", "asr_partial", "vlm", "tts"):
        spent = metrics_after.get(stage, 0.0) - metrics_before.get(stage, 0.0)
        benchmark.extra_info[f"metrics_{stage}_s_per_turn"] = spent / len(runs)
    print()
    for run in runs:
        print(
            f"total {run.total_s * 1000:.0f} ms = hangover {run.hangover_s * 1000:.0f} "
            f"+ asr {run.asr_s * 1000:.0f} + vlm {run.vlm_s * 1000:.1f} "
            f"+ tts first chunk {run.tts_first_chunk_s * 1000:.0f} "
            f"+ overhead {run.overhead_s * 1000:.0f} ({run.overhead_fraction:.1%})"
        )
    print({k: round(v, 4) for k, v in benchmark.extra_info.items()})
