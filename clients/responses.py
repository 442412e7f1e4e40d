"""One response as `DuplexClient.collect_response` hands it back (`ResponseResult`), and
the fold that assembles it from the server events of a turn (`ResponseAssembler`).
`clients.duplex_client` re-exports `ResponseResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clients.errors import ServerError
from spec.events import (
    Error,
    InputAudioTranscriptionCompleted,
    ResponseCreated,
    ResponseDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputTextDelta,
)

if TYPE_CHECKING:
    from spec.events import ErrorDetail, ServerEventT

__all__ = ["ResponseAssembler", "ResponseResult"]


@dataclass(slots=True)
class ResponseResult:
    """One response as `collect_response` saw it.

    `status` is `completed` / `cancelled` / `failed` from `response.done`, or `listen` for a
    quiet commit answered by `response.listen` without a response. `audio` is the reply
    pcm16 at the session's output rate; `errors` holds `error` events seen after the
    response started (a stage failure); `time_to_first_audio_s` counts from the last
    `commit` / `create_response` this client sent (else from the call).
    """

    response_id: str | None
    status: str
    status_reason: str | None = None
    transcript: str = ""
    audio: bytes = b""
    user_transcripts: list[str] = field(default_factory=list)
    events: list[ServerEventT] = field(default_factory=list)
    errors: list[ErrorDetail] = field(default_factory=list)
    item_id: str | None = None
    time_to_first_audio_s: float | None = None

    def audio_ms(self, sample_rate_hz: int = 24_000) -> float:
        """Duration of `audio` (pcm16 mono) at `sample_rate_hz`."""
        return len(self.audio) / 2 / sample_rate_hz * 1000


class ResponseAssembler:
    """Folds server events into the `ResponseResult` of `response_id` (None: the next
    response created). `started` is when the turn began, on `time.monotonic()`."""

    def __init__(self, response_id: str | None, started: float) -> None:
        self.result = ResponseResult(response_id=response_id, status="in_progress")
        self._started = started
        self._created = response_id is not None
        self._text: list[str] = []
        self._audio: list[bytes] = []

    def add(self, event: ServerEventT, at: float) -> bool:
        """Take `event`, which arrived at `at`; True once `result` is complete.

        Raises:
            ServerError: an `error` event came before the response was created.
        """
        result = self.result
        result.events.append(event)
        if isinstance(event, Error):
            if not self._created:
                raise ServerError(event.error)
            result.errors.append(event.error)
        elif isinstance(event, InputAudioTranscriptionCompleted):
            result.user_transcripts.append(event.transcript)
        elif isinstance(event, ResponseListen) and event.response_id is None and not self._created:
            result.status, result.status_reason = "listen", event.reason
            return True
        elif isinstance(event, ResponseCreated) and not self._created:
            result.response_id, self._created = event.response.id, True
        elif not self._created or _response_id_of(event) != result.response_id:
            pass  # another response's event, or one before ours was created
        elif isinstance(event, ResponseDone):
            details = event.response.status_details
            result.status = event.response.status
            result.status_reason = details.reason if details is not None else None
            result.transcript = "".join(self._text)
            result.audio = b"".join(self._audio)
            return True
        elif isinstance(event, ResponseOutputAudioDelta):
            result.item_id = event.item_id
            if result.time_to_first_audio_s is None:
                result.time_to_first_audio_s = at - self._started
            self._audio.append(event.delta)
        elif isinstance(event, ResponseOutputAudioTranscriptDelta | ResponseOutputTextDelta):
            self._text.append(event.delta)
        elif isinstance(event, ResponseOutputAudioTranscriptDone) and event.transcript:
            self._text[:] = [event.transcript]
        return False


def _response_id_of(event: ServerEventT) -> str | None:
    """The response an event belongs to, if any."""
    if isinstance(event, ResponseCreated | ResponseDone):
        return event.response.id
    response_id = getattr(event, "response_id", None)
    return response_id if isinstance(response_id, str) else None
