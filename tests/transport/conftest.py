from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import uvicorn

from backends.scripted.backend import create_backend
from backends.scripted.script import Script
from tests.load_shedding import without_shedding
from transport.app import create_app
from transport.server import RealtimeServer, http_options
from transport.settings import ServerSettings


@dataclass
class LiveServer:
    url: str  # http://127.0.0.1:PORT
    script: Script
    app: Any
    #: the server's event loop (a test that acts inside the server, as a network does)
    loop: Any = None

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/realtime"


def start_server(settings: ServerSettings | None = None, **kw: Any) -> tuple[LiveServer, Any]:
    script = Script()
    settings = replace(settings or ServerSettings(backend="scripted"), backend="scripted", port=0)
    settings = without_shedding(settings)
    app = create_app(settings, backend=create_backend(script=script), **kw)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        ws_max_size=settings.limits.max_event_bytes + 1024 * 1024,
        **http_options(settings.limits),
    )
    server = RealtimeServer(config)  # in a thread: uvicorn installs no signal handlers
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    live = LiveServer(f"http://127.0.0.1:{port}", script, app, server.servers[0].get_loop())

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=20)

    return live, stop


@pytest.fixture
def live_server() -> Iterator[LiveServer]:
    live, stop = start_server()
    yield live
    stop()
