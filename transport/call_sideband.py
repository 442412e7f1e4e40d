"""Sidebands of a WebRTC call: a websocket to `/v1/realtime?call_id=...` sees the call's
events from the moment it attached and may send the call's session client events. It
follows a resumable session from call to call (B42) and ends with the session; one whose
call lives in another worker process of this server is relayed there (D39)."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import anyio

from core.connection_budget import ConnectionBudget
from spec.errors import UnknownCall
from transport.call_channel import Sideband
from transport.call_registry import call_session_id
from transport.codec import encode_server_event

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

    from runtime.host import SessionHost
    from transport.call_channel import CallChannel
    from transport.call_registry import CallRegistry
    from transport.settings import ServerSettings

__all__ = ["attach_sideband"]

log = logging.getLogger("joyduplex.transport")


def _serving(channel: CallChannel) -> CallChannel:
    """The call that serves `channel`'s session now: itself, or the last that resumed it."""
    while channel.successor is not None:
        channel = channel.successor
    return channel


async def _relay_sideband(websocket: WebSocket, call_id: str) -> bool:
    """Carry a sideband whose call lives in another worker process of this server to
    that worker (D39's relay); False when no other worker holds it."""
    from transport.worker_relay import carry_frames, open_worker_socket, relay_socket_path

    host: SessionHost = websocket.app.state.host
    session_id = call_session_id(call_id)
    run_dir = getattr(websocket.app.state, "run_dir", None)
    owner = host.owner_elsewhere(session_id) if session_id is not None else None
    if owner is None or run_dir is None:
        return False
    settings: ServerSettings = websocket.app.state.settings
    query = list(websocket.query_params.multi_items())
    try:
        owner_ws = await open_worker_socket(
            websocket, relay_socket_path(run_dir, owner), query, settings.limits.max_event_bytes
        )
    except Exception as exc:  # the owner did not take it: answered as an unknown call
        log.warning("sideband of call %s: worker %d did not take it (%r)", call_id, owner, exc)
        return False
    log.info("sideband of call %s relayed to worker %d", call_id, owner)
    await carry_frames(websocket, owner_ws)
    return True


async def attach_sideband(websocket: WebSocket, call_id: str) -> None:
    """An accepted websocket that names a live call: copy the call's events to it and
    its events to the call's session until either ends."""
    registry: CallRegistry = websocket.app.state.calls
    settings: ServerSettings = websocket.app.state.settings
    call = registry.calls.get(call_id)
    if call is None and await _relay_sideband(websocket, call_id):
        return
    if call is None:
        from transport.codec import error_event

        exc = UnknownCall(f"no live call `{call_id}` on this worker", param="call_id")
        with contextlib.suppress(Exception):
            await websocket.send_text(
                encode_server_event(error_event(exc, event_id="event_0")).decode()
            )
            await websocket.close(1008, "unknown call")
        return
    budget = ConnectionBudget.from_limits(settings.limits, anyio.current_time())
    sideband = Sideband(websocket, budget if budget.enabled else None)
    channel = call.channel
    channel.sidebands.append(sideband)
    log.info("call %s: a sideband attached", call_id)
    async with anyio.create_task_group() as tg:

        async def events_out() -> None:
            async with sideband.inbox:
                async for text in sideband.inbox:
                    await websocket.send_text(text)
            tg.cancel_scope.cancel()

        async def events_in() -> None:
            with contextlib.suppress(Exception):
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    data = message.get("text")
                    _serving(channel).accept(
                        data if data is not None else message.get("bytes") or b"", sideband.budget
                    )
            tg.cancel_scope.cancel()

        async def call_ended() -> None:
            # a resumable session outlives its call: the sideband follows it to the call
            # that resumes it (B42), and ends with the session
            await channel.session_over.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(events_out)
        tg.start_soon(events_in)
        tg.start_soon(call_ended)
    with contextlib.suppress(ValueError):
        _serving(channel).sidebands.remove(sideband)
    sideband.outbox.close()
    sideband.inbox.close()
    with contextlib.suppress(Exception):
        await websocket.close(1000, "call ended" if channel.ended.is_set() else "")
    log.info("call %s: a sideband detached", call_id)
