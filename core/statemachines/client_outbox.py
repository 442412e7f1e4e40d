"""The client outbox: what `ClientProtocol` asks its host to do, in order.

Every client machine model holds the protocol's one `ClientOutbox`; effect callbacks
only append to it. An output is a plain JSON object (`{"kind": ...}`), so the browser's
port of the protocol produces byte-for-byte comparable outputs (tests/web/traces).

Kinds: `send` (a client event to put on the socket), `play` / `drain` / `clear` (the
playback worklet), `capture_frame` (grab a camera frame now), `watchdog` (indicator),
`transcript`, `latency`, `notice`, `fenced` (late audio dropped), `close` (end the call),
`microphone` (on a WebRTC call: send the microphone track, or stop sending it),
`mute_reply` / `unmute_reply` (on a WebRTC call: silence the reply track at once, or
let it play again: `client_reply_gate`),
`function_call` (run a function, or show a cut call) and `function_output` (its answer,
for a transcript): `core.client_protocol.function_calls`,
`link` (the resume machine's state changed: dropped, resumed), `reconnect` (open a new
socket to resume the session), `abandon_socket` (give up on the socket opening now),
`duplicate` (a replayed event already applied was skipped).

While a resumable session's link is down (B42) sends are held, in order, and go out after
the resume (`hold_sends`, `release_sends`); only `session.resume` itself goes through.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ClientOutbox", "EventIds", "Output"]

Output = dict[str, Any]


class EventIds:
    """The client event ids of one connection: `evt_1`, `evt_2`, ...

    One allocator per connection, shared by everything that sends on it (the protocol's
    outbox and a host that sends events of its own, like `DuplexClient`), so two client
    events never carry the same id: server answers are matched to requests by it.
    """

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def next(self) -> str:
        self._count += 1
        return f"evt_{self._count}"


class ClientOutbox:
    __slots__ = ("event_ids", "held", "holding", "items")

    def __init__(self, event_ids: EventIds | None = None) -> None:
        self.items: list[Output] = []
        self.event_ids = event_ids if event_ids is not None else EventIds()
        self.holding = False
        self.held: list[Output] = []

    def next_event_id(self) -> str:
        """`evt_1`, `evt_2`, ...: the next id of the connection's allocator."""
        return self.event_ids.next()

    def send(self, event: dict[str, Any]) -> None:
        """Queue a client event; it gets the next event id unless it has one."""
        if "event_id" not in event:
            event = {"type": event["type"], "event_id": self.next_event_id(), **event}
        (self.held if self.holding else self.items).append({"kind": "send", "event": event})

    def send_through(self, event: dict[str, Any]) -> None:
        """Queue a client event even while sends are held (the `session.resume`)."""
        holding, self.holding = self.holding, False
        try:
            self.send(event)
        finally:
            self.holding = holding

    def hold_sends(self) -> None:
        self.holding = True

    def release_sends(self) -> None:
        """Let sends through again, the held ones first."""
        self.holding = False
        self.items.extend(self.held)
        self.held = []

    def discard_held(self) -> None:
        self.holding = False
        self.held = []

    def emit(self, output: Output) -> None:
        self.items.append(output)

    def drain(self) -> list[Output]:
        out, self.items = self.items, []
        return out
