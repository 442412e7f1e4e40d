"""The `joyduplex` command line."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from spec.version import PROTOCOL_VERSION, __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]


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
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--backend", choices=["cpu", "scripted", "gpu"], default="cpu")
    serve.add_argument("--profile", choices=["speech", "camera"], default="speech")
    serve.add_argument("--config", metavar="FILE.toml")
    serve.add_argument("--api-key")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        print(
            f"joyduplex: backend `{args.backend}` not yet available in this build",
            file=sys.stderr,
        )
        return 2
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
