"""`joyduplex bench`: run the load generator the parsed options describe, on uvloop when
it is importable, and print what it measured.

It prints a progress line on stderr while it runs, a short summary on stderr and the JSON
report on stdout at the end (`--json FILE` also writes it to FILE); the first Ctrl-C ends
the window early and still reports. Exit status: 0 when it ran, 1 when no websocket could
be opened at all, 2 on a usage error.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import signal
import sys
from typing import TYPE_CHECKING, TextIO

from clients.loadgen.arguments import options_from_args
from clients.loadgen.options import BenchUsageError
from clients.loadgen.report import summary
from clients.loadgen.run import run_bench
from transport.log_redaction import redact

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from clients.loadgen.options import BenchOptions
    from clients.loadgen.report import BenchReport

__all__ = ["main_from_args"]


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
