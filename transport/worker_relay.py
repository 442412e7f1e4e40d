"""A resume that reaches a worker process which does not hold the session is relayed to
the worker that does (decision D39).

With `--workers N` the kernel hands each new connection to any worker, so a client that
reconnects to resume lands on the worker that holds its session only one time in N. The
session id names its owner (`runtime.workers.session_owner`); the worker that received
the resume looks that owner up on the board and, when it is another live worker, opens a
websocket to it over that worker's relay socket, a Unix socket in the server's private
run directory (mode 0700). The owner serves that connection as a resume-only connection
(`?resume=1`), with the client's own credentials, origin and subprotocols, so every
check, the journal replay, token rotation and `session.replaced` happen there exactly as
on one worker. The receiving worker only copies frames both ways, unchanged and in
order, and passes each side's close on to the other: a client that drops makes the owner
see a connection that went away (1001), so the session detaches as it would have; a
close with 1000 ends it.

An owner that does not answer is refused like a session that is gone (`unknown_session`,
saying so).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import anyio
import anyio.lowlevel
import msgspec
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from spec.errors import CloseCode, UnknownSession

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

    from spec.events import SessionResume

__all__ = [
    "bind_relay_socket",
    "carry_frames",
    "carry_resume",
    "open_relay",
    "open_worker_socket",
    "relay_socket_path",
]

log = logging.getLogger("joyduplex.transport")

#: the request headers that belong to one hop of the connection, not to the client
_HOP_HEADERS = frozenset(
    {
        "host",
        "connection",
        "upgrade",
        "content-length",
        "transfer-encoding",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
#: how long the owner may take to accept the relayed connection
_OPEN_TIMEOUT_S = 10.0


def relay_socket_path(run_dir: str | os.PathLike[str], worker: int) -> Path:
    return Path(run_dir) / f"worker-{worker}.sock"


def bind_relay_socket(run_dir: str | os.PathLike[str], worker: int) -> socket.socket:
    """The Unix socket worker `worker` serves relayed resumes on (listened on by uvicorn)."""
    path = relay_socket_path(run_dir, worker)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a replaced worker's
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
    except OSError:
        sock.close()
        raise
    return sock


async def open_relay(
    websocket: WebSocket, path: Path, owner: int, first: SessionResume, max_bytes: int
) -> ClientConnection:
    """A connection to the worker `owner` listening on `path`, for the accepted
    `websocket` whose first event was `first` (`carry_resume` then carries it).

    Raises:
        UnknownSession: the owner did not take the connection (nothing was relayed).
    """
    query = [(k, v) for k, v in websocket.query_params.multi_items() if k != "resume"]
    try:
        owner_ws = await open_worker_socket(websocket, path, [*query, ("resume", "1")], max_bytes)
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        why = f"HTTP {exc.response.status_code}" if isinstance(exc, InvalidStatus) else repr(exc)
        log.warning("resume of %s: worker %d did not take it (%s)", first.session_id, owner, why)
        raise UnknownSession(
            f"session `{first.session_id}` lives in worker {owner} of this server, which did "
            "not answer; it may have exited",
            param="session_id",
        ) from exc
    log.info("resume of %s relayed to worker %d", first.session_id, owner)
    return owner_ws


async def open_worker_socket(
    websocket: WebSocket, path: Path, query: list[tuple[str, str]], max_bytes: int
) -> ClientConnection:
    """A websocket to the worker listening on `path`, with the accepted `websocket`'s
    path, `query`, credentials, origin and subprotocols (a resume, a call's sideband).

    Raises:
        OSError, TimeoutError, InvalidHandshake: the worker did not take it.
    """
    uri = "ws://worker" + websocket.url.path + "?" + urlencode(query)
    headers = [(k, v) for k, v in websocket.headers.items() if k.lower() not in _HOP_HEADERS]
    client = websocket.client
    if client is not None:
        headers.append(("x-forwarded-for", client.host))
    subprotocols = websocket.scope.get("subprotocols") or None
    return await unix_connect(
        str(path),
        uri,
        additional_headers=headers,
        subprotocols=subprotocols,
        user_agent_header=None,
        open_timeout=_OPEN_TIMEOUT_S,
        ping_interval=None,  # a local socket: the client's own keepalive crosses it
        max_size=max_bytes * 2,  # the owner enforces the real limit, as on one worker
        compression=None,
    )


async def carry_resume(
    websocket: WebSocket, owner_ws: ClientConnection, first: SessionResume
) -> None:
    """Send `first` to the owner, then copy frames both ways until one side closes."""
    async with owner_ws:
        with contextlib.suppress(ConnectionClosed):
            await owner_ws.send(msgspec.json.encode(first).decode())
        await _pump(websocket, owner_ws)


async def carry_frames(websocket: WebSocket, owner_ws: ClientConnection) -> None:
    """Copy frames both ways between `websocket` and the worker's until one closes."""
    async with owner_ws:
        await _pump(websocket, owner_ws)


async def _pump(websocket: WebSocket, owner_ws: ClientConnection) -> None:
    """Frames both ways until one side closes; that side's close is passed on."""
    async with anyio.create_task_group() as tg:

        async def client_to_owner() -> None:
            code, reason = int(CloseCode.GOING_AWAY), "client went away"
            try:
                while True:
                    await anyio.lowlevel.checkpoint()  # fairness, as a channel does
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        code = message.get("code") or code
                        reason = message.get("reason") or ""
                        break
                    data = message.get("text")
                    await owner_ws.send(data if data is not None else message.get("bytes", b""))
            except (WebSocketDisconnect, RuntimeError, OSError, ConnectionClosed):
                pass
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    # 1006 cannot be sent: a drop reaches the owner as "going away"
                    await owner_ws.close(code if code not in (1005, 1006) else 1001, reason)

        async def owner_to_client() -> None:
            try:
                async for data in owner_ws:
                    if isinstance(data, str):
                        await websocket.send_text(data)
                    else:
                        await websocket.send_bytes(data)
            except (WebSocketDisconnect, RuntimeError, OSError, ConnectionClosed):
                pass
            finally:
                tg.cancel_scope.cancel()
                code = owner_ws.close_code
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    if code is not None and code not in (1005, 1006):
                        await websocket.close(code, owner_ws.close_reason or "")
                    else:
                        await websocket.close(int(CloseCode.GOING_AWAY), "worker went away")

        tg.start_soon(client_to_owner)
        tg.start_soon(owner_to_client)
