"""Process-wide metrics in the Prometheus text format (no client library needed).

sessions (active gauge, total counter), events in/out by type, errors by code, audio
deltas dropped for slow clients, time to first audio, and stage latency histograms.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["Histogram", "Metrics"]

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...] = _BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(_BUCKETS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        for i, bound in enumerate(self.buckets):
            if seconds <= bound:
                self.counts[i] += 1
                return
        self.counts[-1] += 1


def _labels(**kv: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in kv.items())
    return "{" + inner + "}" if inner else ""


class Metrics:
    def __init__(self) -> None:
        self.sessions_active = 0
        self.sessions_total = 0
        self.sessions_refused = 0
        self.events_in: defaultdict[str, int] = defaultdict(int)
        self.events_out: defaultdict[str, int] = defaultdict(int)
        self.errors: defaultdict[str, int] = defaultdict(int)
        self.audio_deltas_dropped = 0
        self.time_to_first_audio = Histogram()
        self.stage_latency: defaultdict[str, Histogram] = defaultdict(Histogram)

    def render(self) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, doc: str) -> None:
            lines.append(f"# HELP joyduplex_{name} {doc}")
            lines.append(f"# TYPE joyduplex_{name} {kind}")

        metric("sessions_active", "gauge", "Sessions currently open.")
        lines.append(f"joyduplex_sessions_active {self.sessions_active}")
        metric("sessions_total", "counter", "Sessions opened since start.")
        lines.append(f"joyduplex_sessions_total {self.sessions_total}")
        metric("sessions_refused_total", "counter", "Sessions refused (limit, auth, not ready).")
        lines.append(f"joyduplex_sessions_refused_total {self.sessions_refused}")
        for name, table, label, doc in (
            ("events_in_total", self.events_in, "type", "Client events received, by type."),
            ("events_out_total", self.events_out, "type", "Server events sent, by type."),
            ("errors_total", self.errors, "code", "Error events sent, by code."),
        ):
            metric(name, "counter", doc)
            for key in sorted(table):
                lines.append(f"joyduplex_{name}{_labels(**{label: key})} {table[key]}")
        metric("audio_deltas_dropped_total", "counter", "Audio deltas dropped for slow clients.")
        lines.append(f"joyduplex_audio_deltas_dropped_total {self.audio_deltas_dropped}")
        metric("time_to_first_audio_seconds", "histogram", "Commit to first reply audio.")
        self._histogram(lines, "time_to_first_audio_seconds", self.time_to_first_audio, {})
        metric("stage_latency_seconds", "histogram", "Stage request latency, by stage.")
        for stage in sorted(self.stage_latency):
            self._histogram(
                lines, "stage_latency_seconds", self.stage_latency[stage], {"stage": stage}
            )
        return "\n".join(lines) + "\n"

    @staticmethod
    def _histogram(lines: list[str], name: str, h: Histogram, labels: dict[str, str]) -> None:
        cumulative = 0
        for bound, count in zip(h.buckets, h.counts, strict=False):
            cumulative += count
            lines.append(f"joyduplex_{name}_bucket{_labels(**labels, le=str(bound))} {cumulative}")
        lines.append(f"joyduplex_{name}_bucket{_labels(**labels, le='+Inf')} {h.n}")
        lines.append(f"joyduplex_{name}_sum{_labels(**labels)} {h.total:.6f}")
        lines.append(f"joyduplex_{name}_count{_labels(**labels)} {h.n}")
