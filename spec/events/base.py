"""The two event bases: one per direction, each fixing the msgspec configuration once.

Tags are explicit dotted strings (never class names), so renaming a class never changes
the wire. Client events ignore unknown fields, so newer clients keep working (the
interoperability rule of docs/architecture.md section 5); server events omit fields left at
their defaults.
"""

from __future__ import annotations

import msgspec

__all__ = ["ClientEvent", "ServerEvent"]


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
