"""`ItemRequests`: the client's requests about conversation items, and the bound on
history (docs/session-semantics.md sections 2.4 and 10).

Owned here: `conversation.item.create` (a user item becomes a commit of its own, queued
like an audio commit, B5), `.delete` (the item leaves history and every queue, its
waiting commits with it, D9), `.retrieve` and `.truncate` (the playback cursor of the
response that made the item, B19), and the bound the session applies after every input:
beyond `max_items` live items (or `max_history_bytes` of their text) the oldest completed
ones are deleted as a client's delete would, and beyond `max_responses` the oldest
finished responses are forgotten.

Each handler checks first and raises `RemoteProtocolError` before changing anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.item_checks import FUNCTION_ITEM_TYPES, check_function_item, check_item_create
from core.statemachines.commit import Commit
from core.statemachines.function_call import FunctionCall
from spec import events as ev
from spec.errors import ErrorCode, RemoteProtocolError
from spec.function_tools import function_result_text

if TYPE_CHECKING:
    from core.conversation import Conversation
    from core.outbox import Outbox
    from core.pending_input import PendingInput
    from core.responses import Responses
    from core.statemachines.item import Item
    from spec.limits import Limits

__all__ = ["ItemRequests"]


class ItemRequests:
    __slots__ = ("_items", "_out", "_pending", "_turns", "limits")

    def __init__(
        self,
        out: Outbox,
        items: Conversation,
        pending: PendingInput,
        turns: Responses,
        limits: Limits,
    ) -> None:
        self._out = out
        self._items = items
        self._pending = pending
        self._turns = turns
        self.limits = limits

    def on_create(self, event: ev.ConversationItemCreate, now_ms: int) -> None:
        if event.item.type in FUNCTION_ITEM_TYPES:
            self._create_function_item(event)
            return
        plan = check_item_create(event, self._items, max_parts=self.limits.max_content_parts)
        if plan.role == "user":
            self._pending.ensure_room(
                self._pending.bytes + plan.reserved,
                "answer or delete items first",
                event.event_id,
            )
        created = self._items.add(plan.item_id, plan.role, plan.content)
        self._out.emit(
            ev.ConversationItemAdded(item=created.wire(), previous_item_id=created.previous_item_id)
        )
        if plan.role != "user":
            created.complete()
            return
        commit = Commit(
            self._out,
            created,
            pcm16=plan.audio,
            frames=plan.frames,
            has_speech=bool(plan.audio),
            reserved=plan.reserved,
            texts=plan.texts,
            content_index=plan.audio_index,
        )
        self._pending.add(plan.reserved)
        commit.adopt()
        self._turns.enqueue(commit)

    def _create_function_item(self, event: ev.ConversationItemCreate) -> None:
        """A `function_call_output` answers its call and waits, like a user item, for the
        `response.create` that speaks from it; a `function_call` is history the client
        brings, answerable once (B39)."""
        plan = check_function_item(event, self._items)
        calls = self._turns.calls
        if plan.type == "function_call_output":
            call = calls.check_output(plan.call_id, event.event_id)
            output = plan.output or ""
            created = self._items.add(
                plan.item_id, "user", [], type=plan.type, call_id=plan.call_id, output=output
            )
            self._out.emit(
                ev.ConversationItemAdded(
                    item=created.wire(), previous_item_id=created.previous_item_id
                )
            )
            call.answer()
            commit = Commit(
                self._out,
                created,
                pcm16=b"",
                frames=[],
                has_speech=False,
                reserved=0,
                texts=[function_result_text(call.item.name, output)],
            )
            commit.adopt()
            self._turns.enqueue(commit)
            return
        if plan.call_id in calls:
            raise RemoteProtocolError(
                f"function call `{plan.call_id}` already exists",
                code=ErrorCode.BAD_EVENT,
                param="item.call_id",
                event_id=event.event_id,
            )
        created = self._items.add(
            plan.item_id,
            "assistant",
            [],
            type=plan.type,
            call_id=plan.call_id,
            name=plan.name,
            arguments=plan.arguments,
        )
        self._out.emit(
            ev.ConversationItemAdded(item=created.wire(), previous_item_id=created.previous_item_id)
        )
        created.complete()
        call = FunctionCall(self._out, created, response_id=None, output_index=0)
        call.import_call()
        calls.add(call)

    def on_delete(self, event: ev.ConversationItemDelete, now_ms: int) -> None:
        self.delete(self._items.find(event.item_id, event.event_id))

    def delete(self, item: Item) -> None:
        """The item leaves history and queues, its waiting commits with it (D9)."""
        self._items.delete(item)
        self._turns.calls.forget(item)
        self._turns.withdraw(item)

    def on_retrieve(self, event: ev.ConversationItemRetrieve, now_ms: int) -> None:
        item = self._items.find(event.item_id, event.event_id)
        self._out.emit(ev.ConversationItemRetrieved(item=item.wire()))

    def on_truncate(self, event: ev.ConversationItemTruncate, now_ms: int) -> None:
        item = self._items.find(event.item_id, event.event_id)
        self._turns.by_id.truncate(item, event.audio_end_ms, event.event_id)

    def bound(self) -> None:
        """Bounded state (section 10), after every input: see the module docstring."""
        limits = self.limits
        for item in self._items.oldest_over(limits.max_items, limits.max_history_bytes):
            self.delete(item)
        self._turns.by_id.forget_oldest(limits.max_responses, self._turns.active)
