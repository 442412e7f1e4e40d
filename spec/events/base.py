"""The two event bases: one per direction, each fixing the msgspec configuration once.

Tags are explicit dotted strings (never class names), so renaming a class never changes
the wire. Client events ignore unknown fields, so newer clients keep working (the
interoperability rule of docs/architecture.md section 5); server events omit fields left at
their defaults.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ClientEvent", "ServerEvent", "always_written"]


def always_written(value: str | list[Any]) -> Any:
    """The default of a field the wire always carries, even at that value: the constants a
    client tells objects apart by (an item's `object`, `type` and `role`, a
    response's `object` and `status`, a session's `object` and `type`) and a response's
    `output`, empty until its first item (a list is copied per instance). `omit_defaults`
    leaves out a field equal to a plain default (or to the empty result of a builtin
    collection factory); the value of any other factory it cannot compare, so it writes it.
    A decode that lacks the field still gets `value`. tests/spec/test_events.py pins this."""
    if isinstance(value, list):
        return msgspec.field(default_factory=lambda: list(value))
    return msgspec.field(default_factory=lambda: value)


class ClientEvent(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, omit_defaults=True):
    """An event a client sends; `event_id` is echoed by every rejection of it."""

    event_id: str | None = None


class ServerEvent(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """An event the server sends; `event_id` is always set by the sender.

    `server_event_seq` numbers the events of a resumable session (1, 2, ...: the cursor of
    `session.resume`, docs/session-semantics.md D27); it is absent on every other session.
    """

    event_id: str = ""
    server_event_seq: int | None = None
