"""`FunctionRunner`: the functions a `DuplexClient` answers calls with (B38, B39).

The decisions are `core.client_protocol.function_calls.ClientCalls`' (the same as the web
UI's): which call is to be run, what answers it, when the follow-up `response.create`
goes. This host runs each called function (a plain callable or a coroutine function, given
the parsed JSON arguments) in the client's task group, so a slow function never stalls the
reader, and sends what its answer causes. A function the client does not have, arguments
that are not JSON, or a function that raises are answered with `{"error": ...}`: the model
hears why, and the session never waits on a call nobody will answer.
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from core.client_protocol import wire_event
from core.client_protocol.function_calls import ClientCalls
from core.statemachines.client_outbox import ClientOutbox

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from core.statemachines.client_outbox import EventIds, Output
    from spec.events import ServerEventT

__all__ = ["FunctionHandler", "FunctionRunner"]

log = logging.getLogger("joyduplex.client")

#: one function a client answers calls with: the call's arguments (a JSON object) in,
#: its output out (a string as it is, anything else as JSON); may be a coroutine function
FunctionHandler: TypeAlias = "Callable[[dict[str, Any]], Any]"


def _output(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class FunctionRunner:
    """Answers a connection's function calls with `functions`; `send_text` puts a text
    frame on the socket."""

    def __init__(
        self,
        functions: Mapping[str, Callable[[dict[str, Any]], Any]],
        event_ids: EventIds,
        send_text: Callable[[str], Awaitable[None]],
    ) -> None:
        self.functions = dict(functions)
        self._out = ClientOutbox(event_ids)
        self.calls = ClientCalls(self._out)
        self._send_text = send_text

    async def server_event(self, event: ServerEventT) -> list[Output]:
        """The calls `event` asks this client to run (completed `function_call` outputs);
        what it causes is sent (a `response.done` after its calls were answered asks for
        the follow-up)."""
        self.calls.server_event(wire_event(event))
        return await self._carry_out()

    async def _carry_out(self) -> list[Output]:
        calls: list[Output] = []
        for out in self._out.drain():
            if out["kind"] == "send":
                await self._send_text(msgspec.json.encode(out["event"]).decode())
            elif out["kind"] == "function_call" and out["status"] == "completed":
                calls.append(out)
        return calls

    async def run(self, call: Output) -> None:
        """Run one called function and send its answer (and the follow-up, when due)."""
        name, call_id = call["name"], call["call_id"]
        handler = self.functions.get(name)
        try:
            if handler is None:
                raise LookupError(f"this client has no function `{name}`")
            arguments = json.loads(call["arguments"] or "{}")
            result = handler(arguments)
            if inspect.isawaitable(result):
                result = await result
            output = _output(result)
        except Exception as exc:  # the model hears why; the session goes on
            log.warning("function %s (call %s) failed: %s", name, call_id, exc)
            output = json.dumps({"error": str(exc) or type(exc).__name__})
        self.calls.answer(call_id, output)
        await self._carry_out()
