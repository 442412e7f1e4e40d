"""`ClientCalls`: the function calls a client answers (B38, B39), sans-IO.

Shared by `ClientProtocol` (and its browser port, `web/js/client_protocol.js`) and
`DuplexClient`: it reads server events (JSON objects) and asks its host, through a
`ClientOutbox`, to `function_call` (run a function: a call whose arguments are final),
and to send what answers it: the `function_call_output` item once the host hands the
output back (`answer`), then, when every call of a response is answered and that
response is done, the one `response.create` that asks for the follow-up. A call cut
during its arguments (`incomplete`) is shown, never run, and waits for nothing.

Outputs: `{"kind": "function_call", response_id, call_id, name, arguments, status}`
(status `completed`: run it; `incomplete`: show it only) and `{"kind":
"function_output", call_id, output}` (an answer the conversation took, this client's or
another's, as the server's `conversation.item.added` tells: for a transcript), besides
`send`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["ClientCalls"]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class ClientCalls:
    __slots__ = ("_done", "_out", "_pending", "_response_of")

    def __init__(self, outbox: ClientOutbox) -> None:
        self._out = outbox
        #: response id -> the call ids it made that wait for an answer
        self._pending: dict[str, set[str]] = {}
        self._response_of: dict[str, str] = {}  # call id -> its response
        self._done: set[str] = set()  # responses done whose calls still wait

    def server_event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self._called(_text(event.get("response_id")), item)
        elif kind == "conversation.item.added":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                self._out.emit(
                    {
                        "kind": "function_output",
                        "call_id": _text(item.get("call_id")) or "",
                        "output": _text(item.get("output")) or "",
                    }
                )
        elif kind == "response.done":
            response = event.get("response")
            response_id = _text(response.get("id")) if isinstance(response, dict) else None
            if response_id is not None and response_id in self._pending:
                self._done.add(response_id)
                self._follow_up(response_id)

    def _called(self, response_id: str | None, item: Mapping[str, Any]) -> None:
        call_id = _text(item.get("call_id"))
        if response_id is None or call_id is None:
            return
        status = "incomplete" if item.get("status") == "incomplete" else "completed"
        self._out.emit(
            {
                "kind": "function_call",
                "response_id": response_id,
                "call_id": call_id,
                "name": _text(item.get("name")) or "",
                "arguments": _text(item.get("arguments")) or "",
                "status": status,
            }
        )
        if status == "completed":
            self._pending.setdefault(response_id, set()).add(call_id)
            self._response_of[call_id] = response_id

    def answer(self, call_id: str, output: str) -> None:
        """The host ran the function: its output goes back; the follow-up is asked for
        once every call of that response is answered and the response is done. An
        unknown or already answered call id sends nothing."""
        response_id = self._response_of.pop(call_id, None)
        if response_id is None:
            return
        self._out.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": output},
            }
        )
        self._pending[response_id].discard(call_id)
        self._follow_up(response_id)

    def _follow_up(self, response_id: str) -> None:
        if response_id in self._done and not self._pending.get(response_id):
            self._pending.pop(response_id, None)
            self._done.discard(response_id)
            self._out.send({"type": "response.create"})
