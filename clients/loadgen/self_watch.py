"""The tool watching itself: its event-loop lag (a 10 ms ticker), its own CPU, the
progress line, the machine it ran on, and whether it was the bottleneck (then the
server's numbers are a lower bound)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import resource
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from clients.loadgen.report import SelfReport, Stats, rounded
from clients.loadgen.schedule import now

if TYPE_CHECKING:
    from clients.loadgen.run_state import BenchRun

__all__ = [
    "cpu_seconds",
    "event_loop_name",
    "lag_monitor",
    "machine",
    "progress",
    "raise_fd_limit",
    "self_report",
]

LAG_TICK_S = 0.01
LOOP_LAG_LIMIT_MS = 20.0
CPU_LIMIT_FRACTION = 0.9


async def lag_monitor(bench: BenchRun) -> None:
    """Tick every `LAG_TICK_S` and record how late each tick woke (in the window)."""
    start = now()
    tick = 0
    while True:
        tick += 1
        due = start + tick * LAG_TICK_S
        await asyncio.sleep(due - now())
        lag = (now() - due) * 1000
        bench.recent_lag = max(bench.recent_lag, lag)
        if bench.in_window:
            bench.loop_lag.append(lag)
        if lag > LAG_TICK_S * 1000:  # behind: measure from now on, no burst of catch-ups
            tick = math.floor((now() - start) / LAG_TICK_S)


async def progress(bench: BenchRun, out: TextIO) -> None:
    """A progress line on `out`: rewritten every second on a terminal, else a line every
    5 s."""
    tty = out.isatty()
    bench.recent_rtts = []
    last_appends, last_cpu, last_at = bench.appends, cpu_seconds(), now()
    every = 1.0 if tty else 5.0
    while True:
        await asyncio.sleep(every)
        at, cpu = now(), cpu_seconds()
        span = max(at - last_at, 1e-9)
        rtts, bench.recent_rtts = sorted(bench.recent_rtts), []
        rtt = f"{rtts[len(rtts) // 2]:.1f} ms" if rtts else "-"
        phase = "steady" if bench.in_window else "ramp" if bench.stop_at == math.inf else "end"
        c = bench.counts
        line = (
            f"[{at - bench.t0:6.1f}s {phase}] sessions {bench.live} held "
            f"/ {c.offered} offered, {c.refused} refused, {c.connect_failed} failed, "
            f"{c.dropped} dropped | {(bench.appends - last_appends) / span:,.0f} appends/s | "
            f"heartbeat p50 {rtt} | errors {sum(bench.errors.values())} | "
            f"bench lag max {bench.recent_lag:.0f} ms, cpu {100 * (cpu - last_cpu) / span:.0f}%"
        )
        out.write(f"\r{line}\x1b[K" if tty else line + "\n")
        out.flush()
        last_appends, last_cpu, last_at = bench.appends, cpu, at
        bench.recent_lag = 0.0


def cpu_seconds() -> float:
    """This process's CPU time so far (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine(event_loop: str) -> dict[str, Any]:
    """The machine the tool ran on, as the report names it."""
    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model or platform.processor() or None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "event_loop": event_loop,
    }


def event_loop_name() -> str:
    """`uvloop` or `asyncio`: the loop the run is on."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def raise_fd_limit(sessions: int) -> None:
    """Allow a socket per session (the soft limit is often 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = sessions + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def self_report(event_loop: str, bench: BenchRun, cpu: float, window: float) -> SelfReport:
    """The tool's own numbers over a `window` of seconds in which it spent `cpu` seconds,
    and whether it was the bottleneck."""
    report = SelfReport(event_loop=event_loop)
    report.loop_lag_ms = Stats.of(bench.loop_lag)
    report.send_lag_ms = Stats.of(bench.send_lag)
    report.cpu_seconds = rounded(cpu)
    if window < 0.5:
        return report
    fraction = report.cpu_fraction_of_core = rounded(cpu / window)
    lag_p99 = report.loop_lag_ms.p99
    if lag_p99 is not None and lag_p99 > LOOP_LAG_LIMIT_MS:
        report.bottleneck_reasons.append(
            f"event-loop lag p99 {lag_p99:.1f} ms > {LOOP_LAG_LIMIT_MS:.0f} ms"
        )
        if fraction <= CPU_LIMIT_FRACTION:
            report.bottleneck_reasons.append(
                f"with only {100 * fraction:.0f}% of a core busy: the "
                "machine is short of CPU (other processes, or the server on the same machine)"
            )
    if fraction > CPU_LIMIT_FRACTION:
        report.bottleneck_reasons.append(
            f"its CPU {100 * fraction:.0f}% of a core > {100 * CPU_LIMIT_FRACTION:.0f}%"
        )
    report.bottleneck = bool(report.bottleneck_reasons)
    return report
