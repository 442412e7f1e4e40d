"""A WebRTC call's offer: reading it from the request (`application/sdp`, or a form with
`sdp` and an optional `session` object), the session configuration it asks for, and what
an offer is refused with, shared by the endpoint (`transport/calls.py`) and the peer that
answers it (`transport/call_peer.py`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from spec.errors import ErrorCode, InvalidSessionConfig
from spec.session_config import validate_session
from transport.access_policy import Refusal

if TYPE_CHECKING:
    from starlette.datastructures import UploadFile
    from starlette.requests import Request

    from runtime.host import SessionHost
    from spec.session_config import SessionConfig
    from transport.settings import ServerSettings

__all__ = [
    "EVENTS_CHANNEL",
    "MAX_OFFER_BYTES",
    "CallOffer",
    "OfferRefused",
    "offer_session_config",
    "read_offer",
    "refusal_response",
]

#: the data channel the events ride (OpenAI's name)
EVENTS_CHANNEL = "oai-events"
#: largest offer read (a browser's offer is a few KB)
MAX_OFFER_BYTES = 64 * 1024


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


@dataclass(frozen=True, slots=True)
class CallOffer:
    sdp: str
    session: dict[str, Any] | None


async def read_offer(request: Request) -> CallOffer:
    """The offer of a call request: `application/sdp`, or a form with `sdp` and an
    optional `session` (JSON).

    Raises:
        OfferRefused: what is wrong with it (400 `invalid_offer`, 413).
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_OFFER_BYTES:
        raise OfferRefused(
            413, ErrorCode.INVALID_OFFER, f"an offer is at most {MAX_OFFER_BYTES} bytes"
        )
    if ctype == "application/sdp":
        body = await request.body()
        if len(body) > MAX_OFFER_BYTES:
            raise OfferRefused(
                413, ErrorCode.INVALID_OFFER, f"an offer is at most {MAX_OFFER_BYTES} bytes"
            )
        return CallOffer(_text(body, "the body"), None)
    if ctype == "multipart/form-data":
        async with request.form(max_files=2, max_fields=4, max_part_size=MAX_OFFER_BYTES) as form:
            sdp = await _form_text(form.get("sdp"), "sdp")
            if sdp is None:
                raise OfferRefused(400, ErrorCode.INVALID_OFFER, "the form has no `sdp` part")
            raw = await _form_text(form.get("session"), "session")
        session = None
        if raw is not None:
            try:
                session = json.loads(raw)
            except ValueError:
                raise OfferRefused(
                    400, ErrorCode.INVALID_OFFER, "the `session` part is not JSON"
                ) from None
            if not isinstance(session, dict):
                raise OfferRefused(
                    400, ErrorCode.INVALID_OFFER, "the `session` part is not an object"
                )
        return CallOffer(sdp, session)
    raise OfferRefused(
        400,
        ErrorCode.INVALID_OFFER,
        f"an offer is `application/sdp` or `multipart/form-data`, not `{ctype or 'none'}`",
    )


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise OfferRefused(400, ErrorCode.INVALID_OFFER, f"{what} is not UTF-8") from None


async def _form_text(value: UploadFile | str | None, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _text(await value.read(), f"the `{what}` part")


def offer_session_config(
    offer: CallOffer, settings: ServerSettings, host: SessionHost
) -> SessionConfig:
    """The call's session configuration: the server's defaults, then the offer's session
    object, checked as the first `session.update` would be."""
    config = settings.session_defaults
    if offer.session is None:
        return config
    patch = {k: v for k, v in offer.session.items() if k != "type"}  # `realtime`: implied
    backend = host.backend
    try:
        return validate_session(
            patch,
            config,
            voices=backend.tts.voices if backend is not None else None,
            languages=backend.asr.languages if backend is not None and backend.asr else None,
        )
    except InvalidSessionConfig as exc:
        where = f"session.{exc.param}" if exc.param else "session"
        raise OfferRefused(400, exc.code, f"{where}: {exc.message}") from None
