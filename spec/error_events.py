"""The one builder of `error` events: every refusal, stage failure and crash is worded
through it, so `type` always follows from `code` (`spec.errors.ERROR_TYPE`)."""

from __future__ import annotations

from spec.errors import ERROR_TYPE, ErrorCode, ProtocolError
from spec.events import Error, ErrorDetail

__all__ = ["error_detail", "error_event", "refusal_event"]


def error_detail(
    code: ErrorCode, message: str, *, param: str | None = None, event_id: str | None = None
) -> ErrorDetail:
    """The error object: `event_id` is the client event it answers, if any."""
    return ErrorDetail(
        type=ERROR_TYPE[code].value,
        code=code.value,
        message=message,
        param=param,
        event_id=event_id,
    )


def error_event(
    code: ErrorCode, message: str, *, param: str | None = None, event_id: str | None = None
) -> Error:
    """An `error` event (its own server event id is stamped where it is sent)."""
    return Error(error=error_detail(code, message, param=param, event_id=event_id))


def refusal_event(exc: ProtocolError) -> Error:
    """The `error` event that answers a refused client event."""
    return error_event(exc.code, exc.message, param=exc.param, event_id=exc.event_id)
