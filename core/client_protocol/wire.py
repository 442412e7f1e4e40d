"""The JSON objects `ClientProtocol` takes and gives, for hosts that hold typed events.

`ClientProtocol` reads server events as JSON objects (as a browser receives them) and
answers with outputs (`core.statemachines.client_outbox.Output`); a host that decodes the
wire into typed events (`transport.codec`) converts them here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.statemachines.client_outbox import Output
    from spec.events import ServerEvent

__all__ = ["send_events", "wire_event"]


def wire_event(event: ServerEvent) -> dict[str, Any]:
    """A typed server event (as `transport.codec` decodes it) as the JSON object that
    `ClientProtocol.server_event` takes (bytes become base64, the tag becomes `type`)."""
    data = msgspec.to_builtins(event)
    assert isinstance(data, dict)
    return data


def send_events(outputs: Iterable[Output]) -> list[dict[str, Any]]:
    """The client events among `outputs`, in order (what a host puts on the socket)."""
    return [out["event"] for out in outputs if out["kind"] == "send"]
