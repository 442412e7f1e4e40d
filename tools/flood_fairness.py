"""Fair share under a flood: the turn latency of clean sessions beside a flood of hostile
events, against the same clean sessions unattacked, on one `joyduplex serve` (D38).

    python tools/flood_fairness.py                      # the acceptance run
    python tools/flood_fairness.py --limits-off         # the same with the rate limits off
    python tools/flood_fairness.py --repo /tmp/old      # another checkout's server
    python tools/flood_fairness.py --events 20000 --limit max_events_per_s=200

It starts `joyduplex serve --backend scripted --workers 2` from `--repo` (default: this
checkout) on a free loopback port, shedding off (a loaded machine would refuse sessions,
which is right, but not what this measures), `max_event_bytes` 1 MiB (the hostile frames
include over-limit ones: a megabyte each, not fifteen) and the scripted backend's records
bounded. `--limits-off` adds `max_events_per_s = 0` and `max_bytes_per_s = 0`;
`--limit KEY=VALUE` sets any other `[limits]` key. A checkout from before the rate limits
refuses those keys: measure it without either.

Clean sessions (`--clean-sessions`, 8, in this process): each opens one websocket, sets
server VAD with `--silence-ms` (200) of silence to end a turn, and streams 20 ms appends
of 16 kHz pcm16 in real time the whole time, a small JPEG riding one append a second and a
heartbeat a second: per turn 400 ms of silence, 600 ms of tone, then silence until the
reply is done. A turn's latency is from the send of its last tone append (the end of
speech) to the first `response.output_audio.delta`. Every `error` event is counted.

The flood (`--events`, 100,000, over `--flood-connections`, 6, in a child process of its
own, so that generating and sending it does not delay the clean sessions' client): seeded
hostile frames from tests/wire_mutations.py (malformed and valid mixed), generated before
the measurement and sent as fast as the server takes them (a heartbeat after every 100,
never more than two such batches unanswered, as in tests/transport/test_hostile_input.py),
every answer drained; a connection the server closes is replaced by a new one until the
flood is sent.

Phases: a warm-up turn per clean session; unattacked, `--turns` (4) turns per session;
attacked, the flood starts and the clean sessions do turns until it is sent (at least
one each; only turns that started and ended within the flood count). One JSON object is
printed (and written to `--out`): per phase the turns, latency p50 / p95 / max, heartbeat
round trips, errors by code and the server's CPU seconds; the flood's events (the pacing
heartbeats not counted; a close discards the few in flight unread), rate, connections,
closes by code, events back and errors by code; the ratios attacked / unattacked of p50
and p95 with the targets (1.5x, 2x). Figures are printed, never asserted: a loaded
machine stretches them (the load average before the run is in `machine`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.wire_mutations import JPEG, Frame, WireMutator  # noqa: E402
from tools.cpu_quota import tree_cpu_s  # noqa: E402

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event as MpEvent

MAX_EVENT_BYTES = 1024 * 1024
RATE_HZ = 16_000
APPEND_MS = 20
SILENCE_BEFORE_MS = 400
SPEECH_MS = 600
#: a hang guard per wait; never a speed bound
GUARD_S = 120.0
TARGETS = {"p50": 1.5, "p95": 2.0}
_ERROR_CODE = re.compile(r'"code"\s*:\s*"([a-z_]+)"')


# --- the server ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_text(*, limits_off: bool, limits: dict[str, str]) -> str:
    """The server's config: shedding off, 1 MiB frames, bounded backend records."""
    lines = ["[limits]", "shed_loop_lag_ms = 0", f"max_event_bytes = {MAX_EVENT_BYTES}"]
    if limits_off:
        lines += ["max_events_per_s = 0", "max_bytes_per_s = 0"]
    lines += [f"{key} = {value}" for key, value in limits.items()]
    return "\n".join([*lines, "", "[backend]", "max_records = 100", ""])


@contextlib.contextmanager
def served(repo: Path, config: Path, workers: int, log: Path) -> Any:
    """`joyduplex serve --backend scripted` from `repo`, ready; its URL and pid."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "transport.cli",
        "serve",
        "--backend",
        "scripted",
        "--config",
        str(config),
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"}
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + GUARD_S
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the server did not start:\n" + log.read_text()[-3000:])
                time.sleep(0.1)
            yield f"ws://127.0.0.1:{port}/v1/realtime", server.pid
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


# --- the clean sessions ----------------------------------------------------------------


def _pcm(ms: int, *, tone: bool) -> str:
    samples = np.arange(ms * RATE_HZ // 1000)
    signal_ = np.sin(samples / 5.0) * 8000 if tone else np.zeros(len(samples))
    return base64.b64encode(signal_.astype("<i2").tobytes()).decode()


TONE = _pcm(APPEND_MS, tone=True)
SILENCE = _pcm(APPEND_MS, tone=False)
FRAME = base64.b64encode(JPEG).decode()


@dataclass
class Turn:
    started: float
    speech_end: float
    first_delta: float
    ended: float

    @property
    def latency_ms(self) -> float:
        return (self.first_delta - self.speech_end) * 1000


@dataclass
class CleanReport:
    turns: list[Turn] = field(default_factory=list)
    heartbeat_rtt_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    close_code: int | None = None


class CleanSession:
    """One clean session on one websocket: 20 ms appends in real time, turns on demand."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.report = CleanReport()
        self._first_delta: asyncio.Future[float] | None = None
        self._done: asyncio.Event = asyncio.Event()
        self._beats: dict[str, float] = {}
        self._updated = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, url: str, silence_ms: int) -> CleanSession:
        ws = await websockets.connect(url, max_size=None, open_timeout=GUARD_S)
        session = cls(ws)
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created", created
        session._reader = asyncio.create_task(session._read())
        vad = {"type": "server_vad", "silence_duration_ms": silence_ms}
        await ws.send(json.dumps({"type": "session.update", "session": {"turn_detection": vad}}))
        async with asyncio.timeout(GUARD_S):
            await session._updated.wait()
        return session

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.monotonic()
                event = json.loads(message)
                kind = event["type"]
                if kind == "response.output_audio.delta":
                    if self._first_delta is not None and not self._first_delta.done():
                        self._first_delta.set_result(now)
                elif kind == "response.done":
                    self._done.set()
                elif kind == "session.heartbeat_ack":
                    sent = self._beats.pop(event.get("event_id") or "", None)
                    if sent is None and self._beats:  # an ack without the id: the oldest
                        sent = self._beats.pop(next(iter(self._beats)))
                    if sent is not None:
                        self.report.heartbeat_rtt_ms.append((now - sent) * 1000)
                elif kind == "session.updated":
                    self._updated.set()
                elif kind == "error":
                    self.report.errors[event["error"]["code"]] += 1
        except websockets.ConnectionClosed:
            pass

    async def turn(self) -> Turn:
        """One spoken turn, appends paced in real time from now on."""
        loop = asyncio.get_running_loop()
        self._first_delta, self._done = loop.create_future(), asyncio.Event()
        start = time.monotonic()
        tick = 0
        speech_end = math.inf

        async def append(audio: str) -> None:
            nonlocal tick
            await asyncio.sleep(max(0.0, start + tick * APPEND_MS / 1000 - time.monotonic()))
            event: dict[str, Any] = {"type": "input_audio_buffer.append", "audio": audio}
            if tick % (1000 // APPEND_MS) == 0:
                event["video_frames"] = [FRAME]
                beat = f"beat_{id(self)}_{time.monotonic_ns()}"
                self._beats[beat] = time.monotonic()
                await self.ws.send(json.dumps({"type": "session.heartbeat", "event_id": beat}))
            await self.ws.send(json.dumps(event))
            tick += 1

        for _ in range(SILENCE_BEFORE_MS // APPEND_MS):
            await append(SILENCE)
        for _ in range(SPEECH_MS // APPEND_MS):
            await append(TONE)
        speech_end = time.monotonic()
        deadline = speech_end + GUARD_S
        while not self._done.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("no reply within the guard")
            await append(SILENCE)
        first = self._first_delta.result() if self._first_delta.done() else math.nan
        return Turn(start, speech_end, first, time.monotonic())

    async def close(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps({"type": "session.close"}))
            async with asyncio.timeout(GUARD_S):
                if self._reader is not None:
                    await self._reader
        await self.ws.close()
        self.report.close_code = self.ws.close_code


async def _turns(
    sessions: list[CleanSession], count: int | None, until: asyncio.Event | None
) -> None:
    """Each session does `count` turns, or turns until `until` is set (at least one)."""

    async def one(session: CleanSession) -> None:
        done = 0
        while (count is not None and done < count) or (
            until is not None and (done == 0 or not until.is_set())
        ):
            session.report.turns.append(await session.turn())
            done += 1

    await asyncio.gather(*(one(s) for s in sessions))


# --- the flood -----------------------------------------------------------------------


@dataclass
class FloodReport:
    events_sent: int = 0
    connections: int = 0
    connect_failures: int = 0
    closes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    events_back: int = 0
    started: float = 0.0
    ended: float = 0.0


def flood_frames(seed: int, lanes: int, events: int) -> list[list[Frame]]:
    """The seeded hostile frames of each lane (together `events`)."""
    per_lane = [events // lanes + (1 if i < events % lanes else 0) for i in range(lanes)]
    mutators = [WireMutator(seed * 100 + i, MAX_EVENT_BYTES) for i in range(lanes)]
    return [[m.next() for _ in range(n)] for m, n in zip(mutators, per_lane, strict=True)]


#: a heartbeat after every BATCH flood frames, and never more than two batches unanswered:
#: the frames a connection has in flight stay few, so the events counted are events the
#: server read (a close discards at most those in flight), not frames left in a socket
BATCH = 100


class _FloodConnection:
    """One flood connection: its answers drained and counted as they come."""

    def __init__(self, ws: Any, report: FloodReport) -> None:
        self.ws = ws
        self.report = report
        self.syncs_answered = 0
        self.answered = asyncio.Event()

    async def drain(self) -> None:
        try:
            async for message in self.ws:
                self.report.events_back += 1
                if not isinstance(message, str):
                    continue
                if message.startswith('{"type":"session.heartbeat_ack"'):
                    self._sync_answered()
                elif message.startswith('{"type":"error"'):
                    found = _ERROR_CODE.search(message)
                    self.report.errors[found.group(1) if found else "?"] += 1
                    if '"event_id":"sync_' in message:  # a refused heartbeat of ours
                        self._sync_answered()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.answered.set()

    def _sync_answered(self) -> None:
        self.syncs_answered += 1
        self.answered.set()

    async def wait_syncs(self, count: int) -> None:
        async with asyncio.timeout(GUARD_S):
            while self.syncs_answered < count and self.ws.close_code is None:
                self.answered.clear()
                await self.answered.wait()


async def _lane(url: str, frames: list[Frame], report: FloodReport) -> None:
    """Send `frames` as fast as the server takes them, on as many connections as it takes."""
    sent = 0
    while sent < len(frames):
        try:
            # close_timeout: a close waits behind the frames the server has yet to read
            ws = await websockets.connect(
                url, max_size=None, compression=None, open_timeout=GUARD_S, close_timeout=GUARD_S
            )
        except (OSError, websockets.InvalidHandshake, TimeoutError):
            report.connect_failures += 1
            await asyncio.sleep(0.05)
            continue
        report.connections += 1
        connection = _FloodConnection(ws, report)
        draining = asyncio.create_task(connection.drain())
        syncs = in_connection = 0
        try:
            while sent < len(frames):
                await ws.send(frames[sent].data)
                sent += 1
                in_connection += 1
                report.events_sent += 1
                if in_connection % BATCH == 0:
                    syncs += 1
                    await ws.send(f'{{"type":"session.heartbeat","event_id":"sync_{syncs}"}}')
                    await connection.wait_syncs(syncs - 1)
                    if ws.close_code is not None:
                        break
        except (websockets.ConnectionClosed, TimeoutError):
            pass
        with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
            async with asyncio.timeout(GUARD_S):
                await ws.close()
                await draining
        draining.cancel()
        report.closes[str(ws.close_code)] += 1


def flood_process(
    url: str, seed: int, lanes: int, events: int, ready: MpEvent, go: MpEvent, out: Any
) -> None:
    """The flood's child process: generate, say ready, wait for go, flood, report."""
    frames = flood_frames(seed, lanes, events)
    ready.set()
    go.wait()
    report = FloodReport()

    async def run() -> None:
        report.started = time.monotonic()
        await asyncio.gather(*(_lane(url, f, report) for f in frames))
        report.ended = time.monotonic()

    asyncio.run(run())
    out.put(
        {
            "events_sent": report.events_sent,
            "seconds": report.ended - report.started,
            "connections": report.connections,
            "connect_failures": report.connect_failures,
            "closes_by_code": dict(report.closes),
            "errors_by_code": dict(report.errors.most_common()),
            "events_back": report.events_back,
            "started": report.started,
            "ended": report.ended,
        }
    )


# --- the run -------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile `q` (0..100) of `values`; None when empty."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _summary(turns: list[Turn], reports: list[CleanReport], cpu_s: float) -> dict[str, Any]:
    latencies = [t.latency_ms for t in turns]
    beats = [b for r in reports for b in r.heartbeat_rtt_ms]
    errors = sum((r.errors for r in reports), Counter())

    def stats(values: list[float]) -> dict[str, float | None]:
        return {
            "p50": percentile(values, 50),
            "p95": percentile(values, 95),
            "max": max(values) if values else None,
        }

    return {
        "turns": len(turns),
        "turns_without_audio": sum(math.isnan(v) for v in latencies),
        "latency_ms": stats(latencies),
        "heartbeat_rtt_ms": stats(beats),
        "errors_by_code": dict(errors),
        "errors": sum(errors.values()),
        "server_cpu_s": round(cpu_s, 2),
    }


async def measure(args: argparse.Namespace, url: str, server_pid: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Event(), context.Event(), context.Queue()
    flood = context.Process(
        target=flood_process,
        args=(url, args.seed, args.flood_connections, args.events, ready, go, out),
        daemon=True,
    )
    flood.start()
    sessions = [await CleanSession.open(url, args.silence_ms) for _ in range(args.clean_sessions)]
    await _turns(sessions, 1, None)  # warm-up, not counted
    while not ready.is_set():  # the flood's frames are generated before anything counts
        await asyncio.sleep(0.1)
    warm_errors = sum((s.report.errors for s in sessions), Counter())
    for s in sessions:
        s.report = CleanReport()

    cpu = tree_cpu_s(server_pid)
    await _turns(sessions, args.turns, None)
    unattacked = _summary(
        [t for s in sessions for t in s.report.turns],
        [s.report for s in sessions],
        tree_cpu_s(server_pid) - cpu,
    )
    before = [
        CleanReport(list(s.report.turns), list(s.report.heartbeat_rtt_ms), Counter(s.report.errors))
        for s in sessions
    ]
    for s in sessions:
        s.report = CleanReport()

    cpu = tree_cpu_s(server_pid)
    go.set()
    flood_done = asyncio.Event()

    async def wait_flood() -> dict[str, Any]:
        result: dict[str, Any] = await asyncio.to_thread(out.get, True, 3600)
        flood_done.set()
        return result

    waiting = asyncio.create_task(wait_flood())
    await _turns(sessions, None, flood_done)
    flood_report = await waiting
    attacked_cpu = tree_cpu_s(server_pid) - cpu
    flood.join(timeout=GUARD_S)
    during = [
        t
        for s in sessions
        for t in s.report.turns
        if t.started >= flood_report["started"] and t.ended <= flood_report["ended"]
    ]
    attacked = _summary(during, [s.report for s in sessions], attacked_cpu)
    attacked["turns_after_the_flood"] = sum(len(s.report.turns) for s in sessions) - len(during)
    for s in sessions:
        await s.close()
    seconds = flood_report["seconds"]
    flood_report["events_per_s"] = round(flood_report["events_sent"] / seconds) if seconds else None
    del flood_report["started"], flood_report["ended"]
    attacked["flood"] = flood_report
    ratios: dict[str, float | None] = {}
    for key in TARGETS:
        a, u = attacked["latency_ms"][key], unattacked["latency_ms"][key]
        ratios[key] = round(a / u, 2) if a is not None and u else None
    return {
        "unattacked": unattacked,
        "attacked": attacked,
        "ratio_attacked_to_unattacked": ratios,
        "targets": {k: f"<= {v}x" for k, v in TARGETS.items()},
        "targets_met": all(r is not None and r <= TARGETS[k] for k, r in ratios.items()),
        "clean_errors": unattacked["errors"] + attacked["errors"] + sum(warm_errors.values()),
        "clean_close_codes": dict(Counter(str(s.report.close_code) for s in sessions)),
        "unattacked_per_session_turns": [len(r.turns) for r in before],
    }


def _limit(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See the module docstring for the method."
    )
    p.add_argument("--repo", default=str(ROOT), help="checkout whose server to run")
    p.add_argument("--workers", type=int, default=2, help="server worker processes (2)")
    p.add_argument("--events", type=int, default=100_000, help="flood events (100000)")
    p.add_argument("--flood-connections", type=int, default=6, help="flood connections (6)")
    p.add_argument("--clean-sessions", type=int, default=8, help="clean sessions (8)")
    p.add_argument("--turns", type=int, default=4, help="unattacked turns per session (4)")
    p.add_argument("--silence-ms", type=int, default=200, help="server VAD silence (200)")
    p.add_argument("--seed", type=int, default=20261130, help="the flood's seed")
    p.add_argument("--limits-off", action="store_true", help="rate limits off (0)")
    p.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [limits] value for the server (repeatable)",
    )
    p.add_argument("--out", help="also write the JSON report here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    repo = Path(args.repo).resolve()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="flood-fairness-") as folder:
        config = Path(folder) / "server.toml"
        config.write_text(config_text(limits_off=args.limits_off, limits=dict(args.limit)))
        log = Path(folder) / "server.log"
        with served(repo, config, args.workers, log) as (url, pid):
            report = asyncio.run(measure(args, url, pid))
        crash_lines = [
            line for line in log.read_text(errors="replace").splitlines() if "crashed" in line
        ]
    report = {
        "tool": "flood_fairness",
        "repo": str(repo),
        "options": {k: v for k, v in vars(args).items() if k not in {"out"}},
        "machine": {
            "cpus": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        **report,
        "server_crash_lines": crash_lines[:5],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
