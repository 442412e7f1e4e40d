"""The load generator, `joyduplex bench`: offer many realtime sessions to a server and
report what it held.

The load tool an operator points at any joyduplex server, or any server speaking the
OpenAI Realtime GA wire protocol:

    joyduplex bench ws://127.0.0.1:8000/v1/realtime --sessions 500 --ramp 20 --duration 60

It is a client of the wire protocol and nothing more: no module of the server side of
`transport` imports it (an import contract in pyproject.toml), and it reaches a backend
(the Piper voice of `--speech piper`) only through `runtime.speech_clip`, by name.

By concern:

- `options`: what a run offers (`BenchOptions`) and the session setup it sends;
- `arguments` and `command`: the command line, and running it (exit status, printing);
- `payloads`: the appends it sends, encoded once: quiet noise, the probe speech, a frame;
- `schedule`: when sessions connect, which ones speak and when, and the clock;
- `session` and `probe`: one offered session, and what a probe speaks and measures;
- `call_session`: one offered session as a WebRTC call (`--transport webrtc`, the webrtc
  extra), whose report carries a websocket run of the same sessions as its baseline;
- `run_state` and `run`: what the sessions of a run share, and the run with its window;
- `server_cpu` and `self_watch`: the server's CPU, and the tool watching itself;
- `report`: the JSON report and its summary lines.

It raises its own open-file limit to fit one socket per session; the server's
`max_sessions` (default 1024) and measured capacity are the server's.

Library use: `report = await run_bench(BenchOptions(url, sessions=20, duration_s=3))`;
`report.to_json()` is the JSON the command prints.
"""

from __future__ import annotations

from clients.loadgen.arguments import add_bench_arguments, options_from_args
from clients.loadgen.command import main_from_args
from clients.loadgen.options import RATE_HZ, TURN_DETECTION, BenchOptions, BenchUsageError
from clients.loadgen.report import (
    BenchReport,
    ProbeReport,
    SelfReport,
    ServerCpu,
    SessionCounts,
    Stats,
    summary,
)
from clients.loadgen.run import run_bench
from clients.loadgen.server_cpu import parse_cpu_seconds

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
