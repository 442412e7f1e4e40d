"""`run_bench`: one run of the load generator, from the first connect to the report.

The steady window starts once every session has connected, been refused or failed, and
lasts `--duration` seconds (or until `stop` is set). Rates, heartbeat round trips, the
tool's own CPU and loop lag and the server's CPU are measured over that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, TextIO

from clients.loadgen.options import RATE_HZ, TURN_DETECTION, BenchUsageError
from clients.loadgen.payloads import load_speech
from clients.loadgen.report import BenchReport, Stats, comparison, rounded
from clients.loadgen.run_state import BenchRun
from clients.loadgen.schedule import now
from clients.loadgen.self_watch import (
    cpu_seconds,
    event_loop_name,
    lag_monitor,
    machine,
    raise_fd_limit,
    self_report,
)
from clients.loadgen.self_watch import progress as watch_progress
from clients.loadgen.server_cpu import default_metrics_url, server_cpu_report, server_cpu_sample
from clients.loadgen.session import CLOSE_TIMEOUT_S, SETUP_TIMEOUT_S, SessionDriver
from spec.version import __version__

if TYPE_CHECKING:
    import httpx

    from clients.loadgen.options import BenchOptions
    from clients.loadgen.payloads import Speech

__all__ = ["run_bench"]


async def run_bench(
    options: BenchOptions,
    *,
    progress: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> BenchReport:
    """Offer `options.sessions` sessions, hold them for the steady window, report.

    With `--transport webrtc` and `baseline` (the default), the same sessions are first
    held over the websocket, on the same server in the same run: the report of the calls
    carries that run as `baseline` and both figures side by side in `comparison`.

    `progress`: where to write the progress line (None: nowhere); `stop`: set it to end
    the window early (the report covers what ran). The process's open-file soft limit is
    raised to fit one socket per session when it is lower.

    Raises:
        BenchUsageError: bad options, or speech that cannot be loaded.
    """
    options = options.checked()
    raise_fd_limit(options.sessions)
    speech = await load_speech(options.speech, options.append_ms) if options.speech else None
    if options.transport != "webrtc" or not options.baseline:
        return await _run_once(options, speech, progress, stop)
    websocket = await _run_once(
        dataclasses.replace(options, transport="websocket"), speech, progress, stop
    )
    calls = await _run_once(options, speech, progress, stop)
    calls.baseline = websocket.to_json()
    calls.comparison = comparison(websocket, calls)
    return calls


async def _run_once(
    options: BenchOptions,
    speech: Speech | None,
    progress: TextIO | None,
    stop: asyncio.Event | None,
) -> BenchReport:
    bench = BenchRun(options, speech)
    event_loop = event_loop_name()
    report = BenchReport(
        tool="joyduplex bench",
        version=__version__,
        command=options.command_line,
        url=options.url,
        options={
            "transport": options.transport,
            "sessions": options.sessions,
            "ramp_s": options.ramp_s,
            "append_ms": options.append_ms,
            "duration_s": options.duration_s,
            "speech": options.speech,
            "probes": options.probe_count,
            "frames_ms": options.frames_ms,
            "vad": options.vad,
            "turn_detection": TURN_DETECTION if options.vad else None,
            "input_format": {"type": "audio/pcm", "rate": RATE_HZ},
        },
        machine=machine(event_loop),
    )
    metrics_url = options.metrics_url or default_metrics_url(options.url)
    probes = bench.schedule.probe_sessions()
    helpers = [asyncio.create_task(lag_monitor(bench))]
    if progress is not None:
        helpers.append(asyncio.create_task(watch_progress(bench, progress)))
    http = None
    if options.transport == "webrtc":
        sessions, http = await _calls(bench, probes)
    else:
        sessions = [SessionDriver(bench, i, i in probes) for i in range(options.sessions)]
    for session in sessions:
        bench.tasks.add(asyncio.create_task(session.run()))
    stopped = stop or asyncio.Event()
    try:
        await _first_of(bench.all_resolved.wait(), stopped.wait())
        # the steady window
        cpu_before, source_before = await server_cpu_sample(options, metrics_url)
        cpu_before_at = now()
        bench.window_start = now()
        bench.in_window = True
        bench.appends_at_start = bench.appends
        own_before = cpu_seconds()
        speakers = [s.speaker for s in sessions if s.speaker is not None and s.ready]
        for n, speaker in enumerate(speakers):
            speaker.next_utterance_at = bench.schedule.first_utterance_at(bench.window_start, n)
        if bench.live > 0 and not stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), options.duration_s)
        bench.stop_at = now()
        bench.in_window = False
        own_cpu = cpu_seconds() - own_before
        window = bench.stop_at - bench.window_start
        held = bench.live
        appends_in_window = bench.appends - bench.appends_at_start
        cpu_after, source_after = await server_cpu_sample(options, metrics_url)
        cpu_after_at = now()
        for speaker in speakers:
            speaker.count_utterance(final=True)
    finally:
        bench.stop_at = min(bench.stop_at, now())
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        for failure in await _finish(bench.tasks):
            bench.error(f"bench_internal_{type(failure).__name__}")  # a bug here, not there
        if http is not None:
            await http.aclose()
        if progress is not None:
            progress.write("\n" if progress.isatty() else "")
            progress.flush()
    report.sessions = dataclasses.replace(bench.counts, held=held)
    report.window_s = rounded(window)
    report.appends_sent = bench.appends
    report.appends_per_s = rounded(appends_in_window / window, 1) if window > 0 else 0.0
    report.frames_sent = bench.frames
    report.heartbeat_rtt_ms = Stats.of(bench.rtts)
    report.heartbeat_unsupported = bench.heartbeat_unsupported
    report.unexpected_speech_started = bench.unexpected_speech_started
    report.errors_by_code = dict(sorted(bench.errors.items()))
    report.errors_total = sum(bench.errors.values())
    probe = bench.probe
    probe.speech_started_delay_ms = Stats.of(bench.speech_started_delay)
    probe.end_of_speech_to_first_audio_ms = Stats.of(bench.reply_latency)
    report.probes = probe
    report.server = server_cpu_report(
        metrics_url,
        (cpu_before, source_before, cpu_before_at),
        (cpu_after, source_after, cpu_after_at),
        report.sessions.held,
    )
    report.bench = self_report(event_loop, bench, own_cpu, window)
    return report


async def _calls(
    bench: BenchRun, probes: set[int]
) -> tuple[list[SessionDriver], httpx.AsyncClient]:
    """The run's sessions as WebRTC calls, and the HTTP client their offers share."""
    try:
        import httpx

        from clients.loadgen.call_session import CallSessionDriver
    except ImportError as exc:
        raise BenchUsageError(f"--transport webrtc needs the webrtc extra (aiortc): {exc}") from exc
    count = bench.options.sessions
    limits = httpx.Limits(max_connections=min(count, 64), max_keepalive_connections=8)
    http = httpx.AsyncClient(timeout=SETUP_TIMEOUT_S, limits=limits, trust_env=False)
    drivers: list[SessionDriver] = [
        CallSessionDriver(bench, i, i in probes, http) for i in range(count)
    ]
    return drivers, http


async def _finish(tasks: set[asyncio.Task[None]]) -> list[BaseException]:
    """Let the sessions close (each notices the end at its next send), then cancel what
    still waits (a connect or a setup step). Returns what the tasks raised."""
    if not tasks:
        return []
    _, pending = await asyncio.wait(list(tasks), timeout=2 * CLOSE_TIMEOUT_S)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]


async def _first_of(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
