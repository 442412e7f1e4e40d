"""Reading a session's output stream: the comparison projection and the stream invariants
(I1-I9 of docs/session-semantics.md section 8), mirrored from what was emitted only."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from spec.effects import (
    Abort,
    CloseSession,
    EvictReplica,
    ScoreVad,
    SubmitAsr,
    SubmitDelegation,
    SubmitPartialAsr,
    SubmitTts,
    SubmitTurnEnd,
    SubmitVlm,
)
from spec.events import (
    ConversationItemAdded,
    ConversationItemDeleted,
    Error,
    InputAudioBufferCommitted,
    InputAudioTranscriptionCompleted,
    PlaybackAcknowledged,
    ResponseCreated,
    ResponseDone,
    ResponseOutputAudioDelta,
    ResponseOutputItemAdded,
    ServerEvent,
    SessionClosed,
    SessionCreated,
    SessionUpdated,
)

__all__ = ["Observer", "project", "tag"]

_SUBMITS = (SubmitAsr, SubmitVlm, SubmitTts)
#: events that belong to a response's output (I2)
_RESPONSE_OUTPUT = {
    "response.created",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_audio.delta",
    "response.output_audio.done",
    "response.output_audio_transcript.delta",
    "response.output_audio_transcript.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.done",
    "response.listen",
}


def tag(o: Any) -> str:
    """The wire `type` of a server event, or the class name of an effect."""
    if isinstance(o, ServerEvent):
        return str(type(o).__struct_config__.tag)
    return type(o).__name__


def project(o: Any) -> tuple[Any, ...]:
    """What the stateful comparison compares (see the module docstring of the test)."""
    if not isinstance(o, ServerEvent):
        out: list[Any] = [tag(o)]
        for name in ("request_id", "item"):
            if hasattr(o, name):
                out.append((name, getattr(o, name)))
        if isinstance(o, EvictReplica):
            out.append(("stage", o.stage))
        if isinstance(o, SubmitAsr | SubmitPartialAsr | ScoreVad | SubmitTurnEnd):
            out.append(("pcm16 bytes", len(o.pcm16)))
        if isinstance(o, SubmitTurnEnd):
            out.append(("item_id", o.item_id))
        if isinstance(o, ScoreVad):
            out.append(("start_ms", o.start_ms))
        if isinstance(o, SubmitVlm):
            prompt = o.prompt
            out.append(
                (
                    "prompt",
                    prompt.system,
                    prompt.history,
                    prompt.transcript,
                    prompt.frames,
                    prompt.time_s,
                    prompt.history_times_s,
                    prompt.history_frames,
                    prompt.asked_before,
                )
            )
        if isinstance(o, SubmitTts):
            out.append(("tts", o.seq, o.text, o.sample_rate_hz, o.voice))
        if isinstance(o, SubmitDelegation):
            out.append(("delegation", o.response_id, o.question, o.history, o.transcript))
        return tuple(out)
    fields: list[Any] = [tag(o), o.event_id]
    for name in (
        "item_id",
        "response_id",
        "client_event_id",
        "no_response",
        "audio_start_ms",
        "audio_end_ms",
        "content_index",
        "transcript",
        "delta",
        "text",
        "played_ms",
        "capabilities",  # session.created: what the backend can do (section 1)
    ):
        if hasattr(o, name):
            fields.append((name, getattr(o, name)))
    item = getattr(o, "item", None)
    if item is not None:
        parts = tuple(
            (part.type, getattr(part, "text", None), getattr(part, "transcript", None))
            for part in (item.content or ())
        )
        # an item's status when it is added is not part of the contract; later it is
        status = None if isinstance(o, ConversationItemAdded) else item.status
        fields.append(("item", item.id, status, item.role, parts))
    response = getattr(o, "response", None)
    if response is not None:
        details = response.status_details
        fields.append(
            ("response", response.id, response.status, details.reason if details else None)
        )
    if isinstance(o, Error):
        e = o.error
        fields.append(("error", e.code, e.param, e.event_id))
    elif getattr(o, "error", None) is not None:  # a transcription's failure
        fields.append(("error", o.error.code))
    return tuple(fields)


class Observer:
    """Mirrors a session from its output stream and asserts the stream invariants."""

    def __init__(self, *, output_rate: int = 24_000, vad_on: bool = False) -> None:
        self.output_rate = output_rate
        self.closed = False
        self.close_effects = 0
        self.active: str | None = None
        self.created: list[str] = []
        self.done: Counter[str] = Counter()
        self.status: dict[str, str] = {}
        self.open: dict[str, tuple[str, str]] = {}  # request id -> (stage, response id)
        #: open delegations (3.6): request id -> the note's response; they outlive it
        self.delegations: dict[str, str] = {}
        self.epoch = 0
        self.generated: dict[str, float] = {}
        self.assistant_item: dict[str, str] = {}
        self.live: dict[str, int] = {}  # item id -> observed version (live items)
        self.version: Counter[str] = Counter()
        self.asr_item: dict[str, tuple[str, int]] = {}  # request -> (item id, observed version)
        self.vad_on = vad_on
        self.vad_audio_ms = 0.0
        self.vad_frames = 0
        self.partials: list[str] = []  # live-transcript requests not yet answered (I11)
        #: live-transcript requests -> the utterance they heard, and their words once
        #: answered: a commit of the same audio takes them as its transcript (5.2)
        self.partial_item: dict[str, str] = {}
        self.heard: dict[str, str] = {}
        self.speaking: str | None = None  # the item id of the utterance being spoken
        # ids seen for the first time since the last harvest
        self.new_items: list[str] = []
        self.new_calls: list[str] = []  # call ids of function_call items (B38)
        self.new_responses: list[str] = []
        self.new_requests: list[str] = []
        #: end-of-turn verdicts asked for (semantic VAD), oldest first
        self.turn_ends: list[str] = []
        self.events = 0

    # --- what the test can ask -----------------------------------------------------

    def open_of(self, stage: str) -> list[str]:
        return [r for r, (s, _) in self.open.items() if s == stage]

    def vad_frames_available(self) -> int:
        return max(0, math.floor(self.vad_audio_ms / 32) - self.vad_frames)

    def answered(self, request_id: str) -> None:
        """The test fed a terminal result for this request."""
        self.open.pop(request_id, None)
        self.delegations.pop(request_id, None)

    def answered_partial(self, request_id: str, text: str | None) -> None:
        """The test fed this live partial's answer."""
        if text is not None and request_id in self.partial_item:
            self.heard[request_id] = text

    def scored(self, n: int) -> None:
        self.vad_frames += n

    def commits_for(self, outs: list[Any], client_event_id: str) -> int:
        return sum(
            1
            for o in outs
            if isinstance(o, InputAudioBufferCommitted) and o.client_event_id == client_event_id
        )

    # --- the stream ----------------------------------------------------------------

    def feed(self, outs: list[Any], *, transcript_for: str | None = None) -> None:
        for o in outs:
            self._one(o, transcript_for)

    def _one(self, o: Any, transcript_for: str | None) -> None:
        # I9: after session.closed only its CloseSession effect follows
        if self.closed:
            assert isinstance(o, CloseSession) and self.close_effects == 0, (
                f"I9: {tag(o)} after session.closed"
            )
            self.close_effects += 1
            return
        if isinstance(o, ServerEvent):
            self.events += 1
            self._event(o, transcript_for)
        else:
            self._effect(o)

    def _finished(self, rid: str | None) -> bool:
        return rid is not None and self.done[rid] > 0

    def _effect(self, o: Any) -> None:
        if isinstance(o, _SUBMITS):
            # I2: nothing of a finished response (or an older epoch) is submitted
            assert not self._finished(o.response_id), f"I2: {tag(o)} after done"
            assert o.response_id == self.active, f"{tag(o)} for inactive {o.response_id}"
            assert o.epoch == self.epoch, f"I2: {tag(o)} epoch {o.epoch} != {self.epoch}"
            assert o.request_id not in self.open, f"request id reused: {o.request_id}"
            stage = o.request_id.split(":")[1]
            self.open[o.request_id] = (stage, o.response_id)
            self.new_requests.append(o.request_id)
            if isinstance(o, SubmitAsr):
                live = self.live.get(o.item.item_id)
                assert live is not None, f"ASR for a dead item {o.item}"
                self.asr_item[o.request_id] = (o.item.item_id, live)
        elif isinstance(o, SubmitDelegation):
            assert o.response_id == self.active, f"{tag(o)} for inactive {o.response_id}"
            assert o.epoch == self.epoch, f"I2: {tag(o)} epoch {o.epoch} != {self.epoch}"
            assert o.request_id not in self.delegations, f"request id reused: {o.request_id}"
            self.delegations[o.request_id] = o.response_id
            self.new_requests.append(o.request_id)
        elif isinstance(o, Abort) and o.stage == "delegation":
            # a delegation outlives the note's response (3.6)
            assert self.delegations.pop(o.request_id, None) is not None, "Abort of no delegation"
        elif isinstance(o, Abort):
            assert not self._finished(o.response_id), "I2: Abort after done"
            self.open.pop(o.request_id, None)
        elif isinstance(o, SubmitTurnEnd):
            assert self.vad_on, "SubmitTurnEnd while VAD is off"
            assert o.request_id not in self.turn_ends, f"request id reused: {o.request_id}"
            self.turn_ends.append(o.request_id)
        elif isinstance(o, SubmitPartialAsr):
            # I11: at most two live-transcript requests are out (a pause's partial may
            # supersede a cadence one, never another pause's)
            assert len(self.partials) < 2, f"I11: {o.request_id} while {self.partials} are out"
            if not self.vad_on and self.speaking is None:
                # a manual hold (B41) names its item with its first partial: no
                # speech_started announces it
                self.speaking = o.item_id
            assert o.item_id == self.speaking, f"a partial for {o.item_id} not being spoken"
            self.partials.append(o.request_id)
            self.partial_item[o.request_id] = o.item_id
        elif isinstance(o, ScoreVad):
            assert self.vad_on, "ScoreVad while VAD is off"
            self.vad_audio_ms += (len(o.pcm16) // 2) / 16.0
        elif isinstance(o, CloseSession):
            raise AssertionError("CloseSession without session.closed")

    def _event(self, o: ServerEvent, transcript_for: str | None) -> None:
        t = tag(o)
        epoch = getattr(o, "epoch", None)
        if epoch is not None:
            assert epoch >= self.epoch, f"I2: epoch went back {self.epoch} -> {epoch} ({t})"
            self.epoch = epoch
        rid = getattr(o, "response_id", None)
        if t in _RESPONSE_OUTPUT and rid is not None:
            assert not self._finished(rid), f"I2: {t} of {rid} after its response.done"
        if t == "input_audio_buffer.speech_started":
            self.speaking = o.item_id
        elif t in (
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "input_audio_buffer.cleared",
        ):
            self.speaking = None
        elif t == "conversation.item.input_audio_transcription.delta":
            # I11: live text only for the utterance still being spoken
            assert o.item_id == self.speaking, f"I11: a delta for {o.item_id}"
        if isinstance(o, SessionClosed):
            self.closed = True
            self.active = None
        elif isinstance(o, SessionCreated | SessionUpdated):
            fmt = o.session.audio.get("output", {}).get("format", {})
            self.output_rate = int(fmt.get("rate", self.output_rate))
            vad = o.session.turn_detection is not None
            if vad and not self.vad_on:
                self.vad_audio_ms, self.vad_frames = 0.0, 0
            self.vad_on = vad
        elif isinstance(o, ResponseCreated):
            r = o.response.id
            assert self.active is None, f"I1: {r} created while {self.active} is active"
            assert r not in self.created, f"response id reused: {r}"
            self.active = r
            self.created.append(r)
            self.new_responses.append(r)
        elif isinstance(o, ResponseDone):
            r = o.response.id
            assert r in self.created, f"I4: done for unknown {r}"
            assert self.done[r] == 0, f"I4: second response.done for {r}"
            self.done[r] += 1
            self.status[r] = o.response.status
            if self.active == r:
                self.active = None
            for req, (_, owner) in list(self.open.items()):
                if owner == r:
                    del self.open[req]
        elif isinstance(o, ResponseOutputItemAdded):
            assert o.response_id == self.active
            self.assistant_item[o.response_id] = str(o.item.id)
        elif isinstance(o, ResponseOutputAudioDelta):
            self.generated[o.response_id] = (
                self.generated.get(o.response_id, 0.0)
                + (len(o.delta) // 2) * 1000.0 / self.output_rate
            )
        elif isinstance(o, PlaybackAcknowledged):
            gen = self.generated.get(o.response_id, 0.0)
            assert o.played_ms <= gen + 1e-6, f"I8: played {o.played_ms} > generated {gen}"
        elif isinstance(o, ConversationItemAdded):
            iid = str(o.item.id)
            assert iid not in self.live, f"item {iid} added twice"
            self.version[iid] += 1
            self.live[iid] = self.version[iid]
            self.new_items.append(iid)
            if o.item.type == "function_call" and o.item.call_id:
                self.new_calls.append(o.item.call_id)
        elif isinstance(o, ConversationItemDeleted):
            assert o.item_id in self.live, f"deleted unknown item {o.item_id}"
            del self.live[o.item_id]
        elif isinstance(o, InputAudioTranscriptionCompleted):
            if transcript_for is None or transcript_for not in self.asr_item:
                # 5.2: a commit of the audio a live partial heard takes its words
                heard = {(self.partial_item[r], t) for r, t in self.heard.items()}
                assert (o.item_id, o.transcript) in heard, "transcript without an ASR result"
                assert o.item_id in self.live, f"I7: transcript of dead item {o.item_id}"
                return
            # I7: written only to the item version whose ASR request answered
            want = self.asr_item.get(transcript_for)
            assert want is not None and want[0] == o.item_id, f"I7: {o.item_id} for {want}"
            assert self.live.get(o.item_id) == want[1], f"I7: stale version of {o.item_id}"

    def teardown(self) -> None:
        """I4: every created response got its done, except the active one (or closed)."""
        if self.closed:
            return
        missing = [r for r in self.created if self.done[r] == 0 and r != self.active]
        assert not missing, f"I4: no response.done for {missing}"
