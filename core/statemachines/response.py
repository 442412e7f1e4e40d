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
from spec.effects import ASR, TTS, VLM, ResponseEnded
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
from spec.sentences import reply_rest, take_pieces
from spec.tables import RESPONSE, ResponseState
from spec.tables.response import ACTIVE_RESPONSE_STATES

if TYPE_CHECKING:
    from transitions import EventData

    from core.outbox import Outbox
    from core.statemachines.commit import Commit
    from core.statemachines.function_call import FunctionCall
    from core.statemachines.item import Item
    from core.statemachines.playback import Playback

__all__ = ["Response"]

_RULES = build(RESPONSE)


class Response:
    __slots__ = (
        "adopted_tts",
        "asr_targets",
        "calls",
        "decided",
        "id",
        "item",
        "item_id",
        "last_tts_request",
        "message_index",
        "modalities",
        "must_call",
        "open_requests",
        "outbox",
        "outputs",
        "pending_text",
        "playback",
        "reason",
        "request_counters",
        "saw_delta",
        "segments",
        "spoken",
        "stage_key",
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
        #: the `response_id` of its stage effects: its own id, or the id of the preemptive
        #: response it adopted (B35), whose TTS queue its later sentences must join
        self.stage_key = response_id
        #: TTS requests of an adopted preemptive response not yet taken: (id, text)
        self.adopted_tts: list[tuple[str, str]] = []
        self.item_id = item_id  # the assistant item, added on the first output
        self.item: Item | None = None
        #: its function calls by the model's index; None: a call it may not make, whose
        #: deltas are dropped (B38)
        self.calls: dict[int, FunctionCall | None] = {}
        #: its output items in `output_index` order: the assistant message and its calls
        self.outputs: list[Item] = []
        self.message_index = 0  # the assistant message's `output_index`
        self.segments = segments
        self.playback = playback
        self.modalities = modalities
        self.state = ResponseState.CREATED
        self.open_requests: dict[str, str] = {}  # request id -> stage
        self.request_counters: dict[str, int] = {}
        self.asr_targets: dict[str, Commit] = {}  # open ASR request id -> its segment
        self.saw_delta = False
        #: its model must call (`tool_choice` `required` or a named function, B38): its
        #: text is held until the decision says whether a call came
        self.must_call = False
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

    # --- request bookkeeping (counters, not transitions) ----------------------------

    def new_request(self, stage: str, adopted: str | None = None) -> str:
        """Open a stage request; its id is unique within the session (`adopted`: the id
        of a preemptive response's request, already running, that this one takes)."""
        n = self.request_counters.get(stage, 0) + 1
        self.request_counters[stage] = n
        request_id = adopted or f"{self.id}:{stage}:{n}"
        self.open_requests[request_id] = stage
        return request_id

    def ask_model(self, *, must_call: bool) -> str:
        """Open its VLM request; `must_call`: its `tool_choice` asks for a call (B38), so
        its text is held until the decision says whether one came."""
        self.must_call = must_call
        return self.new_request(VLM)

    def owns(self, request_id: str, stage: str) -> bool:
        """Whether `request_id` is an open request of `stage` (results of others are fenced)."""
        return self.open_requests.get(request_id) == stage

    def close_request(self, request_id: str) -> str:
        """The request finished (or failed): returns its stage."""
        self.tts_open.discard(request_id)
        return self.open_requests.pop(request_id)

    def abort_all(self) -> list[tuple[str, str]]:
        """Forget every open request; returns (request id, stage) of each, to abort."""
        requests = list(self.open_requests.items())
        self.open_requests.clear()
        self.tts_open.clear()
        return requests

    def open_asr(self, commit: Commit) -> str:
        request_id = self.new_request(ASR)
        self.asr_targets[request_id] = commit
        return request_id

    def take_asr_target(self, request_id: str) -> Commit:
        """The segment whose transcript arrived; closes its request."""
        self.close_request(request_id)
        return self.asr_targets.pop(request_id)

    def take_waiting_segments(self) -> list[Commit]:
        """Segments still waiting for a transcript (to fail them, B17)."""
        waiting = list(self.asr_targets.values())
        self.asr_targets.clear()
        return waiting

    def add_text(self, delta: str) -> list[str]:
        """A VLM text delta; returns the pieces ready for TTS (audio replies, unless it
        must call): whole sentences, the first piece already at a clause end."""
        self.saw_delta = True
        self.pending_text += delta
        if "audio" not in self.modalities or self.must_call:
            return []
        sentences, self.pending_text = take_pieces(self.pending_text, first=self.tts_seq == 0)
        return sentences

    def decide(self, request_id: str, *, text: str, listen: bool) -> str:
        """The VLM decided; returns the rest of the reply still to speak or show."""
        self.close_request(request_id)
        self.decided = True
        rest = reply_rest(self.pending_text, text, streamed=self.saw_delta)
        self.pending_text = ""
        return "" if listen else rest

    def adopt(
        self, speculation_id: str, vlm_request: str, tts_requests: list[tuple[str, str]]
    ) -> None:
        """Take over a preemptive response's running requests (B35): its VLM request is
        this response's, its stage effects keep its key (one TTS queue, in order), and
        its TTS requests are taken sentence by sentence (`take_adopted_tts`)."""
        self.stage_key = speculation_id
        self.new_request(VLM, adopted=vlm_request)
        self.adopted_tts = list(tts_requests)

    def take_adopted_tts(self, text: str) -> str | None:
        """The adopted TTS request already speaking `text` (the next in order), opened as
        this response's; None when there is none (the rest is then `drop_adopted_tts`)."""
        if not self.adopted_tts or self.adopted_tts[0][1] != text:
            return None
        request_id = self.adopted_tts.pop(0)[0]
        self.open_tts(text, adopted=request_id)
        return request_id

    def drop_adopted_tts(self) -> list[str]:
        """The adopted TTS requests never taken: to abort."""
        dropped, self.adopted_tts = [request_id for request_id, _ in self.adopted_tts], []
        return dropped

    def open_call(self, index: int, call: FunctionCall | None) -> None:
        """The model's call `index` opened (None: refused, its deltas dropped)."""
        self.calls[index] = call
        if call is not None:
            self.outputs.append(call.item)

    def open_tts(self, text: str, adopted: str | None = None) -> tuple[str, int]:
        """A TTS request for one sentence: (request id, sequence number)."""
        self.tts_seq += 1
        request_id = self.new_request(TTS, adopted)
        self.tts_open.add(request_id)
        self.spoken = f"{self.spoken} {text}".strip()
        return request_id, self.tts_seq

    def show_text(self, text: str) -> None:
        """A text-only reply: the whole text goes into the assistant item at once."""
        assert self.item is not None  # set by `speak`
        self.item.content[0].text = text
        self.spoken = text

    def add_audio(self, request_id: str, text: str, duration_ms: float, now_ms: int) -> str:
        """One TTS chunk: advance the playback cursor and the item's transcript; returns the
        chunk's transcript delta. Pieces of one TTS request carry their own spacing; requests
        are sentences, so a new request after a word gets a space."""
        item = self.item
        assert item is not None  # set by `speak`
        self.playback.add_audio(duration_ms, now_ms)
        so_far = item.content[0].transcript or ""
        if request_id != self.last_tts_request and text[:1].strip() and so_far[-1:].strip():
            text = " " + text
        self.last_tts_request = request_id
        self.text_marks.append((text, self.playback.generated_ms))
        item.content[0].transcript = so_far + text
        return text

    @property
    def output_finished(self) -> bool:
        """The VLM decided and every TTS request ended."""
        return self.decided and not self.tts_open

    def wire(self, status: str | None = None) -> WireResponse:
        details = None
        if self.reason is not None or self.status_error is not None:
            details = ResponseStatusDetails(
                type=status or "completed", reason=self.reason, error=self.status_error
            )
        output = [item.wire() for item in self.outputs]
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
        return self.output_finished

    def emit_output_item(self, event: EventData) -> None:
        item: Item = event.kwargs["item"]
        self.item = item
        self.message_index = len(self.outputs)
        self.outputs.append(item)
        self.outbox.emit(ConversationItemAdded(item=item.wire(), previous_item_id=None))
        self.outbox.emit(
            ResponseOutputItemAdded(
                response_id=self.id, output_index=self.message_index, item=item.wire()
            )
        )
        self.outbox.emit(
            ResponseContentPartAdded(
                response_id=self.id,
                item_id=item.id,
                output_index=self.message_index,
                part=ContentPart(type=event.kwargs["part_type"], transcript=""),
            )
        )

    def emit_done(self, event: EventData) -> None:
        self.outbox.emit(ResponseDone(response=self.wire(event.kwargs["status"])))
        self.outbox.emit(RateLimitsUpdated())
        self.outbox.effect(ResponseEnded(self.stage_key))

    def emit_listen(self, event: EventData) -> None:
        self.reason = "listen"
        self.outbox.emit(ResponseListen(response_id=self.id, reason="model_listen"))
        self.outbox.emit(ResponseDone(response=self.wire("completed")))
        self.outbox.emit(RateLimitsUpdated())
        self.outbox.effect(ResponseEnded(self.stage_key))
