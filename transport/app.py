"""The Starlette application: realtime websocket, health, readiness, metrics, web UI."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from runtime.host import HostSettings, SessionHost
from transport.settings import ServerSettings
from transport.websocket import realtime_endpoint

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request
    from starlette.websockets import WebSocket

    from backends.base import Backend

__all__ = ["WEB_ROOT", "create_app"]

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _readyz(request: Request) -> Response:
    host: SessionHost = request.app.state.host
    if host.ready:
        backend = host.backend.name if host.backend is not None else None
        return JSONResponse({"status": "ready", "backend": backend, "sessions": host.sessions})
    return JSONResponse({"status": "not ready", "reason": host.failure}, status_code=503)


async def _metrics(request: Request) -> Response:
    host: SessionHost = request.app.state.host
    return PlainTextResponse(host.metrics.render(), media_type="text/plain; version=0.0.4")


async def _echo(websocket: WebSocket) -> None:
    """A bare echo endpoint: the baseline of the round-trip benchmark."""
    await websocket.accept()
    with contextlib.suppress(Exception):
        while True:
            await websocket.send_text(await websocket.receive_text())


def create_app(
    settings: ServerSettings | None = None,
    *,
    backend: Backend | None = None,
    enable_echo: bool = False,
) -> Starlette:
    """Build the app; the backend is loaded and warmed up in the lifespan."""
    settings = settings or ServerSettings()
    host = SessionHost(
        HostSettings(
            backend=settings.backend,
            backend_options=settings.backend_options,
            profile=settings.profile,
            limits=settings.limits,
            session_defaults=settings.session_defaults,
        ),
        backend=backend,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await host.start()
        try:
            yield
        finally:
            await host.stop()

    routes: list[Route | WebSocketRoute | Mount] = [
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        WebSocketRoute("/v1/duplex", realtime_endpoint),
        Route("/healthz", _healthz),
        Route("/readyz", _readyz),
        Route("/metrics", _metrics),
    ]
    if enable_echo:
        routes.append(WebSocketRoute("/v1/echo", _echo))
    if WEB_ROOT.is_dir():
        routes.append(Mount("/", StaticFiles(directory=WEB_ROOT, html=True), name="web"))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.host = host
    app.state.settings = settings
    return app
