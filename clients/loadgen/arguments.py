"""The `joyduplex bench` command line: its options (`add_bench_arguments`) and the
`BenchOptions` they stand for, with the command named in the report, keys masked."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clients.cli import DEFAULT_URL
from clients.loadgen.options import WEBRTC_FRAME_MS, BenchOptions
from transport.log_redaction import REDACTED, redact

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["add_bench_arguments", "options_from_args"]


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
        "--append-ms",
        type=int,
        help="audio per append, sent that often (100; with --transport webrtc: 20, "
        "one Opus packet)",
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
        "cpu and piper extras); default: every session streams quiet noise",
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
    parser.add_argument(
        "--transport",
        choices=("websocket", "webrtc"),
        default="websocket",
        help="how each session connects: the websocket URL itself, or a WebRTC call "
        "(POST to the URL's path + /calls over http(s); audio on Opus tracks, events on "
        "the data channel) (websocket)",
    )
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --transport webrtc: first hold the same sessions over the websocket, "
        "and report both figures side by side (default on)",
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
        append_ms=args.append_ms
        if args.append_ms is not None
        else WEBRTC_FRAME_MS
        if args.transport == "webrtc"
        else 100,
        duration_s=args.duration,
        speech=args.speech,
        probes=args.probes,
        frames_ms=args.frames,
        vad=args.vad,
        api_key=args.api_key,
        metrics_url=args.metrics_url,
        server_pid=args.server_pid,
        command_line=command,
        transport=args.transport,
        baseline=args.baseline,
    )
