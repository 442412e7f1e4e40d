"""The server's CPU over the steady window: the counter `process_cpu_seconds_total` of
its Prometheus `/metrics` (every series summed), or, with `--server-pid`, the CPU of a
local server process and its descendants read from /proc."""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from clients.loadgen.report import ServerCpu, rounded

if TYPE_CHECKING:
    from clients.loadgen.options import BenchOptions

__all__ = [
    "CpuSample",
    "default_metrics_url",
    "parse_cpu_seconds",
    "server_cpu_report",
    "server_cpu_sample",
]

#: one sample: (cpu seconds or None, its source "metrics"/"proc" or why there is none,
#: when it was taken)
CpuSample = tuple[float | None, str | None, float]


def default_metrics_url(ws_url: str) -> str:
    """The server's Prometheus endpoint by default: the websocket URL's host, /metrics."""
    parts = urllib.parse.urlsplit(ws_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return urllib.parse.urlunsplit((scheme, parts.netloc, "/metrics", "", ""))


def parse_cpu_seconds(text: str, name: str = "process_cpu_seconds_total") -> float | None:
    """The sum of every series of the counter `name` in Prometheus text; None if absent."""
    total: float | None = None
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name) :]
        if rest.startswith("{"):
            rest = rest[rest.rfind("}") + 1 :]
        elif not rest[:1].isspace():
            continue  # another metric whose name starts with `name`
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        total = value if total is None else total + value
    return total


def _scrape_cpu_seconds(url: str, api_key: str | None = None) -> tuple[float | None, str | None]:
    """(cpu seconds, None) or (None, why not). No proxy: the server is asked directly; the
    key goes along (a server with `protect_probes` answers /metrics 401 without it)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=5.0) as response:
            text = response.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return None, f"cannot read {url}: {exc}"
    value = parse_cpu_seconds(text)
    if value is None:
        return None, f"{url} has no process_cpu_seconds_total"
    return value, None


def _proc_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of `pid` and its live descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    if pid not in times:
        return None
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        family.update(children)
        frontier.extend(children)
    return sum(times[p] for p in family)


async def server_cpu_sample(options: BenchOptions, url: str) -> tuple[float | None, str | None]:
    """(cpu seconds, "metrics" or "proc") now, or (None, why not)."""
    value, note = await asyncio.to_thread(_scrape_cpu_seconds, url, options.api_key)
    if value is None and options.server_pid is not None:
        proc = _proc_cpu_seconds(options.server_pid)
        if proc is not None:
            return proc, "proc"
        return None, f"{note}; no process {options.server_pid}"
    return value, "metrics" if value is not None else note


def server_cpu_report(
    url: str,
    before: CpuSample,
    after: CpuSample,
    held: int,
) -> ServerCpu:
    """The server's share of the window from samples at both of its ends."""
    report = ServerCpu(metrics_url=url)
    (cpu0, source0, at0), (cpu1, source1, at1) = before, after
    if cpu0 is None or cpu1 is None or source0 != source1:
        notes = [n for n in (source0, source1) if n not in (None, "metrics", "proc")]
        report.note = "; ".join(dict.fromkeys(notes)) or "the CPU source changed mid-run"
        return report
    report.source = source0
    report.window_s = rounded(at1 - at0)
    report.cpu_seconds = rounded(cpu1 - cpu0)
    cores = (cpu1 - cpu0) / max(at1 - at0, 1e-9)
    report.cores_used = rounded(cores)
    if held:
        report.cores_per_session = round(cores / held, 6)
    if cores > 0:
        report.sessions_per_core = rounded(held / cores, 1)
    if source0 == "proc":
        report.note = "read from /proc (--server-pid): the metrics endpoint has no CPU counter"
    return report
