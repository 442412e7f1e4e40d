"""uvicorn with a graceful shutdown that speaks the protocol.

uvicorn closes open websockets with 1012 as soon as it starts shutting down, before the
application's lifespan ends. `RealtimeServer` first closes every session itself
(`session.closed` with reason `shutdown`, close 1001), then lets uvicorn finish.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import uvicorn

if TYPE_CHECKING:
    import socket

    from starlette.applications import Starlette

__all__ = ["RealtimeServer", "configure_logging"]


class RealtimeServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app: Starlette | Any = self.config.loaded_app
        host = _find_host(app)
        if host is not None:
            await host.close_sessions()
        await super().shutdown(sockets)


def _find_host(app: Any) -> Any:
    """Unwrap uvicorn's middleware layers down to the Starlette app holding the host."""
    for _ in range(8):
        state = getattr(app, "state", None)
        if state is not None and hasattr(state, "host"):
            return state.host
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def configure_logging(level: str, *, worker: int | None = None) -> None:
    """The server's log format; a worker process of several names itself in each line."""
    who = "" if worker is None else f" worker {worker} [%(process)d]"
    logging.basicConfig(
        level=level.upper(), format=f"%(asctime)s %(levelname)s{who} %(name)s: %(message)s"
    )
    logging.getLogger("transitions").setLevel(logging.WARNING)  # one line per transition
