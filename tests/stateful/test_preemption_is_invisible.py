"""B35: a session that prepares replies during pauses shows the client the wire of the
reference model, which has no preemptive response at all (D40).

Hypothesis draws spoken sessions: speech and silence in VAD frames, camera frames,
the words of live partials, and how far the backend got with a prepared reply before the
turn ended. One backend answers both sessions, deterministically from each request's
input (a reply is a function of its prompt, audio of its text), in one canonical order
per reply: the VLM's deltas and decision, then each TTS request's audio and end. Whenever
the reference has a reply in progress, every open request of both is answered before the
next step, so that the reference's reply and the session's adopted one take the place of
one another in the stream. Then the two streams of server events must be equal, event by
event, ids included; and the session never shows a reply before its turn ended.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from core.session import SessionProtocol
from spec import events as ev
from spec.effects import (
    Abort,
    PromptInput,
    SpeculationOutcome,
    SubmitAsr,
    SubmitPartialAsr,
    SubmitTts,
    SubmitVlm,
)
from spec.limits import Limits
from spec.reference.session import ReferenceSession
from spec.session_config import SessionConfig, TurnDetection
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    StageResult,
    TtsAudio,
    TtsDone,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)
from tests.stateful.observer import project, tag

#: turns end after 640 ms of silence; a pause's partial is asked on its first silent frame
DETECTION = TurnDetection(silence_duration_ms=640, min_speech_duration_ms=64, prefix_padding_ms=64)
FRAME_BYTES = 512 * 2  # one 32 ms VAD frame of 16 kHz pcm16
HI, LO = 0.9, 0.1
WORDS = st.sampled_from(["what colour is this", "and that one?", "", "is it big, or"])
JPEG = b"\xff\xd8\xff\xe0" + b"j" * 40


def _reply(prompt: PromptInput) -> str:
    """The model's answer, a function of what it was shown."""
    said = (prompt.transcript or "nothing").strip() or "nothing"
    return f"You said {said}. I see {len(prompt.frames)} frames, fine."


class _Backend:
    """Answers one session's requests in the canonical order of each reply."""

    def __init__(self) -> None:
        self.replies: dict[str, deque[StageResult]] = {}  # stage key -> VLM results
        self.speech: dict[str, list[tuple[str, deque[StageResult]]]] = {}  # key -> TTS
        self.partials: list[str] = []
        self.asr: list[SubmitAsr] = []
        self.aborted: set[str] = set()

    def see(self, outputs: list[Any]) -> None:
        for o in outputs:
            if isinstance(o, SubmitVlm):
                text = _reply(o.prompt)
                half = len(text) // 2
                self.replies[o.response_id] = deque(
                    [
                        VlmDelta(o.request_id, text[:half]),
                        VlmDelta(o.request_id, text[half:]),
                        VlmDecisionResult(o.request_id, "speak", text),
                    ]
                )
            elif isinstance(o, SubmitTts):
                results: deque[StageResult] = deque(
                    [TtsAudio(o.request_id, bytes(48 * len(o.text)), o.text), TtsDone(o.request_id)]
                )
                self.speech.setdefault(o.response_id, []).append((o.request_id, results))
            elif isinstance(o, SubmitPartialAsr):
                self.partials.append(o.request_id)
            elif isinstance(o, SubmitAsr):
                self.asr.append(o)
            elif isinstance(o, Abort):
                self.aborted.add(o.request_id)

    def next_of(self, key: str) -> StageResult | None:
        """The next result of the reply keyed `key`, in canonical order."""
        reply = self.replies.get(key)
        while reply:
            result = reply.popleft()
            if result.request_id not in self.aborted:
                return result
        for request_id, results in self.speech.get(key, []):
            if results and request_id not in self.aborted:
                return results.popleft()
        return None

    def stage_keys(self) -> list[str]:
        return [*self.replies, *self.speech]


def _wire(outputs: list[Any]) -> list[Any]:
    return [o for o in outputs if isinstance(o, ev.ServerEvent)]


def _full(events: list[Any]) -> list[Any]:
    """Every field of every event, as the client reads it."""
    return [msgspec.to_builtins(e) for e in events]


class _Trio:
    """The session under test with preemption (`on`), the same session without it
    (`off`) and the reference model (`ref`), fed the same client events in lockstep."""

    def __init__(self) -> None:
        limits = Limits()
        config = SessionConfig(turn_detection=DETECTION)
        self.on = SessionProtocol(session_id="s1", config=config, limits=limits)
        self.off = SessionProtocol(
            session_id="s1",
            config=SessionConfig(turn_detection=DETECTION, preemptive_response=False),
            limits=limits,
        )
        self.ref = ReferenceSession(session_id="s1", config=config, limits=limits)
        self.sessions = (self.on, self.off, self.ref)
        for session in self.sessions:
            session.live.enabled = True
        self.backends = {id(s): _Backend() for s in self.sessions}
        self.wires: dict[int, list[Any]] = {id(s): [] for s in self.sessions}
        self.now = 0
        self.outcomes: list[str] = []  # of the session's preemptive responses, in order
        self.drain()

    def wire(self, session: Any) -> list[Any]:
        return self.wires[id(session)]

    def backend(self, session: Any) -> _Backend:
        return self.backends[id(session)]

    def drain(self) -> None:
        for session in self.sessions:
            out = session.next_outputs()
            self.backend(session).see(out)
            self.wire(session).extend(_wire(out))
            self.outcomes += [o.outcome for o in out if isinstance(o, SpeculationOutcome)]

    def client(self, event: ev.ClientEvent) -> None:
        self.now += 10
        for session in self.sessions:
            session.receive(event, self.now)
        self.drain()

    def every(self, result: StageResult) -> None:
        self.now += 10
        for session in self.sessions:
            session.backend_event(result, self.now)
        self.drain()

    def one(self, session: Any, result: StageResult) -> None:
        self.now += 10
        session.backend_event(result, self.now)
        self.drain()

    def frames(self, probability: float, count: int) -> None:
        pcm = (b"\x10\x27" if probability > 0.5 else b"\x01\x00") * (FRAME_BYTES // 2) * count
        self.client(ev.InputAudioBufferAppend(audio=pcm))
        self.every(VadScores((probability,) * count))

    def words(self, text: str) -> None:
        """The oldest partial still out answers (its id is the same in all three)."""
        asked = self.backend(self.ref).partials
        if asked:
            request_id = asked.pop(0)
            for session in (self.on, self.off):
                partials = self.backend(session).partials
                if request_id in partials:
                    partials.remove(request_id)
            self.every(AsrPartial(request_id, text))

    def prepared(self, steps: int) -> None:
        """The backend gets `steps` results further with the reply being prepared."""
        current = self.on._turns.preemption.current
        if current is None:
            return
        for _ in range(steps):
            result = self.backend(self.on).next_of(current.id)
            if result is None:
                return
            self.one(self.on, result)

    def replying(self) -> bool:
        """Whether the reference has a response that has not ended."""
        kinds = [tag(e) for e in self.wire(self.ref)]
        return kinds.count("response.created") > kinds.count("response.done")

    def settle(self) -> None:
        """While the reference has a reply in progress, answer every open request of
        all three, partials and transcripts first."""
        for _ in range(500):
            if not self.replying():
                return
            if self.backend(self.ref).partials:
                self.words("what colour is this")
                continue
            asr = self.backend(self.ref).asr
            if asr:
                submit = asr.pop(0)
                for session in (self.on, self.off):
                    mine = self.backend(session).asr
                    mine[:] = [a for a in mine if a.request_id != submit.request_id]
                self.every(AsrTranscript(submit.request_id, f"heard {len(submit.pcm16)} bytes"))
                continue
            preparing = self.on._turns.preemption.current
            progressed = False
            for session in self.sessions:
                backend = self.backend(session)
                for key in backend.stage_keys():
                    if preparing is not None and key == preparing.id:
                        continue  # still preparing: only `prepared` answers it
                    result = backend.next_of(key)
                    if result is not None:
                        self.one(session, result)
                        progressed = True
            if not progressed:
                return
        raise AssertionError("the backends never settled")


STEP = st.one_of(
    st.tuples(st.just("speech"), st.integers(1, 12)),
    st.tuples(st.just("silence"), st.integers(1, 25)),
    st.tuples(st.just("frame"), st.just(0)),
    st.tuples(st.just("words"), WORDS),
    st.tuples(st.just("prepared"), st.integers(1, 8)),
    # a pause whose words come in, and how far the reply got meanwhile: the shape of a
    # turn, drawn often so that most programs prepare replies
    st.tuples(st.just("pause"), st.tuples(WORDS, st.integers(0, 9))),
    st.tuples(st.just("pause"), st.tuples(WORDS, st.integers(0, 9))),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=30))
def test_b35_a_session_with_preemption_shows_the_wire_of_the_reference_model(
    program: list[tuple[str, Any]],
) -> None:
    _run(program)


def test_b35_the_programs_reach_an_adopted_and_a_discarded_reply() -> None:
    """The property above explores both ends: shown here on three programs of its kind."""
    pause = [("speech", 12), ("silence", 7), ("words", "what colour is this")]
    assert _run([*pause, ("prepared", 8), ("silence", 25)]) == ["started", "adopted"]
    assert _run([*pause, ("prepared", 2), ("silence", 25)]) == ["started", "adopted"]
    assert _run([*pause, ("prepared", 2), ("speech", 3), ("silence", 25)])[:2] == [
        "started",
        "discarded",
    ]


def _run(program: list[tuple[str, Any]]) -> list[str]:
    """Run `program` on the trio, checking agreement at every step; the outcomes of the
    session's preemptive responses."""
    trio = _Trio()
    for kind, value in program:
        if kind == "speech":
            trio.frames(HI, value)
        elif kind == "silence":
            trio.frames(LO, value)
        elif kind == "frame":
            trio.client(ev.InputAudioBufferAppend(video_frames=[JPEG]))
        elif kind == "words":
            trio.words(value)
        elif kind == "pause":
            words, steps = value
            trio.frames(HI, 3)
            trio.frames(LO, 7)
            trio.words(words)
            trio.prepared(steps)
        else:
            trio.prepared(value)
        # no reply before its turn ended: never a response the others have not begun
        began = [tag(e) for e in trio.wire(trio.on)].count("response.created")
        assert began <= [tag(e) for e in trio.wire(trio.off)].count("response.created")
        trio.settle()
        _agree(trio)
    trio.frames(LO, 25)  # the last turn ends
    trio.settle()
    _agree(trio)
    return trio.outcomes


def _agree(trio: _Trio) -> None:
    on, off, ref = (trio.wire(s) for s in trio.sessions)
    assert _full(on) == _full(off)  # every field, ids included
    assert [project(e) for e in on] == [project(e) for e in ref]
