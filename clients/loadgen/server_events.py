"""The little this tool reads of what a server sends: a few fields of each event, and the
wire code of an HTTP refusal's body."""

from __future__ import annotations

import msgspec

__all__ = ["DECODER", "ErrorBody", "Incoming", "refusal_reason"]


class ErrorBody(msgspec.Struct):
    """The fields of an `error` object that errors and refusals are counted by."""

    code: str | None = None
    type: str | None = None
    event_id: str | None = None


class _RefusalBody(msgspec.Struct):
    error: ErrorBody


def refusal_reason(status: int, body: bytes | bytearray | None) -> str:
    """`http_401_unauthorized`: the status and the wire code of an HTTP refusal's body
    (`http_<status>` alone when it has none)."""
    try:
        code = msgspec.json.decode(bytes(body or b""), type=_RefusalBody).error.code
    except (msgspec.ValidationError, msgspec.DecodeError):
        code = None
    return f"http_{status}_{code}" if code else f"http_{status}"


class Incoming(msgspec.Struct):
    """The few fields this tool reads of a server event (the rest is skipped unparsed)."""

    type: str
    audio_start_ms: float | None = None
    audio_end_ms: float | None = None
    error: ErrorBody | None = None


DECODER = msgspec.json.Decoder(Incoming)
