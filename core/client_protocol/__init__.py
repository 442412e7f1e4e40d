"""The client side of a realtime session, sans-IO: `ClientProtocol` and its collaborators
(push-to-talk holds, replies as they play, the function calls it answers), run by the
Python clients (`clients/`) and ported line by line to the browser
(`web/js/client_protocol.js`). The client machines themselves are
`core/statemachines/client_*.py`, one module per machine.
"""

from __future__ import annotations

from core.client_protocol.protocol import (
    ClientProtocol,
    Output,
    base64_bytes,
    send_events,
    wire_event,
)

__all__ = ["ClientProtocol", "Output", "base64_bytes", "send_events", "wire_event"]
