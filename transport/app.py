"""The Starlette application: realtime websocket, WebRTC calls, health, readiness,
metrics, web UI.

`/healthz` is always open; with `protect_probes`, `/readyz` and `/metrics` need the API key
as `Authorization: Bearer` and answer 401 without it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from runtime.host import HostSettings, SessionHost
from runtime.metrics import CONTENT_TYPE
from transport.access_policy import probe_refusal
from transport.call_registry import CallRegistry
from transport.calls import calls_endpoint, hangup_endpoint
from transport.settings import ServerSettings
from transport.websocket import realtime_endpoint

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from starlette.requests import Request
    from starlette.websockets import WebSocket

    from backends.base import Backend
    from runtime.workers import WorkerBoard, WorkerStatus

__all__ = ["WEB_ROOT", "create_app"]

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def _worker_json(status: WorkerStatus) -> dict[str, Any]:
    return {
        "index": status.index,
        "pid": status.pid,
        "state": status.state.label,
        "sessions": status.sessions,
    }


async def _readyz(request: Request) -> Response:
    """200 when every worker is ready, else 503 with the reason (what is not ready).

    `sessions` is this worker's; `workers` counts the ready workers and adds up the
    sessions of all of them; `worker` is the process that answered.
    """
    host: SessionHost = request.app.state.host
    readiness = host.readiness()
    body: dict[str, Any] = {"status": "ready" if readiness.ready else "not ready"}
    if readiness.ready:
        body["backend"] = host.backend.name if host.backend is not None else None
    else:
        body["reason"] = readiness.reason
    body["sessions"] = readiness.worker.sessions
    body["worker"] = {**_worker_json(readiness.worker), "max_sessions": readiness.max_sessions}
    body["workers"] = {
        "ready": readiness.workers_ready,
        "total": len(readiness.workers),
        "sessions": readiness.sessions_all,
        "processes": [_worker_json(w) for w in readiness.workers],
    }
    return JSONResponse(body, status_code=200 if readiness.ready else 503)


async def _metrics(request: Request) -> Response:
    host: SessionHost = request.app.state.host
    return Response(host.metrics.render(), media_type=CONTENT_TYPE)


async def _echo(websocket: WebSocket) -> None:
    """A bare echo endpoint: the baseline of the round-trip benchmark."""
    await websocket.accept()
    with contextlib.suppress(Exception):
        while True:
            await websocket.send_text(await websocket.receive_text())


def _protected(
    probe: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """`probe`, answering 401 without the key when `protect_probes` is on."""

    async def protected(request: Request) -> Response:
        settings: ServerSettings = request.app.state.settings
        refusal = probe_refusal(
            api_key=settings.api_key,
            protect_probes=settings.protect_probes,
            headers=request.headers,
        )
        if refusal is not None:
            return JSONResponse(
                refusal.body(), status_code=refusal.status, headers=refusal.headers()
            )
        return await probe(request)

    return protected


def create_app(
    settings: ServerSettings | None = None,
    *,
    backend: Backend | None = None,
    enable_echo: bool = False,
    board: WorkerBoard | None = None,
    worker: int = 0,
    run_dir: str | None = None,
) -> Starlette:
    """Build the app; the backend is loaded and warmed up in the lifespan.

    `board` and `worker`: the shared state of a multi-worker server and this worker's slot;
    `run_dir`: where the workers' relay sockets are (`transport.worker_relay`).
    """
    settings = settings or ServerSettings()
    host = SessionHost(
        HostSettings(
            backend=settings.backend,
            backend_options=settings.backend_options,
            profile=settings.profile,
            limits=settings.limits,
            session_defaults=settings.session_defaults,
            host_id=settings.host_id,
        ),
        backend=backend,
        board=board,
        worker=worker,
    )

    calls = CallRegistry()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await host.start()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(host.watch)
                tg.start_soon(host.timers.run)
                tg.start_soon(calls.run)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            await host.stop()

    routes: list[Route | WebSocketRoute | Mount] = [
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        WebSocketRoute("/v1/duplex", realtime_endpoint),
        Route("/v1/realtime/calls", calls_endpoint, methods=["POST"]),
        Route("/v1/realtime/calls/{call_id}/hangup", hangup_endpoint, methods=["POST"]),
        Route("/healthz", _healthz),
        Route("/readyz", _protected(_readyz)),
        Route("/metrics", _protected(_metrics)),
    ]
    if enable_echo:
        routes.append(WebSocketRoute("/v1/echo", _echo))
    if WEB_ROOT.is_dir():
        routes.append(Mount("/", StaticFiles(directory=WEB_ROOT, html=True), name="web"))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.host = host
    app.state.settings = settings
    app.state.run_dir = run_dir
    app.state.calls = calls
    return app
