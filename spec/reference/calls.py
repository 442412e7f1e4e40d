"""The test oracle's function calls: docs/session-semantics.md 3.8 (B37-B39) as naive
executable Python, for `spec.reference.session.ReferenceSession`.

Kept out of the session's layers (which call in here at the few places the prose names:
a call delta, the decision, the done-chain, item create/delete/wire, history and its
bytes). Plain dicts and ifs, written from the prose; no code shared with `core`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import (
    ConversationItem,
    ConversationItemAdded,
    ConversationItemCreate,
    ConversationItemDone,
    ResponseFunctionCallArgumentsDelta,
    ResponseFunctionCallArgumentsDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
)
from spec.function_tools import TOOL_NAME, delegation_arguments, function_result_text
from spec.limits import MAX_FUNCTION_ARGUMENTS_BYTES, MAX_FUNCTION_OUTPUT_BYTES

if TYPE_CHECKING:
    from spec.function_tools import FunctionTool
    from spec.stage_results import VlmCallDelta

__all__ = ["CallFields", "ReferenceCalls"]

#: the session and its records (`spec.reference`: `ReferenceSession`, `_Item`,
#: `_Response`, `_Segment`), typed loosely: those modules import this one, never the reverse
_Session = Any
_ItemRecord = Any
_ResponseRecord = Any


@dataclass
class CallFields:
    """What a function item holds instead of content (3.8)."""

    type: str  # function_call | function_call_output
    call_id: str
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    #: function_call only: arguments | called | answered | incomplete
    state: str = "called"
    response_id: str | None = None
    output_index: int = 0


def _reject(code: ErrorCode, param: str, eid: str | None) -> RemoteProtocolError:
    return RemoteProtocolError("refused", code=code, param=param, event_id=eid)


@dataclass
class ReferenceCalls:
    """A session's calls: by call id (until their item is deleted) and, per response, by
    the model's index (None: a function the session did not offer). Compared by value
    (a refused event must leave it equal), its session aside."""

    s: _Session = field(compare=False, repr=False)
    #: the session's item and segment records (`spec.reference.records._Item`, `._Segment`),
    #: handed over so this module does not import the one that imports it
    item_record: type[_ItemRecord] = field(compare=False, repr=False)
    segment_record: type[Any] = field(compare=False, repr=False)
    by_call_id: dict[str, _ItemRecord] = field(default_factory=dict)
    of_response: dict[str, dict[int, _ItemRecord | None]] = field(default_factory=dict)
    _n: int = 0

    # --- the model's calls (B38) ---------------------------------------------------------

    def offered(self) -> tuple[FunctionTool, ...]:
        config = self.s.config
        return () if config.tool_choice.mode == "none" else config.tools

    def made(self, resp: _ResponseRecord) -> bool:
        """The response opened a call (it is then no silence)."""
        return any(c is not None for c in self.of_response.get(resp.id, {}).values())

    def on_delta(self, resp: _ResponseRecord, result: VlmCallDelta) -> None:
        calls = self.of_response.setdefault(resp.id, {})
        if result.index not in calls:
            opened = sum(1 for c in calls.values() if c is not None)
            calls[result.index] = self._open(resp, result.name, opened)
        item = calls[result.index]
        if item is None or item.call is None or item.call.state != "arguments":
            return
        call = item.call
        arguments = call.arguments or ""
        if len((arguments + result.delta).encode()) > MAX_FUNCTION_ARGUMENTS_BYTES:
            self._end(item, incomplete=True)
            return
        if result.delta:
            self._stream(item, result.delta)

    def _stream(self, item: _ItemRecord, delta: str) -> None:
        call = item.call
        assert call is not None
        call.arguments = (call.arguments or "") + delta
        self.s._emit(
            ResponseFunctionCallArgumentsDelta(
                response_id=call.response_id or "",
                item_id=item.id,
                output_index=call.output_index,
                call_id=call.call_id,
                delta=delta,
            )
        )

    def _open(self, resp: _ResponseRecord, name: str, index: int) -> _ItemRecord | None:
        config = self.s.config
        if not config.tool_choice.offers(name, self.offered()):
            return None
        self._n += 1
        item_id = self.s._new_item_id()
        item = self.item_record(
            item_id,
            self.s._new_version(item_id),
            "assistant",
            "in_progress",
            [],
            self.s._next_seq(),
            response_id=resp.id,
            call=CallFields(
                "function_call",
                f"call_{self._n}",
                name=name,
                arguments="",
                state="arguments",
                response_id=resp.id,
                # the message item, if any, was added before: one index each, in order
                output_index=index + (1 if resp.audio_started else 0),
            ),
        )
        self.by_call_id[f"call_{self._n}"] = item
        prev = self.s._add_item(item)
        self.s._emit(ConversationItemAdded(item=self.wire(item), previous_item_id=prev))
        self.s._emit(
            ResponseOutputItemAdded(
                response_id=resp.id,
                output_index=index + (1 if resp.audio_started else 0),
                item=self.wire(item),
            )
        )
        return item

    def delegate(self, resp: _ResponseRecord, question: str) -> bool:
        """Section 3.8: a delegated question becomes a call of the delegation's function
        when the session offers it, its arguments in one delta; whether it did."""
        config = self.s.config
        name = config.delegation_tool
        if not config.tool_choice.offers(name, self.offered()):
            return False
        tool = next(t for t in config.tools if t.name == name)
        calls = self.of_response.setdefault(resp.id, {})
        opened = sum(1 for c in calls.values() if c is not None)
        item = self._open(resp, name, opened)
        calls[min(calls, default=0) - 1] = item
        assert item is not None and item.call is not None
        self._stream(item, delegation_arguments(tool, question))
        self._end(item, incomplete=False)
        return True

    def finish_all(self, resp: _ResponseRecord) -> None:
        """The decision: every call still streaming is made."""
        for item in self.of_response.get(resp.id, {}).values():
            if item is not None and item.call is not None and item.call.state == "arguments":
                self._end(item, incomplete=False)

    def cut_open(self, resp: _ResponseRecord) -> None:
        """The done-chain of a cancelled or failed response: calls still streaming end
        incomplete, before its other output."""
        for item in self.of_response.get(resp.id, {}).values():
            if item is not None and item.call is not None and item.call.state == "arguments":
                self._end(item, incomplete=True)

    def _end(self, item: _ItemRecord, *, incomplete: bool) -> None:
        call = item.call
        assert call is not None
        call.state = "incomplete" if incomplete else "called"
        self.s._emit(
            ResponseFunctionCallArgumentsDone(
                response_id=call.response_id or "",
                item_id=item.id,
                output_index=call.output_index,
                call_id=call.call_id,
                name=call.name or "",
                arguments=call.arguments or "",
            )
        )
        if self.s.items.get(item.id) is not item:
            return  # the client deleted it meanwhile
        item.status = "completed"
        self.s._emit(
            ResponseOutputItemDone(
                response_id=call.response_id or "",
                output_index=call.output_index,
                item=self.wire(item),
            )
        )
        self.s._emit(ConversationItemDone(item=self.wire(item)))

    # --- the client's function items (B39) ----------------------------------------------

    def on_create(self, event: ConversationItemCreate) -> None:
        wire, eid = event.item, event.event_id
        if wire.id is not None and wire.id in self.s.items:
            raise _reject(ErrorCode.BAD_EVENT, "item.id", eid)
        if not wire.call_id:
            raise _reject(ErrorCode.BAD_EVENT, "item.call_id", eid)
        if wire.content:
            raise _reject(ErrorCode.BAD_EVENT, "item.content", eid)
        output = wire.type == "function_call_output"
        if output and (
            wire.output is None or len(wire.output.encode()) > MAX_FUNCTION_OUTPUT_BYTES
        ):
            raise _reject(ErrorCode.BAD_EVENT, "item.output", eid)
        if not output:
            if wire.name is None or not TOOL_NAME.fullmatch(wire.name):
                raise _reject(ErrorCode.BAD_EVENT, "item.name", eid)
            if len((wire.arguments or "").encode()) > MAX_FUNCTION_ARGUMENTS_BYTES:
                raise _reject(ErrorCode.BAD_EVENT, "item.arguments", eid)
        answered = self.by_call_id.get(wire.call_id)
        if output:
            if answered is None or answered.call is None:
                raise _reject(ErrorCode.FUNCTION_CALL_NOT_FOUND, "item.call_id", eid)
            if answered.call.state == "answered":
                raise _reject(ErrorCode.FUNCTION_CALL_ALREADY_ANSWERED, "item.call_id", eid)
            if answered.call.state != "called":
                raise _reject(ErrorCode.FUNCTION_CALL_INCOMPLETE, "item.call_id", eid)
        elif answered is not None:
            raise _reject(ErrorCode.BAD_EVENT, "item.call_id", eid)
        item_id = wire.id if wire.id is not None else self.s._new_item_id()
        seq = self.s._next_seq()
        fields = CallFields(
            wire.type,
            wire.call_id,
            name=None if output else wire.name,
            arguments=None if output else (wire.arguments or ""),
            output=wire.output if output else None,
        )
        item = self.item_record(
            item_id,
            self.s._new_version(item_id),
            "user" if output else "assistant",
            "completed",
            [],
            seq,
            call=fields,
        )
        prev = self.s._add_item(item)
        self.s._emit(ConversationItemAdded(item=self.wire(item), previous_item_id=prev))
        self.s._emit(ConversationItemDone(item=self.wire(item), previous_item_id=prev))
        if not output:
            self.by_call_id[wire.call_id] = item
            return
        assert answered is not None and answered.call is not None
        answered.call.state = "answered"
        # it waits, like a user item, for the response.create that speaks from it
        self.s._tick(item)
        self.s.unanswered.append(
            self.segment_record(
                item_id=item_id,
                version=item.version,
                seq=seq,
                speech=False,
                audio=b"",
                content_index=0,
                frames=[],
                texts=[function_result_text(answered.call.name, wire.output or "")],
                audio_held=0,
                frames_held=0,
            )
        )

    def forget(self, item: _ItemRecord) -> None:
        """A deleted call answers nothing."""
        call = item.call
        if call is not None and self.by_call_id.get(call.call_id) is item:
            del self.by_call_id[call.call_id]

    # --- what a function item is on the wire and in history ---------------------------

    def wire(self, item: _ItemRecord) -> ConversationItem:
        call = item.call
        assert call is not None
        status = "incomplete" if call.state == "incomplete" else item.status
        return ConversationItem(
            id=item.id,
            type=call.type,
            role=msgspec.UNSET,
            status=status,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            output=call.output,
        )

    @staticmethod
    def text(item: _ItemRecord) -> str:
        """A call as `name(arguments)`, an output as itself (history and its bytes)."""
        call = item.call
        assert call is not None
        if call.type == "function_call":
            return f"{call.name}({call.arguments or ''})"
        return call.output or ""
