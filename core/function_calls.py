"""`FunctionCalls`: a session's function calls by call id, from the response that opened
each to the `function_call_output` that answers it (B38, B39).

A call enters when a response opens it (or the client creates a `function_call` item of
its own) and leaves when its item is deleted (by the client or the bound on history):
an output for a call id this session does not hold is `function_call_not_found`, for
one already answered `function_call_already_answered`, for one cut during its
arguments `function_call_incomplete`. `check_output` raises before anything changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.errors import ErrorCode, RemoteProtocolError
from spec.tables import FunctionCallState

if TYPE_CHECKING:
    from core.statemachines.function_call import FunctionCall
    from core.statemachines.item import Item

__all__ = ["FunctionCalls"]


class FunctionCalls:
    __slots__ = ("_by_call_id",)

    def __init__(self) -> None:
        self._by_call_id: dict[str, FunctionCall] = {}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._by_call_id

    def __len__(self) -> int:
        return len(self._by_call_id)

    def add(self, call: FunctionCall) -> None:
        self._by_call_id[call.call_id] = call

    def forget(self, item: Item) -> None:
        """`item` left the conversation: if it was a call, its id answers nothing now."""
        call = self._by_call_id.get(item.call_id or "") if item.type == "function_call" else None
        if call is not None and call.item is item:
            del self._by_call_id[call.call_id]

    def check_output(self, call_id: str, event_id: str | None) -> FunctionCall:
        """The call a `function_call_output` with `call_id` answers.

        Raises:
            RemoteProtocolError: `function_call_not_found`, `function_call_already_answered`
                or `function_call_incomplete`, param `item.call_id`.
        """
        call = self._by_call_id.get(call_id)
        if call is None:
            code, message = ErrorCode.FUNCTION_CALL_NOT_FOUND, f"no function call `{call_id}`"
        elif call.state is FunctionCallState.ANSWERED:
            code = ErrorCode.FUNCTION_CALL_ALREADY_ANSWERED
            message = f"function call `{call_id}` is already answered"
        elif call.state is FunctionCallState.ARGUMENTS:
            code = ErrorCode.FUNCTION_CALL_INCOMPLETE
            message = f"function call `{call_id}` is still streaming its arguments"
        elif call.state is FunctionCallState.INCOMPLETE:
            code = ErrorCode.FUNCTION_CALL_INCOMPLETE
            message = f"function call `{call_id}` was cut before its arguments were final"
        else:
            return call
        raise RemoteProtocolError(message, code=code, param="item.call_id", event_id=event_id)
