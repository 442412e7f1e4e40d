"""Function call: one call a response makes, until the client answers it.

Spec: `spec.tables.function_call.FUNCTION_CALL`. Diagram: `docs/statemachines/function_call.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: a call owns its `function_call` item (a conversation item like any
other: deleted, retrieved, bounded and replayed as one) and its place in its response's
output (`output_index`). Its arguments stream (`stream`), then either `finish` (the model
decided: arguments done, the item done) or `cut` (an interrupt, a failure, or arguments
over their bound: the arguments that came are done and the item is `incomplete`). A
finished call waits for one `function_call_output` (`answer`); a cut call never takes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.events import (
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    ResponseOutputItemDone,
)
from spec.tables import FUNCTION_CALL, FunctionCallState, ItemState

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from core.statemachines.item import Item

__all__ = ["FunctionCall"]

_RULES = build(FUNCTION_CALL)


class FunctionCall:
    __slots__ = ("item", "outbox", "output_index", "response_id", "state")

    def __init__(
        self, outbox: Outbox, item: Item, *, response_id: str | None, output_index: int
    ) -> None:
        self.outbox = outbox
        self.item = item
        self.response_id = response_id
        self.output_index = output_index
        self.state = FunctionCallState.ARGUMENTS

    @property
    def call_id(self) -> str:
        assert self.item.call_id is not None
        return self.item.call_id

    @property
    def arguments(self) -> str:
        return self.item.arguments or ""

    # --- verbs ----------------------------------------------------------------------

    def stream(self, delta: str) -> None:
        fire(_RULES, self, "stream", delta=delta)

    def finish(self) -> None:
        fire(_RULES, self, "finish")

    def import_call(self) -> None:
        fire(_RULES, self, "import_call")

    def cut(self) -> None:
        fire(_RULES, self, "cut")

    def answer(self) -> None:
        fire(_RULES, self, "answer")

    # --- effects (named in the table) -----------------------------------------------

    def emit_arguments_delta(self, event: EventData) -> None:
        delta: str = event.kwargs["delta"]
        self.item.arguments = self.arguments + delta
        self.outbox.emit(
            ResponseFunctionCallArgumentsDelta(
                response_id=self.response_id or "",
                item_id=self.item.id,
                output_index=self.output_index,
                call_id=self.call_id,
                delta=delta,
            )
        )

    def emit_call_done(self, event: EventData) -> None:
        self._done()

    def emit_call_incomplete(self, event: EventData) -> None:
        self.item.incomplete = True
        self._done()

    def _done(self) -> None:
        item = self.item
        self.outbox.emit(
            ResponseFunctionCallArgumentsDone(
                response_id=self.response_id or "",
                item_id=item.id,
                output_index=self.output_index,
                call_id=self.call_id,
                name=item.name or "",
                arguments=self.arguments,
            )
        )
        if item.state is ItemState.DELETED:
            return  # the client deleted it meanwhile: its item events are over
        self.outbox.emit(
            ResponseOutputItemDone(
                response_id=self.response_id or "",
                output_index=self.output_index,
                item=item.wire(completing=True),
            )
        )
        item.complete()
