"""Response: one model turn from `response.created` to its single `response.done`.

Spec: `spec.tables.response.RESPONSE`. Diagram: `docs/statemachines/response.md`.

House rules: every legal transition is a row of the spec table; this module knows nothing
about sockets, clocks or backends.

Theory of operation: a response owns its segments (commits), its open stage requests (by
request id), its assistant item and its playback cursor. `transcribe` while its speech
segments are at the ASR, `generate` while the VLM runs, `speak` on the first audio chunk
(emitting the assistant item's added events), then exactly one terminal transition:
`complete` (guard: the VLM decided and every TTS request finished), `listen` (the model
chose silence), `cancel` or `fail`. Entering any terminal state emits the one
`response.done` (I4); the session fences everything that arrives later (I2). Audio chunks
are counter updates in `speaking`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.statemachines._rulebook import build, fire
from spec.events import (
    ContentPart,
    ConversationItemAdded,
    RateLimitsUpdated,
    ResponseContentPartAdded,
    ResponseCreated,
    ResponseDone,
    ResponseListen,
    ResponseOutputItemAdded,
    ResponseStatusDetails,
)
from spec.events import (
    Response as WireResponse,
)
from spec.tables import RESPONSE, ResponseState
from spec.tables.response import ACTIVE_RESPONSE_STATES

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from core.statemachines.commit import Commit
    from core.statemachines.item import Item
    from core.statemachines.playback import Playback

__all__ = ["Response"]

_RULES = build(RESPONSE)


class Response:
    __slots__ = (
        "asr_targets",
        "decided",
        "id",
        "item",
        "item_id",
        "last_tts_request",
        "modalities",
        "open_requests",
        "outbox",
        "pending_text",
        "playback",
        "reason",
        "request_counters",
        "saw_delta",
        "segments",
        "spoken",
        "state",
        "status_error",
        "text_marks",
        "tts_open",
        "tts_seq",
    )

    def __init__(
        self,
        outbox: Outbox,
        response_id: str,
        *,
        item_id: str,
        segments: list[Commit],
        playback: Playback,
        modalities: tuple[str, ...],
    ) -> None:
        self.outbox = outbox
        self.id = response_id
        self.item_id = item_id  # the assistant item, added on the first output
        self.item: Item | None = None
        self.segments = segments
        self.playback = playback
        self.modalities = modalities
        self.state = ResponseState.CREATED
        self.open_requests: dict[str, str] = {}  # request id -> stage
        self.request_counters: dict[str, int] = {}
        self.asr_targets: dict[str, Commit] = {}  # open ASR request id -> its segment
        self.saw_delta = False
        self.decided = False
        self.pending_text = ""  # VLM text not yet sent to TTS
        self.spoken = ""  # every text sent to TTS, in order
        self.text_marks: list[tuple[str, float]] = []  # (chunk text, audio end ms)
        self.tts_seq = 0
        self.last_tts_request: str | None = None
        self.tts_open: set[str] = set()
        self.reason: str | None = None
        self.status_error: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_RESPONSE_STATES

    def new_request(self, stage: str) -> str:
        n = self.request_counters.get(stage, 0) + 1
        self.request_counters[stage] = n
        request_id = f"{self.id}:{stage}:{n}"
        self.open_requests[request_id] = stage
        return request_id

    def wire(self, status: str | None = None) -> WireResponse:
        details = None
        if self.reason is not None or self.status_error is not None:
            details = ResponseStatusDetails(
                type=status or "completed", reason=self.reason, error=self.status_error
            )
        output = [self.item.wire()] if self.item is not None else []
        return WireResponse(
            id=self.id,
            status=status or "in_progress",
            status_details=details,
            output=output,
            output_modalities=list(self.modalities),
        )

    def created_event(self) -> ResponseCreated:
        return ResponseCreated(response=self.wire())

    # --- verbs ----------------------------------------------------------------------

    def transcribe(self) -> None:
        fire(_RULES, self, "transcribe")

    def generate(self) -> None:
        fire(_RULES, self, "generate")

    def speak(self, item: Item, part_type: str) -> None:
        fire(_RULES, self, "speak", item=item, part_type=part_type)

    def complete(self) -> None:
        fire(_RULES, self, "complete", status="completed")

    def listen(self) -> None:
        fire(_RULES, self, "listen")

    def cancel(self, reason: str) -> None:
        self._end("cancel", "cancelled", reason, None)

    def fail(self, reason: str, error: dict[str, Any]) -> None:
        self._end("fail", "failed", reason, error)

    def _end(self, trigger: str, status: str, reason: str, error: dict[str, Any] | None) -> None:
        before = self.reason, self.status_error
        self.reason, self.status_error = reason, error
        try:
            fire(_RULES, self, trigger, status=status)
        except BaseException:
            self.reason, self.status_error = before  # rejected: nothing changed
            raise

    # --- guards and effects ---------------------------------------------------------

    def generation_finished(self, event: EventData) -> bool:
        return self.decided and not self.tts_open

    def emit_output_item(self, event: EventData) -> None:
        item: Item = event.kwargs["item"]
        self.item = item
        self.outbox.emit(ConversationItemAdded(item=item.wire(), previous_item_id=None))
        self.outbox.emit(ResponseOutputItemAdded(response_id=self.id, item=item.wire()))
        self.outbox.emit(
            ResponseContentPartAdded(
                response_id=self.id,
                item_id=item.id,
                part=ContentPart(type=event.kwargs["part_type"], transcript=""),
            )
        )

    def emit_done(self, event: EventData) -> None:
        self.outbox.emit(ResponseDone(response=self.wire(event.kwargs["status"])))
        self.outbox.emit(RateLimitsUpdated())

    def emit_listen(self, event: EventData) -> None:
        self.reason = "listen"
        self.outbox.emit(ResponseListen(response_id=self.id, reason="model_listen"))
        self.outbox.emit(ResponseDone(response=self.wire("completed")))
        self.outbox.emit(RateLimitsUpdated())
