"""A joyduplex server in this process, for the browser tests (tests/web) and the
measurement tools: its settings with load shedding off, and the server run in a thread.

Load shedding is off because on a loaded shared machine (2 cores, a browser beside the
server) the event loop really does wake late for seconds at a time; a server that then
refuses new sessions is right (its own tests prove it), but a test or a measurement wants
its sessions admitted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spec.limits import Limits
    from transport.settings import ServerSettings

__all__ = ["ServerStartFailed", "serve_in_thread", "without_shedding"]


class ServerStartFailed(RuntimeError):
    """The server did not start listening in time (or its thread died)."""


def without_shedding(settings: ServerSettings) -> ServerSettings:
    """`settings` with load shedding off (`[limits] shed_loop_lag_ms = 0`)."""
    limits: Limits = msgspec.structs.replace(settings.limits, shed_loop_lag_ms=0)
    return dataclasses.replace(settings, limits=limits)


@contextmanager
def serve_in_thread(app: Any, *, start_timeout_s: float) -> Iterator[str]:
    """Serve `app` (`transport.app.create_app`'s) on 127.0.0.1, a free port, in a daemon
    thread; yields its http URL and stops it on exit.

    Raises:
        ServerStartFailed: it was not listening within `start_timeout_s`.
    """
    import uvicorn

    from transport.server import RealtimeServer

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = RealtimeServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise ServerStartFailed("the server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
