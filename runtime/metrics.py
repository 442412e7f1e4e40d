"""Server metrics in the Prometheus text format, through prometheus-client.

sessions (active gauge, total counter, refused, crashed and slow-consumer counters),
events in/out by type, errors by code, audio deltas dropped for slow clients, time to
first audio, stage latency, event-loop lag, worker processes, and
`process_cpu_seconds_total`.

One process (`joyduplex serve --workers 1`, tests): the metrics live in a registry of
their own, so several `Metrics` in one process never share a value.

Several worker processes (`--workers N`): the supervisor points `PROMETHEUS_MULTIPROC_DIR`
at a fresh directory before it starts the workers; prometheus-client then keeps every
value in a per-process file there, and `render()` merges the files of all workers, so
any worker answers /metrics for the whole server. Counters and histograms add up over
every worker that ever ran (a replaced worker's sessions still count); gauges add up
over the live workers (the supervisor marks dead ones). One `Metrics` per worker process.

prometheus-client's own process collector reads only the scraping process, so CPU is
counted here instead: every worker adds its `time.process_time()` (all its threads) to
the `process_cpu_seconds_total` counter at each scrape it answers and at every
event-loop tick (`SessionHost.watch`), and the sum covers every worker.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from spec.events import ResponseCreated, ResponseOutputAudioDelta

if TYPE_CHECKING:
    from runtime.clock import Clock
    from spec.events import ServerEvent

__all__ = ["CONTENT_TYPE", "MULTIPROC_ENV", "FirstAudioClock", "Metrics"]

#: the environment variable that switches prometheus-client to one file per process
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: the media type of `render()`
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# how the values of several workers combine: added over the live ones, or one per worker
_GaugeMode = Literal["livesum", "liveall"]


class Metrics:
    """The counters, gauges and histograms of one server process.

    Args:
        worker: this process's worker index (label `worker` of the per-worker gauges).
        multiprocess_dir: the shared directory of a multi-worker server; by default
            `$PROMETHEUS_MULTIPROC_DIR` (prometheus-client reads it when it is imported,
            so the variable must be set before the process imports it).
    """

    def __init__(self, *, worker: int = 0, multiprocess_dir: str | None = None) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` samples
        self.multiprocess_dir = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        self.worker = worker
        registry = None if self.multiprocess_dir else CollectorRegistry()
        self._registry = registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        def gauge(name: str, doc: str, mode: _GaugeMode, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, registry=registry, multiprocess_mode=mode)

        def histogram(
            name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()
        ) -> Histogram:
            return Histogram(name, doc, labels, registry=registry, buckets=buckets)

        self._sessions_active = gauge(
            "joyduplex_sessions_active", "Sessions currently open.", "livesum"
        )
        self._sessions_total = counter("joyduplex_sessions", "Sessions opened since start.")
        self._sessions_refused = counter(
            "joyduplex_sessions_refused", "Sessions refused (limit, auth, not ready)."
        )
        self._sessions_crashed = counter(
            "joyduplex_sessions_crashed",
            "Sessions ended by an unexpected server error (close 1011).",
        )
        self._slow_consumers = counter(
            "joyduplex_slow_consumers",
            "Sessions closed (1008) because their client stopped reading.",
        )
        self._preemptive = counter(
            "joyduplex_preemptive_responses",
            "Preemptive responses (B35) by outcome: started, adopted (the turn ended on "
            "their prompt), discarded (speech went on, or the prompt changed).",
            ("outcome",),
        )
        self._preemptive_discarded_s = counter(
            "joyduplex_preemptive_discarded_stage_seconds",
            "Stage seconds (VLM and TTS requests) spent on preemptive responses that were "
            "discarded.",
        )
        self._rate_limit_closes = counter(
            "joyduplex_rate_limit_closes",
            "Connections closed (1008) because they kept sending over their rate limits.",
        )
        self._resume = counter(
            "joyduplex_session_resume",
            "Resumable sessions by attachment event: detached, resumed, replaced, expired, "
            "refused (a session.resume that reattached nothing), relayed (a resume this "
            "worker carried to the worker that holds the session).",
            ("event",),
        )
        self._events_in = counter(
            "joyduplex_events_in", "Client events received, by type.", ("type",)
        )
        self._events_out = counter(
            "joyduplex_events_out", "Server events sent, by type.", ("type",)
        )
        self._errors = counter("joyduplex_errors", "Error events sent, by code.", ("code",))
        self._audio_deltas_dropped = counter(
            "joyduplex_audio_deltas_dropped", "Audio deltas dropped for slow clients."
        )
        self._time_to_first_audio = histogram(
            "joyduplex_time_to_first_audio_seconds", "Commit to first reply audio.", _BUCKETS
        )
        self._stage_latency = histogram(
            "joyduplex_stage_latency_seconds",
            "Stage request latency, by stage.",
            _BUCKETS,
            ("stage",),
        )
        self._loop_lag = histogram(
            "joyduplex_event_loop_lag_seconds",
            "How late the event loop woke a periodic sleep, over every worker.",
            _LAG_BUCKETS,
        )
        self._worker_loop_lag = gauge(
            "joyduplex_worker_event_loop_lag_seconds",
            "The latest event-loop lag of each worker.",
            "liveall",
            ("worker",),
        ).labels(str(worker))
        busy = gauge(
            "joyduplex_worker_busy_ratio",
            "The share of the latest watcher period each worker's event-loop thread ran on "
            "the CPU (resource=event_loop) and its VAD spent scoring (resource=vad): what "
            "admission predicts capacity from (shed_loop_busy, shed_vad_busy).",
            "liveall",
            ("worker", "resource"),
        )
        self._busy_loop = busy.labels(str(worker), "event_loop")
        self._busy_vad = busy.labels(str(worker), "vad")
        self._worker_sessions = gauge(
            "joyduplex_worker_sessions",
            "Sessions opened since start, by worker.",
            "liveall",
            ("worker",),
        ).labels(str(worker))
        self._workers = gauge("joyduplex_workers", "Worker processes serving.", "livesum")
        self._workers.set(1)
        self._cpu = counter(
            "process_cpu_seconds", "CPU time (user and system) of every worker process."
        )
        self._cpu_seen = 0.0  # the first sample counts the process's CPU since it started
        # the labelled children of the per-event counters, by event type (a few dozen)
        self._events_in_by_type: dict[str, Any] = {}
        self._events_out_by_type: dict[str, Any] = {}

    # -- sessions ---------------------------------------------------------------------

    def session_opened(self) -> None:
        self._sessions_total.inc()
        self._sessions_active.inc()
        self._worker_sessions.inc()

    def session_closed(self) -> None:
        self._sessions_active.dec()

    def session_refused(self) -> None:
        self._sessions_refused.inc()

    def session_crashed(self) -> None:
        self._sessions_crashed.inc()

    def resume_event(self, event: str) -> None:
        """`detached`, `resumed`, `replaced`, `expired`, `refused` (D27) or `relayed` (D39)."""
        self._resume.labels(event).inc()

    def slow_consumer(self) -> None:
        self._slow_consumers.inc()

    def preemptive_response(self, outcome: str) -> None:
        self._preemptive.labels(outcome).inc()

    def preemptive_discarded_seconds(self, seconds: float) -> None:
        if seconds > 0:
            self._preemptive_discarded_s.inc(seconds)

    def rate_limit_close(self) -> None:
        self._rate_limit_closes.inc()

    # -- events -----------------------------------------------------------------------

    def event_in(self, event_type: str) -> None:
        _child(self._events_in_by_type, self._events_in, event_type).inc()

    def event_out(self, event_type: str) -> None:
        _child(self._events_out_by_type, self._events_out, event_type).inc()

    def error(self, code: str) -> None:
        self._errors.labels(code).inc()

    def audio_deltas_dropped(self, count: int) -> None:
        if count:
            self._audio_deltas_dropped.inc(count)

    # -- latencies --------------------------------------------------------------------

    def time_to_first_audio(self, seconds: float) -> None:
        self._time_to_first_audio.observe(seconds)

    def stage_latency(self, stage: str, seconds: float) -> None:
        self._stage_latency.labels(stage).observe(seconds)

    def loop_lag(self, seconds: float) -> None:
        self._loop_lag.observe(seconds)
        self._worker_loop_lag.set(seconds)

    def busy(self, loop: float, vad: float | None) -> None:
        self._busy_loop.set(loop)
        if vad is not None:
            self._busy_vad.set(vad)

    def sample_cpu(self) -> None:
        """Add the CPU this process used since the last call to `process_cpu_seconds`."""
        now = time.process_time()
        spent, self._cpu_seen = now - self._cpu_seen, now
        if spent > 0:
            self._cpu.inc(spent)

    # -- exposition -------------------------------------------------------------------

    def _collecting(self) -> Any:
        if self._registry is not None:
            return self._registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return registry

    def render(self) -> bytes:
        """The Prometheus text exposition (of every worker, with several)."""
        self.sample_cpu()
        return bytes(generate_latest(self._collecting()))

    def value(self, name: str, **labels: str) -> float:
        """One sample's value as /metrics would show it (0 when it has none yet)."""
        value = self._collecting().get_sample_value(name, labels)
        return float(value) if value is not None else 0.0


def _child(children: dict[str, Any], family: Any, label: str) -> Any:
    """`family.labels(label)`, kept in `children`: labels() takes a lock and builds a key
    on every call, and the per-event counters are counted on every append."""
    child = children.get(label)
    if child is None:
        child = children[label] = family.labels(label)
    return child


class FirstAudioClock:
    """One session's time to first audio: from `response.created` to the response's first
    `response.output_audio.delta`, read off the events it sends."""

    __slots__ = ("_clock", "_created", "_metrics")

    def __init__(self, metrics: Metrics, clock: Clock) -> None:
        self._metrics = metrics
        self._clock = clock
        self._created: dict[str, int] = {}  # responses without audio yet -> created at

    def observe(self, event: ServerEvent) -> None:
        if isinstance(event, ResponseCreated):
            self._created[event.response.id] = self._clock.now_ms()
        elif isinstance(event, ResponseOutputAudioDelta):
            created_ms = self._created.pop(event.response_id, None)
            if created_ms is not None:
                self._metrics.time_to_first_audio((self._clock.now_ms() - created_ms) / 1000)
