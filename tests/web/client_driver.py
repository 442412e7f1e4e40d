"""A terse driver of the Python `ClientProtocol` for scenario tests (the Python twin of
`Driver` in tests/web/helpers.mjs)."""

from __future__ import annotations

from typing import Any

from core.client_protocol import ClientProtocol, Output

JPEG = "/9j/AAAA"


class Driver:
    def __init__(self, mode: str, **options: Any) -> None:
        self.protocol = ClientProtocol(mode, **options)
        self.outputs: list[Output] = []
        self.now = 0

    def step(self, kind: str, **fields: Any) -> list[Output]:
        self.now = fields.pop("now_ms", self.now + 10)
        out = self.protocol.step({"kind": kind, "now_ms": self.now, **fields})
        self.outputs += out
        return out

    def server(self, type_: str, **fields: Any) -> list[Output]:
        return self.step("server", event={"type": type_, **fields})

    def ready(self) -> Driver:
        self.step("connected")
        self.server("session.updated", session={"id": "sess_1"})
        return self

    def sent(self, type_: str | None = None) -> list[dict[str, Any]]:
        return [
            o["event"]
            for o in self.outputs
            if o["kind"] == "send" and (type_ is None or o["event"]["type"] == type_)
        ]

    def of(self, kind: str, outputs: list[Output] | None = None) -> list[Output]:
        return [o for o in (self.outputs if outputs is None else outputs) if o["kind"] == kind]

    def hold(self, chunks: int = 2) -> str | None:
        self.step("press")
        for _ in range(chunks):
            self.step("mic", audio="BBBB", samples=640)
        out = self.step("release")
        commits = [
            o["event"]["event_id"]
            for o in out
            if o["kind"] == "send" and o["event"]["type"] == "input_audio_buffer.commit"
        ]
        return commits[0] if commits else None

    def snapshot(self) -> dict[str, Any]:
        return self.protocol.snapshot()

    def hold_state(self, hold_id: str) -> str | None:
        return next((h["state"] for h in self.snapshot()["holds"] if h["hold_id"] == hold_id), None)

    def playback_state(self, response_id: str) -> str | None:
        return next(
            (p["state"] for p in self.snapshot()["playbacks"] if p["response_id"] == response_id),
            None,
        )

    # server events
    def committed(self, item_id: str, client_event_id: str | None, **extra: Any) -> list[Output]:
        fields: dict[str, Any] = {"item_id": item_id, **extra}
        if client_event_id is not None:
            fields["client_event_id"] = client_event_id
        return self.server("input_audio_buffer.committed", **fields)

    def created(self, response_id: str) -> list[Output]:
        return self.server("response.created", response={"id": response_id})

    def delta(self, response_id: str, item_id: str = "item_a") -> list[Output]:
        return self.server(
            "response.output_audio.delta", response_id=response_id, item_id=item_id, delta="A" * 64
        )

    def done(self, response_id: str, status: str = "completed") -> list[Output]:
        return self.server("response.done", response={"id": response_id, "status": status})

    def error(self, code: str, event_id: str | None) -> list[Output]:
        detail: dict[str, Any] = {"type": "invalid_request_error", "code": code, "message": code}
        if event_id is not None:
            detail["event_id"] = event_id
        return self.server("error", error=detail)

    def speech_started(self, item_id: str = "item_9") -> list[Output]:
        return self.server("input_audio_buffer.speech_started", item_id=item_id, audio_start_ms=0)
