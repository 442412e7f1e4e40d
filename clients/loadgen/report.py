"""The report of one run (`BenchReport`, the JSON the command prints) and its few
human lines (`summary`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import array
    from collections.abc import Sequence

__all__ = [
    "BenchReport",
    "ProbeReport",
    "SelfReport",
    "ServerCpu",
    "SessionCounts",
    "Stats",
    "comparison",
    "rounded",
    "summary",
]


def rounded(value: float, digits: int = 3) -> float:
    """How every number of the report is rounded (milliseconds to the microsecond)."""
    return round(value, digits)


@dataclass(frozen=True, slots=True)
class Stats:
    """Percentiles of a sample (milliseconds unless the field says otherwise)."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float] | array.array[float]) -> Stats:
        if len(values) == 0:
            return cls(0, None, None, None, None)
        data = np.asarray(values, dtype=np.float64)
        p50, p95, p99 = (rounded(float(p)) for p in np.percentile(data, [50, 95, 99]))
        return cls(len(data), p50, p95, p99, rounded(float(data.max())))


@dataclass(slots=True)
class SessionCounts:
    offered: int = 0
    #: websocket handshakes that succeeded (refused sessions included)
    connected: int = 0
    #: sessions open and streaming when the steady window ended
    held: int = 0
    #: closed by the server before the session was set up
    refused: int = 0
    refused_by_close_code: dict[str, int] = field(default_factory=dict)
    refused_by_error_code: dict[str, int] = field(default_factory=dict)
    #: no websocket: refused connection, HTTP status instead of an upgrade, timeout
    connect_failed: int = 0
    connect_failed_by_reason: dict[str, int] = field(default_factory=dict)
    #: set up, then closed by the server (or lost) before the window ended
    dropped: int = 0
    dropped_by_close_code: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class ServerCpu:
    #: "metrics" (process_cpu_seconds_total), "proc" (--server-pid) or None
    source: str | None = None
    metrics_url: str | None = None
    window_s: float | None = None
    cpu_seconds: float | None = None
    #: cpu_seconds / window_s
    cores_used: float | None = None
    #: cores_used / sessions held
    cores_per_session: float | None = None
    #: sessions held / cores_used
    sessions_per_core: float | None = None
    note: str | None = None


@dataclass(slots=True)
class ProbeReport:
    sessions: int = 0
    speech_source: str | None = None
    speech_seconds: float | None = None
    utterances: int = 0
    speech_started_delay_ms: Stats = field(default_factory=lambda: Stats.of([]))
    end_of_speech_to_first_audio_ms: Stats = field(default_factory=lambda: Stats.of([]))
    #: where the end of speech came from: "wav_envelope" or "speech_stopped"
    end_of_speech_reference: str | None = None
    missed_speech_started: int = 0
    no_reply: int = 0
    #: utterances the window cut short before their reply could arrive
    unfinished: int = 0


@dataclass(slots=True)
class SelfReport:
    event_loop: str = "asyncio"
    loop_lag_ms: Stats = field(default_factory=lambda: Stats.of([]))
    #: how late appends left against their absolute schedule
    send_lag_ms: Stats = field(default_factory=lambda: Stats.of([]))
    cpu_seconds: float = 0.0
    #: cpu_seconds / window (None for a window under half a second: nothing to judge)
    cpu_fraction_of_core: float | None = None
    bottleneck: bool = False
    bottleneck_reasons: list[str] = field(default_factory=list)


@dataclass(slots=True)
class BenchReport:
    """Everything one run measured; `to_json()` is the command's JSON output."""

    tool: str
    version: str
    command: str | None
    url: str
    options: dict[str, Any]
    machine: dict[str, Any]
    window_s: float = 0.0
    sessions: SessionCounts = field(default_factory=SessionCounts)
    appends_sent: int = 0
    appends_per_s: float = 0.0
    frames_sent: int = 0
    heartbeat_rtt_ms: Stats = field(default_factory=lambda: Stats.of([]))
    #: sessions whose server answered `session.heartbeat` with an error
    heartbeat_unsupported: int = 0
    server: ServerCpu = field(default_factory=ServerCpu)
    probes: ProbeReport = field(default_factory=ProbeReport)
    #: speech_started outside a probe's utterance (noise that woke the VAD)
    unexpected_speech_started: int = 0
    #: every `error` event received, by code (refusals included)
    errors_total: int = 0
    errors_by_code: dict[str, int] = field(default_factory=dict)
    bench: SelfReport = field(default_factory=SelfReport)
    #: with `--transport webrtc`: the websocket run of the same sessions, before this one
    baseline: dict[str, Any] | None = None
    #: with a baseline: the two runs' figures side by side (`comparison()`)
    comparison: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def comparison(websocket: BenchReport, calls: BenchReport) -> dict[str, Any]:
    """The websocket run and the WebRTC run of the same sessions, side by side; a ratio
    is the calls' figure over the websocket's (None where either is missing)."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return rounded(b / a) if a and b is not None else None

    figures: dict[str, Any] = {}
    pairs = {
        "sessions_held": (websocket.sessions.held, calls.sessions.held),
        "server_cores_used": (websocket.server.cores_used, calls.server.cores_used),
        "sessions_per_core": (websocket.server.sessions_per_core, calls.server.sessions_per_core),
        "heartbeat_rtt_p50_ms": (websocket.heartbeat_rtt_ms.p50, calls.heartbeat_rtt_ms.p50),
        "end_of_speech_to_first_audio_p50_ms": (
            websocket.probes.end_of_speech_to_first_audio_ms.p50,
            calls.probes.end_of_speech_to_first_audio_ms.p50,
        ),
        "bench_cpu_fraction_of_core": (
            websocket.bench.cpu_fraction_of_core,
            calls.bench.cpu_fraction_of_core,
        ),
    }
    for name, (a, b) in pairs.items():
        figures[name] = {"websocket": a, "webrtc": b, "ratio": ratio(a, b)}
    figures["bottleneck"] = {
        "websocket": websocket.bench.bottleneck,
        "webrtc": calls.bench.bottleneck,
    }
    return figures


def summary(report: BenchReport) -> str:
    """A few human lines for stderr (with a baseline: both runs, then the comparison)."""
    if report.baseline is None or report.comparison is None:
        return _summary(report)
    per_core = report.comparison["sessions_per_core"]
    lines = [
        "websocket (baseline):",
        _summary(_report_of(report.baseline)),
        "webrtc:",
        _summary(report),
        f"sessions per core: websocket {_figure(per_core['websocket'])}, webrtc "
        f"{_figure(per_core['webrtc'])} (ratio {_figure(per_core['ratio'], '.2f')})",
    ]
    return "\n".join(lines)


def _figure(value: float | None, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def _report_of(data: dict[str, Any]) -> BenchReport:
    """A report back from its JSON (the baseline's, for its summary lines)."""

    def stats(value: dict[str, Any]) -> Stats:
        return Stats(**value)

    probes = dict(data["probes"])
    for key in ("speech_started_delay_ms", "end_of_speech_to_first_audio_ms"):
        probes[key] = stats(probes[key])
    own = dict(data["bench"])
    for key in ("loop_lag_ms", "send_lag_ms"):
        own[key] = stats(own[key])
    return BenchReport(
        **{
            **data,
            "sessions": SessionCounts(**data["sessions"]),
            "heartbeat_rtt_ms": stats(data["heartbeat_rtt_ms"]),
            "server": ServerCpu(**data["server"]),
            "probes": ProbeReport(**probes),
            "bench": SelfReport(**own),
        }
    )


def _summary(report: BenchReport) -> str:
    c, s, b = report.sessions, report.server, report.bench

    def ms(stats: Stats) -> str:
        if stats.count == 0:
            return "none"
        return (
            f"p50 {stats.p50:.1f} / p99 {stats.p99:.1f} / max {stats.max:.1f} ms (n={stats.count})"
        )

    def by(table: dict[str, int]) -> str:
        return " " + ", ".join(f"{k}: {v}" for k, v in table.items()).join("()") if table else ""

    lines = [
        f"sessions: {c.offered} offered, {c.connected} connected, {c.held} held, {c.refused} "
        f"refused{by(c.refused_by_close_code)}{by(c.refused_by_error_code)}, "
        f"{c.connect_failed} failed{by(c.connect_failed_by_reason)}, "
        f"{c.dropped} dropped{by(c.dropped_by_close_code)}",
        f"window {report.window_s:.1f} s: {report.appends_per_s:,.0f} appends/s; "
        f"heartbeat RTT {ms(report.heartbeat_rtt_ms)}",
    ]
    if s.cores_used is not None:
        per_core = f"{s.sessions_per_core:,.1f}" if s.sessions_per_core is not None else "-"
        lines.append(
            f"server CPU ({s.source}): {s.cpu_seconds:.2f} s = {s.cores_used:.2f} cores, "
            f"{per_core} sessions per core"
        )
    else:
        lines.append(f"server CPU: unknown ({s.note})")
    if report.probes.sessions:
        p = report.probes
        lines.append(
            f"probes: {p.utterances} utterances; speech_started delay "
            f"{ms(p.speech_started_delay_ms)}; end of speech to first audio "
            f"{ms(p.end_of_speech_to_first_audio_ms)}; {p.missed_speech_started} missed, "
            f"{p.no_reply} unanswered"
        )
    if report.errors_total:
        lines.append(f"errors: {report.errors_by_code}")
    cpu = "-" if b.cpu_fraction_of_core is None else f"{100 * b.cpu_fraction_of_core:.0f}%"
    lines.append(f"bench ({b.event_loop}): loop lag {ms(b.loop_lag_ms)}, CPU {cpu} of a core")
    if b.bottleneck:
        lines.append(
            "WARNING: this tool was the bottleneck (" + "; ".join(b.bottleneck_reasons) + "): "
            "the server's numbers are a lower bound"
        )
    return "\n".join(lines)
