"""`joyduplex bench`: offer many realtime sessions to a server and report what it held.

The load tool an operator points at any joyduplex server, or any server speaking the
OpenAI Realtime GA wire protocol:

    joyduplex bench ws://127.0.0.1:8000/v1/realtime --sessions 500 --ramp 20 --duration 60

What every session does (one asyncio loop, uvloop when importable, for all of them):

- connects without permessage-deflate, waits for the first server event (`session.created`,
  or an `error` followed by a close when the server refuses the session), then sends one
  `session.update`: input `audio/pcm` at 24 kHz (the openai SDK default) and, with `--vad`
  (the default), `server_vad` turn detection with the values in `TURN_DETECTION`; with
  `--no-vad` the update sets `turn_detection: null` instead;
- streams `input_audio_buffer.append` events in real time, one every `--append-ms`, each
  carrying exactly that many milliseconds of 24 kHz pcm16 (base64). Send times are
  absolute (`start + k * append_ms`), so the stream never drifts; a session that falls
  behind catches up. The JSON text of every append is encoded once before the run (a
  small pool of low-level noise chunks at about -60 dBFS, so server VAD stays quiet, and
  the chunks of the speech clip), so sending costs one websocket frame;
- sends `session.heartbeat` once a second and times the round trip to the server's
  `session.heartbeat_ack` (a server that does not know the event answers `error`: the
  session then stops sending heartbeats, counted in `heartbeat_unsupported`);
- with `--frames N`, sends a small JPEG camera frame every N ms: it rides on the next
  audio append (`video_frames`, the joyduplex extension), as joyduplex clients send them.

Probe sessions (`--probes K`, default 1 when `--speech` is given) speak the speech clip
instead of noise, once, then again 2 s after the reply's `response.done` (or 20 s after
the clip ended without one). Two latencies are measured per utterance:

- `speech_started` delay: the arrival of `input_audio_buffer.speech_started` minus the send
  time of the append that carried the audio at the VAD's decision point. The server
  reports `audio_start_ms` = the start of the first voiced audio minus the prefix padding;
  it can only decide after `min_speech_duration_ms` of voiced audio, so the decision point
  is `audio_start_ms + prefix_padding_ms + min_speech_duration_ms` of the turn detection
  this tool sent (joyduplex's detector works in whole 32 ms frames, so the true point can
  be up to one frame later). Milliseconds count from the session's first append; append k
  carries `[k * append_ms, (k + 1) * append_ms)`.
- end of speech to first reply audio: the arrival of the first
  `response.output_audio.delta` (beta `response.audio.delta`) minus the send time of the
  append carrying the utterance's last voiced sample. That sample is found in the clip
  itself (10 ms frames within 35 dB of the loudest, and above -50 dBFS); a clip with no
  voiced frame falls back to the server's `speech_stopped.audio_end_ms` minus
  `silence_duration_ms`.

The steady window starts once every session has connected, been refused or failed, and
lasts `--duration` seconds. Rates, heartbeat round trips, the tool's own CPU and loop lag
and the server's CPU are measured over that window. The server's CPU is the counter
`process_cpu_seconds_total` (every series summed) of its `/metrics` endpoint (the
websocket URL's host, `http`), scraped at both ends of the window; when it is absent the
report says so and gives null, unless `--server-pid` names a local server process (then
the CPU of that process and its descendants is read from /proc).

The tool watches itself: its event-loop lag (a 10 ms ticker) and its own CPU time. When
the lag's p99 exceeds 20 ms or its CPU exceeds 90 % of one core, the report says the tool
was the bottleneck (`bench.bottleneck`): the server's numbers are then a lower bound.

The command prints a progress line on stderr while it runs, a short summary on stderr and
the JSON report on stdout at the end (`--json FILE` also writes it to FILE); the first
Ctrl-C ends the window early and still reports. Exit status: 0 when it ran, 1 when no
websocket could be opened at all, 2 on a usage error. It raises its own open-file limit to
fit one socket per session; the server's `max_sessions` (default 1024) and measured
capacity are the server's.

Library use: `report = await run_bench(BenchOptions(url, sessions=20, duration_s=3))`;
`report.to_json()` is the JSON the command prints.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import collections
import contextlib
import dataclasses
import importlib
import json
import math
import os
import platform
import resource
import shlex
import signal
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import msgspec
import numpy as np

from spec.version import __version__
from transport.client_cli import DEFAULT_URL, InputFileError, read_wav_mono
from transport.log_redaction import REDACTED, redact

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt
    from websockets.asyncio.client import ClientConnection

__all__ = [
    "RATE_HZ",
    "TURN_DETECTION",
    "BenchOptions",
    "BenchReport",
    "BenchUsageError",
    "ProbeReport",
    "SelfReport",
    "ServerCpu",
    "SessionCounts",
    "Stats",
    "add_bench_arguments",
    "main_from_args",
    "options_from_args",
    "parse_cpu_seconds",
    "run_bench",
    "summary",
]

RATE_HZ = 24_000
#: the turn detection `--vad` sends (the decision-point arithmetic uses these values)
TURN_DETECTION: dict[str, Any] = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "min_speech_duration_ms": 96,
    "create_response": True,
    "interrupt_response": True,
}
NOISE_DBFS = -60.0
NOISE_POOL = 8  # distinct noise chunks, so the noise is not a 1/append_ms periodic tone
HEARTBEAT_INTERVAL_S = 1.0
SETUP_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0
LAG_TICK_S = 0.01
LOOP_LAG_LIMIT_MS = 20.0
CPU_LIMIT_FRACTION = 0.9
PROBE_FIRST_S = 1.0  # the first utterance, after the window opens (probes spread over 1 s)
PROBE_GAP_S = 2.0  # after a reply's response.done
REPLY_TIMEOUT_S = 20.0  # after the clip ended, with no response.done
PIPER_TEXT = "Hello there. What can you see on the camera right now?"
MAX_FRAME_BYTES = 32 * 1024 * 1024

#: a 32x24 JPEG camera frame (a flat grey-blue picture), 643 bytes
FRAME_JPEG_BASE64 = (
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERX"
    "RTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
    "Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAYACADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAA"
    "AAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAk"
    "M2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKT"
    "lJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QA"
    "HwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdh"
    "cRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hp"
    "anN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk"
    "5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwCGiiiuw5wooooAKKKKACiiigD/2Q=="
)


class BenchUsageError(ValueError):
    """Options or an input file this tool cannot use (the message says why)."""


# --- options and report ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """What to offer. `speech`: a WAV path, "piper" (the bundled Piper voice, needs the
    cpu extra) or None (noise only); `probes`: sessions speaking it (None: 1 with speech,
    0 without); `frames_ms`: a camera frame every that many ms (None: none)."""

    url: str = DEFAULT_URL
    sessions: int = 10
    ramp_s: float = 0.0
    append_ms: int = 100
    duration_s: float = 30.0
    speech: str | None = None
    probes: int | None = None
    frames_ms: int | None = None
    vad: bool = True
    api_key: str | None = None
    metrics_url: str | None = None  # None: the websocket URL's host, /metrics
    server_pid: int | None = None
    command_line: str | None = None  # what the report names as the command

    def checked(self) -> BenchOptions:
        """These options, validated.

        Raises:
            BenchUsageError: a value out of range, naming it.
        """
        scheme = urllib.parse.urlsplit(self.url).scheme
        if scheme not in ("ws", "wss"):
            raise BenchUsageError(f"the URL must start with ws:// or wss://, got `{self.url}`")
        if self.sessions < 1:
            raise BenchUsageError("--sessions must be at least 1")
        if not 10 <= self.append_ms <= 1000:
            raise BenchUsageError("--append-ms must be 10..1000")
        if self.ramp_s < 0 or not math.isfinite(self.ramp_s):
            raise BenchUsageError("--ramp must be >= 0 seconds")
        if self.duration_s <= 0 or not math.isfinite(self.duration_s):
            raise BenchUsageError("--duration must be > 0 seconds")
        if self.frames_ms is not None and self.frames_ms < 20:
            raise BenchUsageError("--frames must be at least 20 ms")
        if self.probes is not None:
            if self.probes < 0 or self.probes > self.sessions:
                raise BenchUsageError("--probes must be 0..--sessions")
            if self.probes > 0 and self.speech is None:
                raise BenchUsageError("--probes needs --speech (a WAV file or `piper`)")
        return self

    @property
    def probe_count(self) -> int:
        if self.probes is not None:
            return self.probes
        return 1 if self.speech is not None else 0


@dataclass(frozen=True, slots=True)
class Stats:
    """Percentiles of a sample (milliseconds unless the field says otherwise)."""

    count: int
    p50: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float] | array.array[float]) -> Stats:
        if len(values) == 0:
            return cls(0, None, None, None)
        data = np.asarray(values, dtype=np.float64)
        p50, p99 = np.percentile(data, [50, 99])
        return cls(len(data), _round(float(p50)), _round(float(p99)), _round(float(data.max())))


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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- audio payloads ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Speech:
    """The probe clip as pre-encoded appends, and where its voice is (chunk indices)."""

    chunks: list[bytes]
    voiced_first: int | None
    voiced_last: int | None
    seconds: float
    source: str


def _append_json(pcm16: bytes) -> bytes:
    audio = base64.b64encode(pcm16)
    return b'{"type":"input_audio_buffer.append","audio":"' + audio + b'"}'


def _noise_payloads(append_ms: int, count: int = NOISE_POOL) -> list[bytes]:
    samples = RATE_HZ * append_ms // 1000
    sigma = 32768.0 * 10 ** (NOISE_DBFS / 20)
    rng = np.random.default_rng(12)
    chunks = np.clip(np.round(rng.normal(0.0, sigma, (count, samples))), -32768, 32767)
    return [_append_json(chunk.astype("<i2").tobytes()) for chunk in chunks]


def _voiced_span(pcm: npt.NDArray[np.int16]) -> tuple[int, int] | None:
    """First and last voiced sample: 10 ms frames within 35 dB of the loudest frame and
    above -50 dBFS."""
    frame = RATE_HZ // 100
    count = len(pcm) // frame
    if count == 0:
        return None
    frames = pcm[: count * frame].astype(np.float64).reshape(count, frame) / 32768.0
    rms = np.sqrt(np.mean(np.square(frames), axis=1))
    with np.errstate(divide="ignore"):
        db = 20 * np.log10(np.maximum(rms, 1e-10))
    voiced = np.flatnonzero(db >= max(float(db.max()) - 35.0, -50.0))
    if voiced.size == 0 or float(db.max()) < -50.0:
        return None
    return int(voiced[0]) * frame, (int(voiced[-1]) + 1) * frame - 1


def _speech_payloads(pcm16: bytes, append_ms: int, source: str) -> _Speech:
    """The clip (24 kHz pcm16) cut into appends; the last is padded with noise."""
    samples = RATE_HZ * append_ms // 1000
    pcm = np.frombuffer(pcm16, dtype="<i2")
    if pcm.size == 0:
        raise BenchUsageError(f"the speech `{source}` is empty")
    pad = (-pcm.size) % samples
    sigma = 32768.0 * 10 ** (NOISE_DBFS / 20)
    noise = np.round(np.random.default_rng(13).normal(0.0, sigma, pad)).astype("<i2")
    padded = np.concatenate([pcm, noise])
    chunks = [
        _append_json(padded[i : i + samples].tobytes()) for i in range(0, padded.size, samples)
    ]
    span = _voiced_span(pcm)
    first, last = (span[0] // samples, span[1] // samples) if span else (None, None)
    return _Speech(chunks, first, last, round(pcm.size / RATE_HZ, 3), source)


async def _load_speech(speech: str, append_ms: int) -> _Speech:
    """`speech` (a WAV path or "piper") as probe payloads.

    Raises:
        BenchUsageError: the file cannot be used, or Piper is not installed.
    """
    if speech == "piper":
        return _speech_payloads(await _piper_speech(), append_ms, "piper")
    try:
        pcm16 = read_wav_mono(Path(speech), RATE_HZ)
    except InputFileError as exc:
        raise BenchUsageError(str(exc)) from exc
    return _speech_payloads(pcm16, append_ms, speech)


async def _piper_speech() -> bytes:
    try:
        from backends.base import BackendError, TtsRequest
        from backends.cpu.tts import PiperTts
    except ImportError as exc:  # pragma: no cover - the backends ship with the package
        raise BenchUsageError(f"`--speech piper` needs the cpu extra: {exc}") from exc
    try:
        async with PiperTts(output_sample_rate_hz=RATE_HZ, deterministic=True) as tts:
            request = TtsRequest("bench", PIPER_TEXT, sample_rate_hz=RATE_HZ)
            return b"".join([chunk.pcm16 async for chunk in tts.synthesize(request)])
    except BackendError as exc:
        raise BenchUsageError(f"`--speech piper` needs the cpu extra: {exc}") from exc


# --- the server's CPU ----------------------------------------------------------------------


def _metrics_url(ws_url: str) -> str:
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


async def _server_cpu_sample(options: BenchOptions, url: str) -> tuple[float | None, str | None]:
    value, note = await asyncio.to_thread(_scrape_cpu_seconds, url, options.api_key)
    if value is None and options.server_pid is not None:
        proc = _proc_cpu_seconds(options.server_pid)
        if proc is not None:
            return proc, "proc"
        return None, f"{note}; no process {options.server_pid}"
    return value, "metrics" if value is not None else note


# --- sessions ------------------------------------------------------------------------------


class _ErrorBody(msgspec.Struct):
    code: str | None = None
    type: str | None = None
    event_id: str | None = None


class _RefusalBody(msgspec.Struct):
    error: _ErrorBody


def _refusal_reason(status: int, body: bytes | bytearray | None) -> str:
    """`http_401_unauthorized`: the status and the wire code of an HTTP refusal's body
    (`http_<status>` alone when it has none)."""
    try:
        code = msgspec.json.decode(bytes(body or b""), type=_RefusalBody).error.code
    except (msgspec.ValidationError, msgspec.DecodeError):
        code = None
    return f"http_{status}_{code}" if code else f"http_{status}"


class _Incoming(msgspec.Struct):
    """The few fields this tool reads of a server event (the rest is skipped unparsed)."""

    type: str
    audio_start_ms: float | None = None
    audio_end_ms: float | None = None
    error: _ErrorBody | None = None


_DECODER = msgspec.json.Decoder(_Incoming)


@dataclass(slots=True)
class _Utterance:
    first: int  # append index of the clip's first chunk
    chunks: int
    voiced_first: int | None
    voiced_last: int | None
    ended_at: float | None = None  # loop time the last chunk left
    eos_sent_at: float | None = None
    speech_started: bool = False
    first_audio: bool = False
    answered: bool = False  # response.done (or response.listen) arrived


class _Session:
    def __init__(self, bench: _Bench, index: int, probe: bool) -> None:
        self.bench = bench
        self.index = index
        self.probe = probe
        self.ws: ClientConnection | None = None
        self.ready = False
        loop = asyncio.get_running_loop()
        self.first: asyncio.Future[str] = loop.create_future()
        self.updated: asyncio.Future[str] = loop.create_future()
        self.update_id = f"upd_{index}"
        self.heartbeats: collections.deque[float] = collections.deque()
        self.heartbeat_ok = True
        self.heartbeat_n = 0
        self.first_error: str | None = None
        self.send_times: list[float] = []  # probes only: append k left at send_times[k]
        self.utterance: _Utterance | None = None
        self.next_utterance_at = math.inf

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        bench = self.bench
        try:
            if await self._set_up():
                await self._stream()
        finally:
            if not self.ready:
                bench.resolved()
            ws = self.ws
            if ws is not None:
                with contextlib.suppress(Exception):
                    await ws.close()

    async def _set_up(self) -> bool:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        bench = self.bench
        await asyncio.sleep(bench.t0 + bench.ramp_offset(self.index) - _now())
        headers = (
            {"Authorization": f"Bearer {bench.options.api_key}"} if bench.options.api_key else {}
        )
        try:
            self.ws = await connect(
                bench.options.url,
                compression=None,
                proxy=None,
                additional_headers=headers,
                user_agent_header=f"joyduplex-bench/{__version__}",
                open_timeout=SETUP_TIMEOUT_S,
                ping_interval=None,
                close_timeout=CLOSE_TIMEOUT_S,
                max_size=MAX_FRAME_BYTES,
            )
        except InvalidStatus as exc:  # refused before the upgrade: 401 unauthorized, 403 origin
            bench.connect_failed(_refusal_reason(exc.response.status_code, exc.response.body))
            return False
        except (OSError, TimeoutError, WebSocketException) as exc:
            bench.connect_failed(type(exc).__name__)
            return False
        bench.counts.connected += 1
        bench.tasks.add(asyncio.create_task(self._read()))
        first = await self._wait(self.first)
        if first == "closed" or (first == "error" and await self._closes()):
            self._refused()
            return False
        update = {
            "type": "session.update",
            "event_id": self.update_id,
            "session": {
                "type": "realtime",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": RATE_HZ},
                        "turn_detection": TURN_DETECTION if bench.options.vad else None,
                    }
                },
            },
        }
        if not await self._send(json.dumps(update)):
            await self._closes()
            self._refused()
            return False
        updated = await self._wait(self.updated)
        if updated == "closed":
            self._refused()
            return False
        if updated == "timeout":
            bench.connect_failed("setup_timeout")
            return False
        self.ready = True
        bench.live += 1
        bench.resolved()
        return True

    async def _wait(self, future: asyncio.Future[str]) -> str:
        try:
            return await asyncio.wait_for(asyncio.shield(future), SETUP_TIMEOUT_S)
        except TimeoutError:
            return "timeout"

    async def _closes(self) -> bool:
        """Whether the server closes the connection within `CLOSE_TIMEOUT_S` (a refusal:
        an `error` event, then the close)."""
        ws = self.ws
        assert ws is not None
        try:
            await asyncio.wait_for(ws.wait_closed(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            return False
        return True

    def _refused(self) -> None:
        ws = self.ws
        assert ws is not None
        counts = self.bench.counts
        counts.refused += 1
        _bump(counts.refused_by_close_code, str(ws.close_code))
        if self.first_error is not None:
            _bump(counts.refused_by_error_code, self.first_error)

    async def _send(self, data: str | bytes) -> bool:
        from websockets.exceptions import ConnectionClosed

        ws = self.ws
        assert ws is not None
        try:
            await ws.send(data, text=True)
        except ConnectionClosed:
            return False
        return True

    # --- sending -------------------------------------------------------------------------

    async def _stream(self) -> None:
        """Appends, heartbeats and frames at absolute times until the window ends."""
        bench = self.bench
        step = bench.options.append_ms / 1000
        frame_step = (bench.options.frames_ms or 0) / 1000
        start = _now()
        index = 0
        next_append = start
        next_heartbeat = start + HEARTBEAT_INTERVAL_S * (self.index % 97) / 97
        next_frame = start + frame_step if frame_step else math.inf
        noise = bench.noise
        while True:
            due = min(next_append, next_heartbeat)
            await asyncio.sleep(due - _now())
            now = _now()
            if now >= bench.stop_at:
                return
            if due == next_append:
                payload = self._next_payload(index, noise, now)
                if now >= next_frame:  # the frame rides on this append
                    payload = payload[:-1] + bench.frame_suffix
                    next_frame += frame_step * max(1, math.ceil((now - next_frame) / frame_step))
                    bench.frames += 1
                if bench.in_window:
                    bench.send_lag.append((now - due) * 1000)
                if self.probe:
                    self.send_times.append(now)
                if not await self._send(payload):
                    break
                bench.appends += 1
                index += 1
                next_append = start + index * step
            else:
                next_heartbeat += HEARTBEAT_INTERVAL_S
                if self.heartbeat_ok:
                    self.heartbeat_n += 1
                    self.heartbeats.append(now)
                    hb = f'{{"type":"session.heartbeat","event_id":"hb_{self.heartbeat_n}"}}'
                    if not await self._send(hb):
                        break
        self.bench.dropped(self)

    def _next_payload(self, index: int, noise: list[bytes], now: float) -> bytes:
        """The append `index`: noise, or the next chunk of a probe's utterance."""
        if not self.probe:
            return noise[index % len(noise)]
        speech = self.bench.speech
        assert speech is not None
        u = self.utterance
        if u is not None and u.ended_at is None:
            offset = index - u.first
            if offset == u.voiced_last:
                u.eos_sent_at = now
            if offset == u.chunks - 1:
                u.ended_at = now
            return speech.chunks[offset]
        if u is not None and not u.answered and now - (u.ended_at or now) > REPLY_TIMEOUT_S:
            u.answered = True
            self.next_utterance_at = now
        if now >= self.next_utterance_at:
            self.bench.finish_utterance(u, final=False)
            self.utterance = _Utterance(
                index, len(speech.chunks), speech.voiced_first, speech.voiced_last
            )
            self.next_utterance_at = math.inf
            self.bench.probe.utterances += 1
            return self._next_payload(index, noise, now)
        return noise[index % len(noise)]

    # --- receiving -----------------------------------------------------------------------

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        ws = self.ws
        assert ws is not None
        try:
            async for message in ws:
                if isinstance(message, str):
                    self._on_message(message, _now())
        except ConnectionClosed:
            pass
        finally:
            for future in (self.first, self.updated):
                if not future.done():
                    future.set_result("closed")

    def _on_message(self, message: str, at: float) -> None:
        bench = self.bench
        try:
            event = _DECODER.decode(message)
        except msgspec.DecodeError:
            bench.error("undecodable_event")
            return
        kind = event.type
        if kind == "session.heartbeat_ack":
            if self.heartbeats:
                sent = self.heartbeats.popleft()
                bench.heartbeat_rtt(sent, at)
        elif kind == "error":
            self._on_error(event.error or _ErrorBody())
        elif kind == "input_audio_buffer.speech_started":
            self._on_speech_started(event.audio_start_ms or 0.0, at)
        elif kind == "input_audio_buffer.speech_stopped":
            self._on_speech_stopped(event.audio_end_ms or 0.0)
        elif kind in ("response.output_audio.delta", "response.audio.delta"):
            u = self.utterance
            if u is not None and not u.first_audio and u.eos_sent_at is not None:
                u.first_audio = True
                bench.reply_latency.append((at - u.eos_sent_at) * 1000)
        elif kind in ("response.done", "response.listen"):
            u = self.utterance
            if u is not None and u.ended_at is not None and not u.answered:
                u.answered = True
                self.next_utterance_at = at + PROBE_GAP_S
        if not self.first.done():
            self.first.set_result(kind)
        if kind == "session.updated" and not self.updated.done():
            self.updated.set_result(kind)

    def _on_error(self, error: _ErrorBody) -> None:
        code = error.code or error.type or "unknown"
        self.bench.error(code)
        if not self.first.done():
            self.first_error = code
        event_id = error.event_id or ""
        if event_id.startswith("hb_") and self.heartbeat_ok:
            self.heartbeat_ok = False
            self.heartbeats.clear()
            self.bench.heartbeat_unsupported += 1
        if event_id == self.update_id and not self.updated.done():
            self.updated.set_result("error")  # not configured as asked; it streams anyway

    def _on_speech_started(self, audio_start_ms: float, at: float) -> None:
        """See the module docstring for the decision point."""
        u = self.utterance
        slack = math.ceil(1000 / self.bench.options.append_ms)
        td = TURN_DETECTION
        decision_ms = audio_start_ms + td["prefix_padding_ms"] + td["min_speech_duration_ms"]
        index = max(0, math.ceil(decision_ms / self.bench.options.append_ms) - 1)
        if not self.probe or u is None or not u.first <= index <= u.first + u.chunks + slack:
            self.bench.unexpected_speech_started += 1
            return
        if u.speech_started or not self.send_times:
            return  # a pause in the clip the VAD heard as two turns: the first one counts
        u.speech_started = True
        sent = self.send_times[min(index, len(self.send_times) - 1)]
        self.bench.speech_started_delay.append((at - sent) * 1000)

    def _on_speech_stopped(self, audio_end_ms: float) -> None:
        """Without a voiced sample in the clip, the server's end of speech stands in."""
        u = self.utterance
        if not self.probe or u is None or u.voiced_last is not None or u.eos_sent_at is not None:
            return
        end_ms = audio_end_ms - TURN_DETECTION["silence_duration_ms"]
        index = max(0, math.ceil(end_ms / self.bench.options.append_ms) - 1)
        if index < len(self.send_times):
            u.eos_sent_at = self.send_times[index]


# --- the run ---------------------------------------------------------------------------


class _Bench:
    def __init__(self, options: BenchOptions, speech: _Speech | None) -> None:
        self.options = options
        self.speech = speech
        self.t0 = _now()
        self.noise = _noise_payloads(options.append_ms)
        self.frame_suffix = (',"video_frames":["' + FRAME_JPEG_BASE64 + '"]}').encode()
        self.counts = SessionCounts(offered=options.sessions)
        self.probe = ProbeReport(
            sessions=options.probe_count,
            speech_source=speech.source if speech else None,
            speech_seconds=speech.seconds if speech else None,
            end_of_speech_reference=(
                None
                if speech is None
                else "wav_envelope"
                if speech.voiced_last is not None
                else "speech_stopped"
            ),
        )
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending = options.sessions
        self.all_resolved = asyncio.Event()
        self.live = 0
        self.appends = 0
        self.appends_at_start = 0
        self.frames = 0
        self.errors: dict[str, int] = {}
        self.heartbeat_unsupported = 0
        self.unexpected_speech_started = 0
        self.in_window = False
        self.window_start = math.inf
        self.stop_at = math.inf
        self.rtts: list[float] = []
        self.recent_rtts: list[float] | None = None  # for the progress line, when shown
        self.send_lag: array.array[float] = array.array("f")
        self.loop_lag: array.array[float] = array.array("f")
        self.recent_lag = 0.0
        self.speech_started_delay: list[float] = []
        self.reply_latency: list[float] = []
        self.sessions: list[_Session] = []

    def ramp_offset(self, index: int) -> float:
        return self.options.ramp_s * index / self.options.sessions

    def resolved(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self.all_resolved.set()

    def connect_failed(self, reason: str) -> None:
        self.counts.connect_failed += 1
        _bump(self.counts.connect_failed_by_reason, reason)

    def dropped(self, session: _Session) -> None:
        if _now() >= self.stop_at:
            return
        self.live -= 1
        self.counts.dropped += 1
        ws = session.ws
        _bump(self.counts.dropped_by_close_code, str(ws.close_code if ws else None))

    def error(self, code: str) -> None:
        _bump(self.errors, code)

    def heartbeat_rtt(self, sent: float, at: float) -> None:
        rtt = (at - sent) * 1000
        if self.recent_rtts is not None:
            self.recent_rtts.append(rtt)
        if self.window_start <= sent < self.stop_at:
            self.rtts.append(rtt)

    def finish_utterance(self, u: _Utterance | None, *, final: bool) -> None:
        if u is None:
            return
        cut_short = u.ended_at is None or (not u.answered and _now() - u.ended_at < REPLY_TIMEOUT_S)
        if final and cut_short and not (u.speech_started and u.first_audio):
            self.probe.unfinished += 1
            return
        if not u.speech_started:
            self.probe.missed_speech_started += 1
        if not u.first_audio:
            self.probe.no_reply += 1

    async def lag_monitor(self) -> None:
        start = _now()
        tick = 0
        while True:
            tick += 1
            due = start + tick * LAG_TICK_S
            await asyncio.sleep(due - _now())
            lag = (_now() - due) * 1000
            self.recent_lag = max(self.recent_lag, lag)
            if self.in_window:
                self.loop_lag.append(lag)
            if lag > LAG_TICK_S * 1000:  # behind: measure from now on, no burst of catch-ups
                tick = math.floor((_now() - start) / LAG_TICK_S)

    async def progress(self, out: TextIO) -> None:
        tty = out.isatty()
        self.recent_rtts = []
        last_appends, last_cpu, last_at = self.appends, _cpu_seconds(), _now()
        every = 1.0 if tty else 5.0
        while True:
            await asyncio.sleep(every)
            now, cpu = _now(), _cpu_seconds()
            span = max(now - last_at, 1e-9)
            rtts, self.recent_rtts = sorted(self.recent_rtts), []
            rtt = f"{rtts[len(rtts) // 2]:.1f} ms" if rtts else "-"
            phase = "steady" if self.in_window else "ramp" if self.stop_at == math.inf else "end"
            c = self.counts
            line = (
                f"[{now - self.t0:6.1f}s {phase}] sessions {self.live} held "
                f"/ {c.offered} offered, {c.refused} refused, {c.connect_failed} failed, "
                f"{c.dropped} dropped | {(self.appends - last_appends) / span:,.0f} appends/s | "
                f"heartbeat p50 {rtt} | errors {sum(self.errors.values())} | "
                f"bench lag max {self.recent_lag:.0f} ms, cpu {100 * (cpu - last_cpu) / span:.0f}%"
            )
            out.write(f"\r{line}\x1b[K" if tty else line + "\n")
            out.flush()
            last_appends, last_cpu, last_at = self.appends, cpu, now
            self.recent_lag = 0.0


def _bump(table: dict[str, int], key: str) -> None:
    table[key] = table.get(key, 0) + 1


def _now() -> float:
    """The clock of every schedule and measurement: `time.monotonic()` (uvloop's
    `loop.time()` only has millisecond resolution)."""
    return time.monotonic()


def _round(value: float, digits: int = 3) -> float:
    return round(value, digits)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine(event_loop: str) -> dict[str, Any]:
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


def _event_loop_name() -> str:
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _raise_fd_limit(sessions: int) -> None:
    """Allow a socket per session (the soft limit is often 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = sessions + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def run_bench(
    options: BenchOptions,
    *,
    progress: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> BenchReport:
    """Offer `options.sessions` sessions, hold them for the steady window, report.

    `progress`: where to write the progress line (None: nowhere); `stop`: set it to end
    the window early (the report covers what ran). The process's open-file soft limit is
    raised to fit one socket per session when it is lower.

    Raises:
        BenchUsageError: bad options, or speech that cannot be loaded.
    """
    options = options.checked()
    _raise_fd_limit(options.sessions)
    speech = await _load_speech(options.speech, options.append_ms) if options.speech else None
    bench = _Bench(options, speech)
    event_loop = _event_loop_name()
    report = BenchReport(
        tool="joyduplex bench",
        version=__version__,
        command=options.command_line,
        url=options.url,
        options={
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
        machine=_machine(event_loop),
    )
    metrics_url = options.metrics_url or _metrics_url(options.url)
    probes = {round(i * options.sessions / options.probe_count) for i in range(options.probe_count)}
    helpers = [asyncio.create_task(bench.lag_monitor())]
    if progress is not None:
        helpers.append(asyncio.create_task(bench.progress(progress)))
    for index in range(options.sessions):
        session = _Session(bench, index, index in probes)
        bench.sessions.append(session)
        bench.tasks.add(asyncio.create_task(session.run()))
    stopped = stop or asyncio.Event()
    try:
        await _first_of(bench.all_resolved.wait(), stopped.wait())
        # the steady window
        cpu_before, source_before = await _server_cpu_sample(options, metrics_url)
        cpu_before_at = _now()
        bench.window_start = _now()
        bench.in_window = True
        bench.appends_at_start = bench.appends
        own_before = _cpu_seconds()
        for n, session in enumerate(s for s in bench.sessions if s.probe and s.ready):
            first_at = PROBE_FIRST_S * (1 + n / max(1, options.probe_count))
            session.next_utterance_at = bench.window_start + first_at
        if bench.live > 0 and not stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), options.duration_s)
        bench.stop_at = _now()
        bench.in_window = False
        own_cpu = _cpu_seconds() - own_before
        window = bench.stop_at - bench.window_start
        held = bench.live
        appends_in_window = bench.appends - bench.appends_at_start
        cpu_after, source_after = await _server_cpu_sample(options, metrics_url)
        cpu_after_at = _now()
        for session in bench.sessions:
            if session.probe:
                bench.finish_utterance(session.utterance, final=True)
    finally:
        bench.stop_at = min(bench.stop_at, _now())
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        for failure in await _finish(bench.tasks):
            bench.error(f"bench_internal_{type(failure).__name__}")  # a bug here, not there
        if progress is not None:
            progress.write("\n" if progress.isatty() else "")
            progress.flush()
    report.sessions = dataclasses.replace(bench.counts, held=held)
    report.window_s = _round(window)
    report.appends_sent = bench.appends
    report.appends_per_s = _round(appends_in_window / window, 1) if window > 0 else 0.0
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
    report.server = _server_report(
        metrics_url,
        (cpu_before, source_before, cpu_before_at),
        (cpu_after, source_after, cpu_after_at),
        report.sessions.held,
    )
    report.bench = _self_report(event_loop, bench, own_cpu, window)
    return report


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


def _server_report(
    url: str,
    before: tuple[float | None, str | None, float],
    after: tuple[float | None, str | None, float],
    held: int,
) -> ServerCpu:
    report = ServerCpu(metrics_url=url)
    (cpu0, source0, at0), (cpu1, source1, at1) = before, after
    if cpu0 is None or cpu1 is None or source0 != source1:
        notes = [n for n in (source0, source1) if n not in (None, "metrics", "proc")]
        report.note = "; ".join(dict.fromkeys(notes)) or "the CPU source changed mid-run"
        return report
    report.source = source0
    report.window_s = _round(at1 - at0)
    report.cpu_seconds = _round(cpu1 - cpu0)
    cores = (cpu1 - cpu0) / max(at1 - at0, 1e-9)
    report.cores_used = _round(cores)
    if held:
        report.cores_per_session = round(cores / held, 6)
    if cores > 0:
        report.sessions_per_core = _round(held / cores, 1)
    if source0 == "proc":
        report.note = "read from /proc (--server-pid): the metrics endpoint has no CPU counter"
    return report


def _self_report(event_loop: str, bench: _Bench, cpu: float, window: float) -> SelfReport:
    report = SelfReport(event_loop=event_loop)
    report.loop_lag_ms = Stats.of(bench.loop_lag)
    report.send_lag_ms = Stats.of(bench.send_lag)
    report.cpu_seconds = _round(cpu)
    if window < 0.5:
        return report
    fraction = report.cpu_fraction_of_core = _round(cpu / window)
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


# --- the command -----------------------------------------------------------------------


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the `bench` sub-command's options on `parser`."""
    parser.description = (
        "Offer many realtime sessions to a joyduplex (or any OpenAI-Realtime-compatible) "
        "server, hold them for a steady window, and report what the server held and what it "
        "cost: progress on stderr, the JSON report on stdout."
    )
    parser.add_argument(
        "url", nargs="?", default=DEFAULT_URL, help=f"websocket URL (default {DEFAULT_URL})"
    )
    parser.add_argument("--sessions", type=int, default=10, help="sessions to offer (default 10)")
    parser.add_argument(
        "--ramp", type=float, default=0.0, metavar="SECONDS", help="spread the connects (0)"
    )
    parser.add_argument(
        "--append-ms", type=int, default=100, help="audio per append, sent that often (100)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="the steady window, after every session connected or was refused (30)",
    )
    parser.add_argument(
        "--speech",
        metavar="WAV|piper",
        help="what probe sessions speak: a pcm16 WAV, or `piper` (the bundled Piper voice, "
        "cpu extra); default: every session streams quiet noise",
    )
    parser.add_argument(
        "--probes", type=int, help="sessions that speak --speech periodically (1 with --speech)"
    )
    parser.add_argument(
        "--frames", type=int, metavar="MS", help="send a small JPEG camera frame every MS ms"
    )
    parser.add_argument(
        "--vad",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="server_vad turn detection in the session.update (default on)",
    )
    parser.add_argument("--api-key", help="sent as `Authorization: Bearer <key>`")
    parser.add_argument(
        "--metrics-url", help="the server's Prometheus endpoint (default: the URL's host, /metrics)"
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        help="a local server process: its CPU (and its children's) from /proc when the "
        "metrics have no process_cpu_seconds_total",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress line or summary")


def _without_key(words: list[str]) -> list[str]:
    """The command line as the report names it: the API key (`--api-key K`,
    `--api-key=K`) and URL credentials (`?token=`) masked."""
    masked: list[str] = []
    for word in words:
        if masked and masked[-1] == "--api-key":
            masked.append(REDACTED)
        elif word.startswith("--api-key="):
            masked.append(f"--api-key={REDACTED}")
        else:
            masked.append(redact(word))
    return masked


def options_from_args(args: argparse.Namespace, argv: Sequence[str] | None = None) -> BenchOptions:
    """`BenchOptions` from the options `add_bench_arguments` parsed."""
    command = shlex.join(_without_key(["joyduplex", *(sys.argv[1:] if argv is None else argv)]))
    return BenchOptions(
        url=args.url,
        sessions=args.sessions,
        ramp_s=args.ramp,
        append_ms=args.append_ms,
        duration_s=args.duration,
        speech=args.speech,
        probes=args.probes,
        frames_ms=args.frames,
        vad=args.vad,
        api_key=args.api_key,
        metrics_url=args.metrics_url,
        server_pid=args.server_pid,
        command_line=command,
    )


#: what to do about sessions refused before the upgrade, by reason prefix
_REFUSAL_HINTS = {
    "http_401": ": the server refused the API key (unauthorized); pass it with --api-key",
    "http_403": ": the server refused the Origin (origin_not_allowed)",
}


def main_from_args(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run the bench the parsed options describe. Exit status: 0 when it ran, 1 when no
    session could connect at all, 2 on a usage error."""
    try:
        options = options_from_args(args, argv).checked()
    except BenchUsageError as exc:
        print(f"joyduplex bench: {exc}", file=sys.stderr)
        return 2
    progress = None if args.quiet else sys.stderr
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        try:
            report = runner.run(_run_until_interrupted(options, progress))
        except BenchUsageError as exc:
            print(f"joyduplex bench: {exc}", file=sys.stderr)
            return 2
    data = report.to_json()
    text = json.dumps(data, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    if not args.quiet:
        print(summary(report), file=sys.stderr)
    print(text)
    if report.sessions.connected == 0:
        reasons = report.sessions.connect_failed_by_reason
        hint = next(
            (h for r, h in _REFUSAL_HINTS.items() if any(k.startswith(r) for k in reasons)), ""
        )
        print(f"joyduplex bench: could not connect to {redact(options.url)}{hint}", file=sys.stderr)
        return 1
    return 0


async def _run_until_interrupted(options: BenchOptions, progress: TextIO | None) -> BenchReport:
    """`run_bench`; the first Ctrl-C ends the window early and still reports."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        return await run_bench(options, progress=progress, stop=stop)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is importable (it is, with uvicorn[standard]), else None."""
    try:
        module = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = module.new_event_loop
    return factory


def summary(report: BenchReport) -> str:
    """A few human lines for stderr."""
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
