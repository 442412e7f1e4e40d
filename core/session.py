"""`SessionProtocol`: one realtime session, sans-IO, in the manner of `h11.Connection`.

House rules: nothing here awaits, sleeps, reads a clock or touches a socket; time comes in
as `now_ms` and every output goes to the outbox, pulled with `next_outputs()`. All legal
state changes are rows of the `spec` tables, fired on the machine models; this module
dispatches events to them and keeps the session-wide bookkeeping.

Theory of operation (docs/session-semantics.md is the contract):

    client event --receive()--> checks (raise, nothing changed) --> machines --> outbox
    stage result --backend_event()--> fenced by request id --> machines --> outbox
    timers: next_deadline() / handle_timeout(now_ms): idle timeout, playback drain, the
            wait of a semantic_vad pause (B32)

Who owns what:
- here: dispatch and error relabelling, the session's configuration and clocks, and
  playback acks (B19);
- `core.item_requests.ItemRequests`: item create, delete, retrieve and truncate, and the
  bound on history (B5, D9);
- `core.session_input.SessionInput`: appends, the input buffer (idle retention vs
  capture, B12), the audio clock, and commits (B6-B8, B13, B15);
- `core.turn_taking.TurnTaking`: server VAD, semantic VAD and live transcripts (B10,
  B32, B33), with the verdict's wait for a pause's words and the reuse of a partial for
  a commit of the same audio;
- `core.append_checks` / `core.item_checks`: validation of appends and created items;
- `core.pending_input.PendingInput`: the pending-input byte ledger (B13);
- `core.conversation.Conversation`: item versions (B5);
- `core.responses.Responses`: waiting commits, the one active response (I1), stage
  results fenced by request id, cancel and failure paths (B11, B14-B18).

Rejections: every handler checks first and raises `RemoteProtocolError` before changing
anything (the outbox included). An `InvalidTransition` escaping a handler is re-labelled at
this boundary: `InvalidState` from `receive` (the client's fault), `LocalProtocolError`
from `backend_event` (ours).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.audio import AudioClock
from core.conversation import Conversation
from core.errors import InvalidState, InvalidTransition
from core.item_requests import ItemRequests
from core.outbox import Outbox
from core.pending_input import PendingInput
from core.responses import Responses
from core.session_input import SessionInput
from core.statemachines.input_buffer import InputBuffer
from core.turn_log import TurnLog
from core.turn_taking import TurnTaking
from spec import events as ev
from spec.effects import ASR, CloseSession
from spec.error_events import error_event, refusal_event
from spec.errors import (
    CloseCode,
    ErrorCode,
    LocalProtocolError,
    RemoteProtocolError,
)
from spec.limits import Limits
from spec.session_config import SessionConfig, validate_session
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

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.live_transcript import LiveTranscript
    from core.resume import Resumption
    from core.statemachines.response import Response
    from spec.effects import Effect
    from spec.errors import ProtocolError
    from spec.session_config import TurnDetection

__all__ = ["SessionProtocol", "SessionStatistics"]


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """A snapshot for metrics, tests and exploration (trio-style `statistics()`)."""

    closed: bool
    epoch: int
    buffer_state: str
    buffer_audio_bytes: int
    buffer_frames: int
    detector_state: str
    active_response: str | None
    active_state: str | None
    queued: tuple[tuple[str, str], ...]  # (item id, commit state)
    pending_bytes: int
    items: tuple[tuple[str, int, str], ...]  # (id, version, state)
    playing: tuple[str, ...]  # responses whose audio may still be playing


class SessionProtocol:
    """One session's protocol state. See the module docstring."""

    def __init__(
        self,
        *,
        session_id: str,
        config: SessionConfig | None = None,
        limits: Limits | None = None,
        profile: str = "speech",
        now_ms: int = 0,
        voices: frozenset[str] | None = None,
        input_languages: tuple[str, ...] | None = None,
        delegation: bool = False,
        live_transcripts: bool = False,
        punctuated_transcripts: bool = False,
        turn_end_budget_ms: int = 2000,
        resume: Resumption | None = None,
        prepares_frames: bool = False,
        function_calling: bool = True,
    ) -> None:
        """The backend's capabilities come in as arguments (the stage Protocols declare
        them; `runtime.host` reads them): `voices`, the TTS's (`session.update` refuses
        any other; None: any); `input_languages`, the ASR's (`session.created` names
        them, `session.update` refuses a pin of any other; None: it detects any);
        `delegation`, a background model answers delegated questions (B31);
        `live_transcripts`, the ASR offers live partials (B33);
        `punctuated_transcripts`, its text ends sentences with a mark (B32);
        `prepares_frames`, the VLM works on a frame as it arrives (`PrepareFrame`);
        `function_calling`, its model chooses function tools (B37: `session.created`
        says so; a backend that cannot still accepts a session's `tools`).
        `turn_end_budget_ms`: how long an end-of-turn verdict may take, its pause's words
        included (the runtime's end-of-turn timeout). `resume`: the session is resumable
        (B27): every server event it hands out is numbered and journaled there."""
        self.session_id = session_id
        self.resume = resume
        self._now_ms = now_ms  # the time of the last input, for the journal's bounds
        self.voices = voices
        # an empty tuple would claim no language at all: it is read as "detects any"
        self.input_languages = input_languages or None
        self.function_calling = function_calling
        initial_config = config or SessionConfig()
        self.limits = limits or Limits()
        self.profile = profile
        self._out = Outbox()
        self._buffer = InputBuffer(self._out)
        self._clock = AudioClock()  # the 16 kHz pcm16 received
        self._turn_taking = TurnTaking(
            self._out,
            self._buffer,
            self._clock,
            config=self._current_config,
            interrupt=self._barge_in,
            end_turn=self._end_turn,
            asr_wanted=self._asr_wanted,
            preempt=self._preempt,
            speech_went_on=self._drop_preemption,
            live_transcripts=live_transcripts,
            punctuated=punctuated_transcripts,
            turn_end_budget_ms=turn_end_budget_ms,
        )
        self._pending = PendingInput(self.limits.max_pending_input_bytes)
        self._items = Conversation(self._out)
        # the session clock of history (B29) starts with the session
        self._log = TurnLog(
            now_ms,
            max_frames=self.limits.max_context_images,
            max_bytes=self.limits.max_context_image_bytes,
        )
        self._turns = Responses(
            self._out,
            self._items,
            self._pending,
            config=self._current_config,
            profile=profile,
            log=self._log,
            transcribe=self._turn_taking.transcribe,
        )
        #: a background model answers delegated questions (B31); else they are dropped
        self._turns.delegations.enabled = delegation
        self._input = SessionInput(
            self._out,
            self._buffer,
            self._clock,
            pending=self._pending,
            items=self._items,
            turns=self._turns,
            turn_taking=self._turn_taking,
            limits=self.limits,
            config=initial_config,
            prepares_frames=prepares_frames,
        )
        self._item_requests = items = ItemRequests(
            self._out, self._items, self._pending, self._turns, self.limits
        )
        self._last_activity_ms = now_ms
        self._closed = False
        turns = self._turns
        self._handlers: dict[type, Callable[[Any, int], None]] = {
            ev.SessionUpdate: self._on_session_update,
            # the hot path: straight to the input side, no wrapper call
            ev.InputAudioBufferAppend: self._input.on_append,
            ev.InputAudioBufferCommit: self._on_commit,
            ev.InputCommitAlias: self._on_commit,
            ev.InputAudioBufferClear: self._on_clear,
            ev.ConversationItemCreate: items.on_create,
            ev.ConversationItemDelete: items.on_delete,
            ev.ConversationItemRetrieve: items.on_retrieve,
            ev.ConversationItemTruncate: items.on_truncate,
            ev.ResponseCreate: self._on_response_create,
            ev.ResponseCancel: self._on_response_cancel,
            ev.OutputAudioBufferClear: self._on_output_clear,
            ev.PlaybackAck: self._on_playback_ack,
            ev.AudioPlaybackAckAlias: self._on_playback_ack,
            ev.SessionHeartbeat: self._on_heartbeat,
            ev.SessionClose: self._on_close,
            ev.SessionResume: self._on_noop,
            ev.SessionEventAck: self._on_noop,
        }
        turn_taking = self._turn_taking
        self._results: dict[type, Callable[[Any, int], None]] = {
            VadScores: self._on_vad_scores,
            TurnEndVerdict: turn_taking.on_verdict,
            AsrTranscript: turns.on_transcript,
            AsrPartial: turn_taking.on_partial,
            VlmDelta: turns.on_vlm_delta,
            VlmCallDelta: turns.on_vlm_call_delta,
            VlmDecisionResult: turns.on_vlm_decision,
            TtsAudio: turns.on_tts_audio,
            TtsDone: turns.on_tts_done,
            StageFailure: turns.on_stage_failure,
            DelegationAnswer: turns.on_delegation_answer,
        }
        languages = list(self.input_languages) if self.input_languages else None
        self._out.emit(
            ev.SessionCreated(
                session=self._public(),
                capabilities=ev.SessionCapabilities(
                    input_languages=languages, function_calling=function_calling
                ),
            )
        )

    # --- public API ---------------------------------------------------------------------

    @property
    def config(self) -> SessionConfig:
        """The session's configuration. It lives on the input side, which reads it once
        per append as a plain attribute (the hot path); this is its one place."""
        return self._input.config

    @config.setter
    def config(self, value: SessionConfig) -> None:
        self._input.config = value

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def epoch(self) -> int:
        return self._out.epoch

    @property
    def live(self) -> LiveTranscript:
        """The live transcripts (B33): tests read them, and turn them on in place of a
        backend that offers them."""
        return self._turn_taking.live

    @property
    def delegation(self) -> bool:
        """Whether delegated questions go to a background model (B31)."""
        return self._turns.delegations.enabled

    @delegation.setter
    def delegation(self, enabled: bool) -> None:
        self._turns.delegations.enabled = enabled

    @property
    def pending_bytes(self) -> int:
        return self._pending.bytes

    @property
    def _responses(self) -> dict[str, Response]:
        return self._turns.by_id

    def receive(self, event: ev.ClientEvent, now_ms: int) -> None:
        """Apply one client event.

        Raises:
            RemoteProtocolError: the event is refused; state and outbox are unchanged.
        """
        if self._closed:
            return
        handler = self._handlers[type(event)]
        self._now_ms = now_ms
        # when a turn taken now was observed; a refused event changes nothing, its time
        # included: a turn a later timeout ends keeps the last accepted event's time
        observed_before, self._log.clock_ms = self._log.clock_ms, now_ms
        try:
            handler(event, now_ms)
            if self._turn_taking.settled:
                self._settle(now_ms)
        except InvalidTransition as exc:
            self._log.clock_ms = observed_before
            raise InvalidState(str(exc), event_id=event.event_id) from None
        except RemoteProtocolError as exc:
            self._log.clock_ms = observed_before
            if exc.event_id is None:
                exc.event_id = event.event_id
            raise
        self._last_activity_ms = now_ms
        self._item_requests.bound()

    def backend_event(self, result: StageResult, now_ms: int) -> None:
        """Apply one stage result; results of a response that is no longer active (or of
        an older epoch) are dropped silently (B11).

        Raises:
            LocalProtocolError: the result is impossible in the current state (a bug).
        """
        if self._closed:
            return
        self._now_ms = now_ms
        self._log.clock_ms = now_ms
        preemption = self._turns.preemption
        if preemption.current is not None and preemption.hold(result):
            return  # a result of the reply prepared during a pause (B35): held
        try:
            self._results[type(result)](result, now_ms)
            if self._turn_taking.settled:
                self._settle(now_ms)
        except InvalidTransition as exc:
            raise LocalProtocolError(str(exc)) from None
        self._item_requests.bound()

    def next_outputs(self) -> list[ev.ServerEvent | Effect]:
        out = self._out.drain()
        if self.resume is not None:
            for o in out:
                if isinstance(o, ev.ServerEvent):
                    self.resume.stamp(o, self._now_ms)
        return out

    def error_event(self, exc: ProtocolError) -> ev.Error:
        """The wire error for a refused event (allocates a server event id)."""
        return self._out_of_band(refusal_event(exc))

    def internal_error_event(self) -> ev.Error:
        """The `error` a crash of this session ends it with (its cause is logged, never
        sent)."""
        return self._out_of_band(
            error_event(ErrorCode.INTERNAL_ERROR, "internal error; the session was closed")
        )

    def _out_of_band(self, event: ev.Error) -> ev.Error:
        """An event the runtime sends outside the outbox: its id, and its place in the
        journal of a resumable session."""
        event.event_id = self._out.next_id("event")
        if self.resume is not None:
            self.resume.stamp(event, self._now_ms)
        return event

    def next_event_id(self) -> str:
        """A server event id for an event the runtime sends on its own (the connection
        events of a resume: `session.resumed`, `session.replaced`), from the same counter,
        so no two events of the session share an id."""
        return self._out.next_id("event")

    def next_deadline(self) -> int | None:
        if self._closed:
            return None
        deadlines = [self._turns.by_id.drain_deadline(), *self._turn_taking.deadlines()]
        idle = self._idle_timeout_ms()
        if idle:
            deadlines.append(self._last_activity_ms + idle)
        return min((d for d in deadlines if d is not None), default=None)

    def handle_timeout(self, now_ms: int) -> None:
        if self._closed:
            return
        self._now_ms = now_ms
        self._turns.by_id.drain_due(now_ms)
        self._turn_taking.on_timeout(now_ms)
        self._settle(now_ms)
        idle = self._idle_timeout_ms()
        if idle and now_ms >= self._last_activity_ms + idle:
            self._close("idle_timeout")

    def statistics(self) -> SessionStatistics:
        active = self._turns.active
        return SessionStatistics(
            closed=self._closed,
            epoch=self._out.epoch,
            buffer_state=self._buffer.state.value,
            buffer_audio_bytes=self._buffer.audio_bytes,
            buffer_frames=len(self._buffer.frames),
            detector_state=self._turn_taking.detector.state.value,
            active_response=active.id if active else None,
            active_state=active.state.value if active else None,
            queued=tuple((c.item.id, c.state.value) for c in self._turns.queue),
            pending_bytes=self._pending.bytes,
            items=tuple((i.id, i.version, i.state.value) for i in self._items),
            playing=tuple(r.id for r in self._turns.by_id.values() if r.playback.may_be_playing),
        )

    # --- session ------------------------------------------------------------------------

    def _current_config(self) -> SessionConfig:
        return self.config

    def _public(self) -> ev.SessionObject:
        return self.config.public(self.session_id, profile=self.profile, epoch=self._out.epoch)

    def _idle_timeout_ms(self) -> int:
        """The operator's `limits.idle_timeout_s` is a ceiling the session's own value can
        only lower; 0 (or None) from the session means "the operator's"; 0 from both: none."""
        ceiling = self.limits.idle_timeout_s
        seconds = self.config.idle_timeout_s or ceiling
        if ceiling:
            seconds = min(seconds, ceiling)
        return int(seconds * 1000)

    def _on_session_update(self, event: ev.SessionUpdate, now_ms: int) -> None:
        config = validate_session(
            event.session, self.config, voices=self.voices, languages=self.input_languages
        )
        vad_changed = config.turn_detection != self.config.turn_detection
        switched_on = self.config.turn_detection is None and config.turn_detection is not None
        self.config = config
        self._turns.preemption.discard()  # prepared under the old configuration (B35)
        if vad_changed:
            self._turn_taking.reset(restart=switched_on)
        self._out.emit(ev.SessionUpdated(session=self._public()))

    def _on_heartbeat(self, event: ev.SessionHeartbeat, now_ms: int) -> None:
        self._out.emit(ev.SessionHeartbeatAck())

    def _on_noop(self, event: ev.ClientEvent, now_ms: int) -> None:
        """Connection-level events: the runtime answers `session.resume` (only as the first
        event of a resume connection) and applies `session.event_ack` to its journal."""

    def _on_close(self, event: ev.SessionClose, now_ms: int) -> None:
        self._close(event.reason)

    def _close(self, reason: str) -> None:
        self._turns.close()
        self._out.emit(ev.SessionClosed(reason=reason))
        code = CloseCode.GOING_AWAY if reason == "shutdown" else CloseCode.NORMAL
        self._out.effect(CloseSession(reason, code))
        self._out.closed = True
        self._closed = True

    # --- input --------------------------------------------------------------------------

    # --- responses ----------------------------------------------------------------------

    def _on_response_create(self, event: ev.ResponseCreate, now_ms: int) -> None:
        modalities = None
        if event.response is not None:
            modalities = event.response.output_modalities or event.response.modalities
        if self._turns.create(modalities, event.event_id):
            return
        if self._input.frames_only():
            return
        raise RemoteProtocolError(
            "nothing to respond to: commit input or create an item first",
            code=ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT,
            event_id=event.event_id,
        )

    def _on_response_cancel(self, event: ev.ResponseCancel, now_ms: int) -> None:
        self._turns.cancel(event.response_id, event.event_id)

    def _on_output_clear(self, event: ev.OutputAudioBufferClear, now_ms: int) -> None:
        self._turns.clear_output(event.response_id, event.event_id)

    def _on_playback_ack(self, event: ev.PlaybackAck, now_ms: int) -> None:
        response = self._turns.by_id.playing(event.response_id, event.item_id, event.event_id)
        response.playback.ack(event.played_ms)

    def _on_clear(self, event: ev.InputAudioBufferClear, now_ms: int) -> None:
        self._turns.preemption.discard()
        self._input.on_clear()

    def _on_commit(self, event: ev.InputAudioBufferCommit, now_ms: int) -> None:
        self._input.on_commit(event)

    def _end_turn(self, config: TurnDetection, item_id: str, keep_until_sample: int) -> None:
        self._input.end_turn(config, item_id, keep_until_sample)

    # --- turn-taking (core.turn_taking) ------------------------------------------------

    def _on_vad_scores(self, result: VadScores, now_ms: int) -> None:
        self._turn_taking.on_vad_scores(result.probabilities, now_ms, result.levels)

    def _barge_in(self) -> None:
        self._turns.interrupt("turn_detected", None)

    def _preempt(self, item_id: str, words: str) -> bool:
        return self._turns.preempt(item_id, words, tuple(self._buffer.frames))

    def _drop_preemption(self) -> None:
        self._turns.preemption.discard()

    def _asr_wanted(self, request_id: str) -> bool:
        """Whether the active response still waits for this ASR request."""
        active = self._turns.active
        return active is not None and active.owns(request_id, ASR)

    def _settle(self, now_ms: int) -> None:
        """Apply the transcripts turn-taking decided on (a commit's ASR answered by a
        live partial), once the event that decided them is done."""
        settled = self._turn_taking.settled
        while settled:
            self._turns.on_transcript(settled.pop(0), now_ms)
