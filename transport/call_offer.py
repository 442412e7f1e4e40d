"""What a WebRTC call's offer is refused with, shared by the endpoint (`transport/calls.py`)
and the peer that answers it (`transport/call_peer.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from transport.access_policy import Refusal

if TYPE_CHECKING:
    from spec.errors import ErrorCode

__all__ = ["EVENTS_CHANNEL", "OfferRefused", "refusal_response"]

#: the data channel the events ride (OpenAI's name)
EVENTS_CHANNEL = "oai-events"


def refusal_response(status: int, code: ErrorCode, message: str) -> JSONResponse:
    """An HTTP refusal whose body is the wire's `error` object."""
    body = Refusal(status, code, message)
    return JSONResponse(body.body(), status_code=status, headers=body.headers())


class OfferRefused(Exception):
    """An offer or its session that cannot be used: answered with this HTTP refusal."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def response(self) -> JSONResponse:
        return refusal_response(self.status, self.code, self.message)
