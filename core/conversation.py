"""`Conversation`: the live item versions of a session, in conversation order (B5).

A public item id may be deleted and created again; each creation is a new version, and
only the live version accepts what belongs to it (a transcript of the old version's
request is dropped, I7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.statemachines.item import Item
from spec.errors import ErrorCode, RemoteProtocolError
from spec.tables import ItemState

if TYPE_CHECKING:
    from collections.abc import Iterator

    from core.outbox import Outbox
    from spec import events as ev

__all__ = ["Conversation"]


class Conversation:
    __slots__ = ("_items", "_out", "_versions", "history_bytes")

    def __init__(self, outbox: Outbox) -> None:
        self._out = outbox
        self._items: dict[str, Item] = {}  # live versions, in conversation order
        self._versions: dict[str, int] = {}
        #: UTF-8 bytes of the texts of the live completed items (kept exact by the items)
        self.history_bytes = 0

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items.values())

    def add(self, item_id: str | None, role: str, content: list[ev.ContentPart], **kw: Any) -> Item:
        """A new item (a new version when its id was used before), last in order."""
        item_id = item_id or self._out.next_id("item")
        version = self._versions.get(item_id, 0) + 1
        self._versions[item_id] = version
        previous = next(reversed(self._items), None)
        item = Item(
            self._out,
            item_id,
            version=version,
            role=role,
            content=content,
            previous_item_id=previous,
            **kw,
        )
        item.ledger = self
        self._items[item_id] = item
        return item

    def find(self, item_id: str, event_id: str | None) -> Item:
        item = self._items.get(item_id)
        if item is None:
            raise RemoteProtocolError(
                f"no item `{item_id}`",
                code=ErrorCode.ITEM_NOT_FOUND,
                param="item_id",
                event_id=event_id,
            )
        return item

    def delete(self, item: Item) -> None:
        item.delete()
        del self._items[item.id]
        self.history_bytes -= item.history_bytes
        item.ledger = None

    def __len__(self) -> int:
        return len(self._items)

    def oldest_over(self, max_items: int, max_bytes: int) -> list[Item]:
        """The oldest completed items to delete so that at most `max_items` items and
        `max_bytes` history bytes stay (truncation, oldest first; items in progress stay).
        Costs nothing while under both limits."""
        excess = len(self._items) - max_items
        over = self.history_bytes - max_bytes
        oldest: list[Item] = []
        if excess <= 0 and over <= 0:
            return oldest
        for item in self._items.values():
            if excess <= 0 and over <= 0:
                break
            if item.state is ItemState.COMPLETED:
                oldest.append(item)
                excess -= 1
                over -= item.history_bytes
        return oldest

    def accepts_result(self, item: Item) -> bool:
        """Whether `item` is still the live version and waits for its transcript (I7, B5)."""
        return self._items.get(item.id) is item and item.state is ItemState.IN_PROGRESS
