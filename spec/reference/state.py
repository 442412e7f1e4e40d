"""The oracle's session state: every field `ReferenceSession` keeps (docs/session-semantics.md
section 1), the plumbing that allocates ids and queues outputs, and the introspection the
stateful tests read (pending bytes, playing responses, invariants, the snapshot).

The reference session is one class built in layers, one module per seam of core: this
state, input and commits (`input.py`), conversation items (`items.py`), responses
(`responses.py`), delegation (`delegation.py`), how responses end and are preempted
(`endings.py`), turn-taking (`turn_taking.py`) and the interface (`session.py`). Each layer
calls those below it; the few calls upward are declared at the end of this class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.errors import ERROR_TYPE, ErrorCode, ProtocolError
from spec.events import (
    ConversationItem,
    Error,
    ErrorDetail,
    ServerEvent,
    SessionCapabilities,
    SessionCreated,
)
from spec.limits import Limits
from spec.reference.calls import ReferenceCalls
from spec.reference.media import (
    _ms,
)
from spec.reference.records import (
    PREROLL_MS,
    Output,
    _Buffer,
    _Item,
    _Live,
    _Response,
    _Segment,
    _Vad,
    msgspec_copy,
)
from spec.session_config import (
    SessionConfig,
)

if TYPE_CHECKING:
    from spec.effects import (
        Effect,
    )
    from spec.stage_results import (
        AsrTranscript,
    )

__all__ = [
    "SessionState",
]


class SessionState:
    """The session's state, ids and outbox, its plumbing and introspection for tests."""

    def __init__(
        self,
        session_id: str = "s1",
        config: SessionConfig | None = None,
        limits: Limits | None = None,
        profile: str = "speech",
        now_ms: int = 0,
        input_languages: tuple[str, ...] | None = None,
        delegation: bool = False,
        live_transcripts: bool = False,
        punctuated_transcripts: bool = False,
        turn_end_budget_ms: int = 2000,
    ) -> None:
        self.session_id = session_id
        #: section 1: the languages the ASR knows; None (or none listed): it detects any
        self.input_languages = list(input_languages) if input_languages else None
        #: section 3.6: a background model answers delegated questions
        self.delegation = delegation
        #: section 5.1: the ASR ends sentences with a mark; a verdict's time budget
        self.punctuated = punctuated_transcripts
        self.turn_end_budget_ms = turn_end_budget_ms
        #: transcripts the session decided on (section 5.2), applied after the event
        self._later: list[AsrTranscript] = []
        self.delegations: dict[str, str] = {}  # open request id -> the note's response id
        self.waiting_answers: list[str] = []
        self.config = config if config is not None else SessionConfig()
        self.limits = limits if limits is not None else Limits()
        self.profile = profile
        self.now_ms = now_ms
        self.started_ms = now_ms
        #: the time of the event being applied (a turn taken now is stamped with it)
        self.event_ms = now_ms
        #: frames of earlier turns kept for history, one (item id, version, frame) each,
        #: oldest first (section 4.1)
        self.kept_frames: list[tuple[str, int, bytes]] = []
        self.epoch = 0
        self.closed = False
        self._outbox: list[Output] = []
        self._event_n = 0
        self._item_n = 0
        self._resp_n = 0
        self._seq = 0
        self._turn_n = 0
        self.last_client_ms = now_ms
        self.clock_samples = 0  # session audio clock, 16 kHz samples
        self.buffer = _Buffer()
        self.vad = _Vad()
        self.live = _Live(enabled=live_transcripts)
        self.items: dict[str, _Item] = {}  # live items, history order
        self.versions: dict[str, int] = {}  # last version of every id ever used
        self.retained: list[_Segment] = []
        self.deferred: list[_Segment] = []
        self.unanswered: list[_Segment] = []
        self.responses: dict[str, _Response] = {}  # creation order
        self.active: _Response | None = None
        # AMBIGUITY (docs/session-semantics.md, decision D31): the session was asked something
        # once a VLM request carried a transcript, and stays so.
        self.asked = False
        self.calls = ReferenceCalls(self, _Item, _Segment)  # section 3.8
        self._emit(
            SessionCreated(
                session=self.config.public(self.session_id, profile=self.profile, epoch=0),
                capabilities=SessionCapabilities(input_languages=self.input_languages),
            )
        )

    # --- introspection for tests -------------------------------------------------------

    def pending_bytes(self) -> int:
        """Bytes held before their stage request (buffer, queued commits and user items,
        segments of the active response not yet submitted)."""
        total = self.buffer.nbytes
        total += sum(s.held for s in self.retained + self.deferred + self.unanswered)
        if self.active is not None:
            total += sum(s.held for s in self.active.segments)
        return total

    def playing_responses(self) -> list[_Response]:
        """Every response whose audio may still be playing, oldest first (section 6)."""
        return [r for r in self.responses.values() if self._may_play(r)]

    def playing(self) -> bool:
        """Whether the audio of some finished response may still be playing."""
        return bool(self.playing_responses())

    def _may_play(self, r: _Response) -> bool:
        """Section 6: after its response.done, a response's audio may still be playing
        until it is acked fully, cleared, or its deadline passed."""
        return (
            r.status != "in_progress"
            and r.audio_started
            and not r.cleared
            and not r.expired
            and r.played_ms < r.generated_ms
        )

    def invariant_violations(self) -> list[str]:
        """Internal invariants (I1, I5, I6, I8); an empty list when all hold."""
        bad: list[str] = []
        if self.closed:
            return bad  # nothing is held or emitted any more (I9)
        live = [r for r in self.responses.values() if r.status == "in_progress"]
        if len(live) > 1 or (live and self.active is not live[0]):
            bad.append("I1: more than one active response")
        if self.pending_bytes() > self.limits.max_pending_input_bytes:
            bad.append(f"I5: pending bytes {self.pending_bytes()}")
        if self.buffer.state == "idle":
            if len(self.buffer.frames) > 1:
                bad.append("I6: idle buffer holds more than one frame")
            audio = self.buffer.audio
            if audio and self.buffer.audio_ms - _ms(audio[-1][1]) > PREROLL_MS:
                bad.append("I6: idle buffer holds more than the pre-roll")
        for r in self.responses.values():
            if r.played_ms > r.generated_ms:
                bad.append(f"I8: {r.id} played {r.played_ms} > generated {r.generated_ms}")
        if self.deferred and self.active is None:
            bad.append("deferred commits without an active response")
        if len(self.retained) + len(self.deferred) > self.limits.max_pending_commits:
            bad.append("B13: more commits queued than max_pending_commits")
        return bad

    def snapshot(self) -> tuple[object, ...]:
        """A canonical, id-free summary of the state (for exploration and dedup)."""
        b = self.buffer
        buf = (b.state, round(b.audio_ms), len(b.frames), b.appended, b.has_speech)
        v = self.vad
        vad = (v.state, v.high_run, v.silence_run, v.awaiting is not None, v.wait_ms)

        def segs(xs: list[_Segment]) -> tuple[tuple[bool, int, int], ...]:
            return tuple((s.speech, len(s.frames), s.held) for s in xs)

        act: tuple[object, ...] = ()
        if self.active is not None:
            r = self.active
            act = (
                tuple(sorted(q.stage for q in r.open.values())),
                r.vlm_submitted,
                r.decision,
                r.saw_delta,
                r.tts_submitted,
                r.audio_started,
                round(r.generated_ms),
                round(r.played_ms),
                segs(r.segments),
            )
        items = tuple((i.role, i.status, i.awaiting_index is not None) for i in self.items.values())
        playing = tuple(
            (round(r.generated_ms), round(r.played_ms)) for r in self.playing_responses()
        )
        return (
            self.closed,
            buf,
            vad if self.config.turn_detection is not None else None,
            segs(self.retained),
            segs(self.deferred),
            segs(self.unanswered),
            act,
            playing,
            items,
            self.pending_bytes(),
            (len(self.delegations), len(self.waiting_answers)),
        )

    # --- plumbing ----------------------------------------------------------------------

    def _next_event_id(self) -> str:
        self._event_n += 1
        return f"event_{self._event_n}"

    def _new_item_id(self) -> str:
        self._item_n += 1
        return f"item_{self._item_n}"

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _emit(self, event: ServerEvent) -> None:
        event.event_id = self._next_event_id()
        if hasattr(event, "epoch"):
            event.epoch = self.epoch
        self._outbox.append(event)

    def _effect(self, effect: Effect) -> None:
        self._outbox.append(effect)

    def _detail(self, code: ErrorCode, message: str, exc: ProtocolError | None) -> ErrorDetail:
        return ErrorDetail(
            type=ERROR_TYPE[code].value,
            code=code.value,
            message=message,
            param=exc.param if exc is not None else None,
            event_id=exc.event_id if exc is not None else None,
        )

    def _server_error(self, code: ErrorCode, message: str) -> None:
        """An `error` event that answers no client event (no event id)."""
        self._emit(
            Error(error=ErrorDetail(type=ERROR_TYPE[code].value, code=code.value, message=message))
        )

    def _idle_deadline(self) -> float | None:
        """Section 7: the session's value can only lower the operator's (limits); a session
        value of 0 or none means the operator's; no timeout only when the operator has none."""
        operator = self.limits.idle_timeout_s
        s = self.config.idle_timeout_s
        if s is None or s == 0:
            seconds = operator
        elif operator == 0:
            seconds = s
        else:
            seconds = min(s, operator)
        if seconds == 0:
            return None
        return self.last_client_ms + seconds * 1000.0

    def _playback_deadline(self, r: _Response) -> float | None:
        if not self._may_play(r):
            return None
        return r.first_audio_ms + r.generated_ms + 1000.0

    def _wire_item(self, item: _Item) -> ConversationItem:
        if item.call is not None:
            return self.calls.wire(item)
        return ConversationItem(
            id=item.id,
            role=item.role,
            status=item.status,
            content=[msgspec_copy(p) for p in item.content],
        )

    def _tick(self, item: _Item) -> None:
        # a user turn is stamped with the time of the event that took it, from the
        # session's start (decision D30, noted where history is built)
        item.tick = True
        item.time_s = (self.event_ms - self.started_ms) / 1000

    def _keep_frames(self, segments: list[_Segment]) -> None:
        """Section 4.1: the frames a VLM request showed, newest kept within the limits."""
        for s in segments:
            if self._live(s.item_id, s.version) is not None:
                self.kept_frames.extend((s.item_id, s.version, f) for f in s.frames)
        while len(self.kept_frames) > self.limits.max_context_images or (
            sum(len(f) for _, _, f in self.kept_frames) > self.limits.max_context_image_bytes
        ):
            del self.kept_frames[0]

    def _frames_of(self, item: _Item) -> tuple[bytes, ...]:
        return tuple(f for i, v, f in self.kept_frames if (i, v) == (item.id, item.version))

    def _live(self, item_id: str, version: int) -> _Item | None:
        item = self.items.get(item_id)
        return item if item is not None and item.version == version else None

    def _add_item(self, item: _Item) -> str | None:
        """Append to history; returns the previous item's id."""
        prev = next(reversed(self.items), None) if self.items else None
        self.items[item.id] = item
        return prev

    def _new_version(self, item_id: str) -> int:
        self.versions[item_id] = self.versions.get(item_id, 0) + 1
        return self.versions[item_id]

    # --- defined by the layers above, declared here so each layer type-checks alone --

    if TYPE_CHECKING:

        def _reset_vad(self, *, restart: bool = False) -> None:
            raise NotImplementedError

        def _manual_live(self, speech: bool) -> None:
            raise NotImplementedError

        def _start_response(self, extra: list[_Segment]) -> None:
            raise NotImplementedError

        def _assistant_text(self, resp: _Response) -> str:
            raise NotImplementedError

        def _emit_text_reply(self, resp: _Response, text: str) -> None:
            raise NotImplementedError

        def _finish_listen(self, resp: _Response) -> None:
            raise NotImplementedError

        def _maybe_complete(self, resp: _Response) -> None:
            raise NotImplementedError

        def _fail_response(self, resp: _Response, code: ErrorCode, message: str) -> None:
            raise NotImplementedError
