"""The live WebRTC calls of one worker process (`CallRegistry`), the task group their
sessions run in, and the call ids: `rtc_<session>_<random>`, so that a call id names the
worker that holds it (D39)."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from transport.call_channel import CallChannel

__all__ = ["Call", "CallRegistry", "call_session_id", "new_call_id"]


@dataclass
class Call:
    id: str
    channel: CallChannel
    peer: Any
    session_id: str


def new_call_id(session_id: str) -> str:
    """`rtc_<the session id's own part>_<random>`: the id names the worker process that
    holds the call (as a session id does, D39), so that a sideband that reaches another
    worker is relayed to it; the random part keeps it unguessable."""
    return f"rtc_{session_id.removeprefix('sess_')}_{secrets.token_hex(8)}"


def call_session_id(call_id: str) -> str | None:
    """The session id a call id names (None: not a call id this server issues)."""
    if not call_id.startswith("rtc_") or "_" not in call_id[4:]:
        return None
    return "sess_" + call_id[4:].rsplit("_", 1)[0]


class CallRegistry:
    """The live calls of this worker process, and the task group their sessions run in
    (the app's lifespan runs it)."""

    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        #: the call serving each resumable session now (B42)
        self.serving: dict[str, CallChannel] = {}
        self._tg: TaskGroup | None = None
        self._started = anyio.Event()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._started.set()
            try:
                await anyio.sleep_forever()
            finally:
                for call in list(self.calls.values()):
                    call.channel.end("the server is stopping")

    def start(self, call: Call, serve: Any) -> None:
        if self._tg is None:
            raise RuntimeError("the call registry is not running")
        self.calls[call.id] = call
        self._tg.start_soon(self._run, call, serve)

    async def _run(self, call: Call, serve: Any) -> None:
        try:
            await serve()
        finally:
            self.calls.pop(call.id, None)
            call.channel.end("its session ended")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await call.peer.close()
