"""The test oracle: a deliberately naive, executable model of docs/session-semantics.md.

`ReferenceSession` has the interface of `core.session.SessionProtocol` (section 1 of the
semantics) and is written straight from the prose, with plain lists, dicts and ifs: no
state-machine library, no code shared with `core`. The stateful tests drive both with the
same inputs and compare what they emit (event types and ids, error codes, response status,
effects with their request ids and item refs).

Where the prose leaves a choice open, the most literal reading is taken; each such choice
is marked `AMBIGUITY (docs/session-semantics.md, decision Dn)` where it is taken (in this
package's modules), pointing at its entry in section 11 of the document (the question, the
decision and why), which core follows too.

This module holds the class itself: the interface, dispatch of client events, session
updates, close and resume. Everything else comes from the layers it stacks, one module
per seam of core (`spec/reference/state.py` lists them).
"""

from __future__ import annotations

import math

from spec.effects import (
    ASR,
    TTS,
    VLM,
    Abort,
    CloseSession,
)
from spec.errors import ErrorCode, ProtocolError, RemoteProtocolError
from spec.events import (
    ClientEvent,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemRetrieved,
    ConversationItemTruncate,
    Error,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    OutputAudioBufferClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionClosed,
    SessionEventAck,
    SessionHeartbeat,
    SessionHeartbeatAck,
    SessionResume,
    SessionUpdate,
    SessionUpdated,
)
from spec.reference.records import (
    ASR_TAIL_MS,
    PREROLL_MS,
    SPEECH_PROBABILITY,
    SPEECH_RMS,
    VAD_FRAME_MS,
    Output,
    _reject,
    _Vad,
)
from spec.reference.turn_taking import TurnTaking
from spec.session_config import (
    validate_session,
)
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    DelegationAnswer,
    StageFailure,
    StageResult,
    TtsAudio,
    TtsDone,
    TurnEndVerdict,
    VadScores,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
)

__all__ = [
    "ASR_TAIL_MS",
    "PREROLL_MS",
    "SPEECH_PROBABILITY",
    "SPEECH_RMS",
    "VAD_FRAME_MS",
    "Output",
    "ReferenceSession",
]


class ReferenceSession(TurnTaking):
    """docs/session-semantics.md as naive executable Python (see the module docstring)."""

    # --- interface (section 1) ---------------------------------------------------------

    def receive(self, event: ClientEvent, now_ms: int) -> None:
        """Apply one client event; raises `RemoteProtocolError` (nothing changed) when it
        is refused. Ignored once the session is closed."""
        if self.closed:
            return
        before, self.event_ms = self.event_ms, now_ms
        try:
            self._dispatch(event)
        except BaseException:
            self.event_ms = before  # a rejected event changes nothing
            raise
        self.now_ms = now_ms
        self._apply_later()
        # only accepted events get here (section 7: rejected ones change nothing)
        self.last_client_ms = now_ms
        self._truncate_history()

    def backend_event(self, result: StageResult, now_ms: int) -> None:
        """Apply a stage result; stale ones are dropped silently."""
        if self.closed:
            return
        self.now_ms = self.event_ms = now_ms
        self._on_backend_event(result)
        self._apply_later()
        self._truncate_history()

    def _apply_later(self) -> None:
        """Section 5.2: a commit's transcript taken from a live partial is applied once the
        event that led to it is done, as the ASR's answer would be."""
        while self._later and not self.closed:
            self._on_backend_event(self._later.pop(0))

    def _truncate_history(self) -> None:
        """Section 10: after every event, while more than `max_items` items are live or
        their texts exceed `max_history_bytes`, the oldest completed one is deleted, as a
        client's delete would (D9)."""
        while (
            len(self.items) > self.limits.max_items
            or self._history_bytes() > self.limits.max_history_bytes
        ):
            oldest = next((i for i in self.items.values() if i.status == "completed"), None)
            if oldest is None:
                return
            self._delete_item(oldest)  # as if the client deleted it (D9)
        # remembered responses: the oldest neither active nor possibly playing are forgotten
        while len(self.responses) > self.limits.max_responses:
            old = next(
                (
                    r
                    for r in self.responses.values()
                    if r is not self.active and not self._may_play(r)
                ),
                None,
            )
            if old is None:
                return
            del self.responses[old.id]

    def _history_bytes(self) -> int:
        """Section 10: UTF-8 bytes of the texts and transcripts of the completed items."""
        return sum(
            len(
                (
                    self.calls.text(i)
                    if i.call is not None
                    else " ".join(t for p in i.content for t in (p.text, p.transcript) if t)
                ).encode()
            )
            for i in self.items.values()
            if i.status == "completed"
        )

    def _on_backend_event(self, result: StageResult) -> None:
        if isinstance(result, VadScores):
            self._on_vad_scores(result)
            return
        if isinstance(result, DelegationAnswer | StageFailure) and (
            result.request_id in self.delegations
        ):
            self._on_delegation_result(result)
            return
        if isinstance(result, DelegationAnswer):
            return  # fenced (3.6)
        if isinstance(result, TurnEndVerdict):
            self._on_turn_end_verdict(result)
            return
        if isinstance(result, AsrPartial):
            self._on_partial(result)
            return
        resp = self.active
        if resp is None or result.request_id not in resp.open:
            return  # fenced (B11)
        req = resp.open[result.request_id]
        if req.epoch != self.epoch:
            return
        if isinstance(result, StageFailure):
            self._on_failure(resp, req, result)
        elif isinstance(result, AsrTranscript) and req.stage == ASR:
            self._on_transcript(resp, req, result)
        elif isinstance(result, VlmDelta) and req.stage == VLM:
            self._on_vlm_delta(resp, result)
        elif isinstance(result, VlmCallDelta) and req.stage == VLM:
            self.calls.on_delta(resp, result)
        elif isinstance(result, VlmDecisionResult) and req.stage == VLM:
            self._on_vlm_decision(resp, req, result)
        elif isinstance(result, TtsAudio) and req.stage == TTS:
            self._on_tts_audio(resp, result)
        elif isinstance(result, TtsDone) and req.stage == TTS:
            del resp.open[req.request_id]
            self._maybe_complete(resp)

    def handle_timeout(self, now_ms: int) -> None:
        """Fire every deadline <= now_ms."""
        if self.closed:
            return
        self.now_ms = now_ms
        for r in self.responses.values():
            deadline = self._playback_deadline(r)
            if deadline is not None and now_ms >= deadline:
                r.expired = True
        held = self.vad.held
        if held is not None and held[0] == self.vad.awaiting and now_ms >= held[2]:
            # section 5.1: the words did not come within the verdict's budget
            self.vad.held = None
            self._apply_verdict(TurnEndVerdict(held[0], held[1]))
        if self.config.turn_detection is not None and self._pause_overdue():
            self._turn_ended()
        self._apply_later()
        idle = self._idle_deadline()
        if idle is not None and now_ms >= idle:
            self._close("idle_timeout")

    def next_deadline(self) -> int | None:
        if self.closed:
            return None
        deadlines: list[int] = []
        idle = self._idle_deadline()
        if idle is not None:
            deadlines.append(math.ceil(idle))
        for r in self.responses.values():
            pb = self._playback_deadline(r)
            if pb is not None:
                deadlines.append(math.ceil(pb))
        if self.vad.deadline is not None:
            deadlines.append(self.vad.deadline)
        held = self.vad.held
        if held is not None and held[0] == self.vad.awaiting:
            deadlines.append(held[2])
        return min(deadlines) if deadlines else None

    def next_outputs(self) -> list[Output]:
        out, self._outbox = self._outbox, []
        return out

    def error_event(self, exc: ProtocolError) -> Error:
        """The wire error for a rejection; allocates an event id (not queued)."""
        return Error(event_id=self._next_event_id(), error=self._detail(exc.code, exc.message, exc))

    # --- dispatch ----------------------------------------------------------------------

    def _dispatch(self, event: ClientEvent) -> None:
        eid = event.event_id
        if isinstance(event, SessionUpdate):
            self._on_session_update(event)
        elif isinstance(event, InputAudioBufferAppend):
            self._on_append(event)
        elif isinstance(event, InputAudioBufferCommit):
            self._on_commit(event)
        elif isinstance(event, InputAudioBufferClear):
            self._on_clear()
        elif isinstance(event, ConversationItemCreate):
            self._on_item_create(event)
        elif isinstance(event, ConversationItemDelete):
            self._on_item_delete(event)
        elif isinstance(event, ConversationItemRetrieve):
            item = self.items.get(event.item_id)
            if item is None:
                raise _reject(ErrorCode.ITEM_NOT_FOUND, "no such item", "item_id", eid)
            self._emit(ConversationItemRetrieved(item=self._wire_item(item)))
        elif isinstance(event, ConversationItemTruncate):
            self._on_truncate(event)
        elif isinstance(event, ResponseCreate):
            self._on_response_create(event)
        elif isinstance(event, ResponseCancel):
            self._on_cancel(event.response_id, eid, clear=False)
        elif isinstance(event, OutputAudioBufferClear):
            self._on_cancel(event.response_id, eid, clear=True)
        elif isinstance(event, PlaybackAck):
            self._on_ack(event)
        elif isinstance(event, SessionHeartbeat):
            self._emit(SessionHeartbeatAck())
        elif isinstance(event, SessionClose):
            self._close(event.reason)
        elif isinstance(event, SessionResume):
            # AMBIGUITY (docs/session-semantics.md, decision D27): resume belongs to the
            # connection (the runtime's journal and attachment); the session is unchanged
            pass
        elif isinstance(event, SessionEventAck):
            # AMBIGUITY (docs/session-semantics.md, decision D28): an ack trims the
            # runtime's journal only; it refreshes the idle deadline like any event
            pass
        else:
            raise _reject(ErrorCode.UNKNOWN_EVENT, "unknown event", "type", eid)

    # --- session (section 7) -----------------------------------------------------------

    def _on_session_update(self, event: SessionUpdate) -> None:
        try:
            # AMBIGUITY (docs/session-semantics.md, decision D36): a pinned language the ASR
            # does not know is refused by its primary subtag, and only when the update
            # names it (the validator of section 7 decides both)
            config = validate_session(event.session, self.config, languages=self.input_languages)
        except RemoteProtocolError as exc:
            exc.event_id = event.event_id
            raise
        old = self.config.turn_detection
        self.config = config
        if config.turn_detection != old:
            # any change of turn_detection resets the detector to silence (no event); the
            # input buffer (and a pending speech item id) stays. Switching VAD on starts
            # its 32 ms frames at the current audio clock (ScoreVad covers only audio
            # appended while VAD is on).
            self._reset_vad(restart=old is None and config.turn_detection is not None)
        self._emit(
            SessionUpdated(
                session=config.public(self.session_id, profile=self.profile, epoch=self.epoch)
            )
        )

    def _reset_vad(self, *, restart: bool = False) -> None:
        """The detector back to silence; positions before now no longer start speech."""
        now = self.clock_samples
        self.live.item_id = None  # a partial still out is dropped
        origin, seen = self.vad.origin, self.vad.frames_seen
        self.vad = _Vad(
            reset_at=now, origin=now if restart else origin, frames_seen=0 if restart else seen
        )

    def _close(self, reason: str) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D1): "active work is aborted without
        # emitting response events": an Abort effect for every open request of the active response
        # (effects are not response events), before session.closed.
        if self.active is not None:
            for req in self.active.open.values():
                self._effect(
                    Abort(request_id=req.request_id, stage=req.stage, response_id=req.response_id)
                )
            self.active.open.clear()
        self._drop_delegations(None)
        self._emit(SessionClosed(reason=reason))
        self._effect(CloseSession(reason=reason))
        self.closed = True
        self.active = None
