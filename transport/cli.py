"""The `joyduplex` command line: `serve` (the realtime server), `client` (one spoken
turn from a WAV file, the reply written to a WAV and its transcript printed) and `bench`
(the load generator, `clients.loadgen`).

`client` and `bench` are the client side's (`clients/`): this module imports them only
inside the functions that build and run those subcommands, the one place the server side
reaches a client (the exception the import-linter contracts in pyproject.toml name).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

from spec.version import PROTOCOL_VERSION, __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]

_BACKEND_HELP = (
    "cpu: the embedded default (Silero VAD, Whisper tiny.en, Piper TTS, and a deterministic "
    "frame describer standing in for the VLM); scripted: deterministic test backend; "
    "gpu: Qwen3-ASR, JoyAI-VL-Interaction, Qwen3-TTS on vLLM (needs the gpu extra and weights); "
    "remote: the same models on existing vLLM / vLLM-Omni servers over HTTP, several replicas "
    "per stage (the [remote] table of --config; see docs/deploy.md)"
)


_WORKERS_HELP = (
    "worker processes sharing the port, each with its own backend and an even share "
    "(rounded up) of max_sessions (default: one per core, os.cpu_count(); 1 for gpu)"
)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="joyduplex",
        description="Realtime full-duplex voice + camera sessions with a vision-language model.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"joyduplex {__version__} (protocol {PROTOCOL_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the realtime server")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    serve.add_argument(
        "--backend", choices=["cpu", "scripted", "gpu", "remote"], help=_BACKEND_HELP
    )
    serve.add_argument("--profile", choices=["speech", "camera"], help="speech runs ASR")
    serve.add_argument("--config", metavar="FILE.toml", help="server config file")
    serve.add_argument("--api-key", help="require this key from clients")
    serve.add_argument(
        "--protect-probes",
        action="store_true",
        default=None,
        help="/readyz and /metrics need the API key too (Authorization: Bearer); "
        "/healthz stays open",
    )
    serve.add_argument("--workers", type=_positive_int, metavar="N", help=_WORKERS_HELP)
    serve.add_argument(
        "--host-id",
        metavar="NAME",
        help="name this server in its session ids (sess_NAME.…), so that a load balancer "
        "can route a resume to it (docs/deploy.md); [server] host_id",
    )
    serve.add_argument(
        "--asr",
        choices=("moonshine", "whisper"),
        help="cpu: the ASR stage (default whisper; docs/performance.md compares them)",
    )
    serve.add_argument("--asr-model", help="cpu: a local faster-whisper model directory")
    serve.add_argument(
        "--tts",
        choices=("hibari", "piper"),
        help="cpu: the voice engine (default hibari, Apache-2.0; piper is GPL-3.0, its own extra)",
    )
    serve.add_argument(
        "--tts-voice",
        help="cpu: hibari's default voice (heart, or another already in its cache), "
        "or with --tts piper a local Piper voice (.onnx)",
    )
    serve.add_argument("--vad-model", help="cpu: a Silero VAD .onnx (SHA-256 checked)")
    serve.add_argument(
        "--turn-model", help="cpu: a Smart Turn v3.2 .onnx for semantic_vad (SHA-256 checked)"
    )
    serve.add_argument("--placement", help="gpu: placement file (TOML)")
    serve.add_argument("--log-level", default="info")
    client = sub.add_parser("client", help="send one spoken turn from a WAV file")
    try:
        from clients.cli import add_client_arguments
    except ImportError:  # pragma: no cover - the client module ships with the package
        pass
    else:
        add_client_arguments(client)
    _add_bench_parser(sub)
    return parser


def _add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`joyduplex bench` (clients/loadgen): offer many sessions, report what was held."""
    from clients.loadgen.arguments import add_bench_arguments

    add_bench_arguments(sub.add_parser("bench", help="load-test a realtime server"))


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from transport.app import create_app
    from transport.log_redaction import uvicorn_log_config
    from transport.server import RealtimeServer, configure_logging, http_options
    from transport.settings import default_workers, load_settings

    configure_logging(args.log_level)
    options = {
        key: value
        for key, value in (
            ("asr", args.asr),
            ("asr_model", args.asr_model),
            ("tts", args.tts),
            ("tts_voice", args.tts_voice),
            ("vad_model", args.vad_model),
            ("turn_model", args.turn_model),
            ("placement", args.placement),
        )
        if value is not None
    }
    try:
        settings = load_settings(
            args.config,
            host=args.host,
            port=args.port,
            backend=args.backend,
            profile=args.profile,
            api_key=args.api_key,
            protect_probes=args.protect_probes,
            workers=args.workers,
            host_id=args.host_id,
            backend_options=options or None,
        )
    except (OSError, ValueError) as exc:
        print(f"joyduplex: {exc}", file=sys.stderr)
        return 2
    workers = settings.workers or default_workers(settings.backend)
    print(
        f"joyduplex {__version__}: backend {settings.backend}, profile {settings.profile}, "
        f"{workers} worker{'s' if workers > 1 else ''}; loading models, then serving on "
        f"http://{settings.host}:{settings.port}/ (websocket /v1/realtime)",
        file=sys.stderr,
    )
    uvicorn_options = {
        "host": settings.host,
        "port": settings.port,
        "ws_max_size": settings.limits.max_event_bytes + 1024 * 1024,
        # base64 audio barely compresses: inflating it per message costs CPU for nothing
        "ws_per_message_deflate": False,
        "log_level": args.log_level,
        "log_config": uvicorn_log_config(),  # keys masked (the workers get it too)
        "timeout_graceful_shutdown": 10,
        **http_options(settings.limits),
    }
    # uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again: with
    # this handler both end the process quietly with status 0.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if workers > 1:
        from transport.workers import WorkerSpec, serve_workers

        spec = WorkerSpec(settings, uvicorn_options, args.log_level)
        try:
            return serve_workers(spec, workers)
        except OSError as exc:
            print(
                f"joyduplex: cannot listen on {settings.host}:{settings.port}: {exc}",
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt:  # before the supervisor took the signals over
            return 0
    config = uvicorn.Config(create_app(settings), **uvicorn_options)
    with contextlib.suppress(KeyboardInterrupt):
        RealtimeServer(config).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "client":
        import anyio

        from clients.cli import run_client_from_args

        return anyio.run(run_client_from_args, args)
    if args.command == "bench":
        from clients.loadgen.command import main_from_args

        return main_from_args(args, argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
