"""Bounded exhaustive exploration: every input sequence over a small alphabet, breadth
first, to depth 6, with states deduplicated by a canonical snapshot. The stream
invariants I1-I9 (`tests.stateful.observer.Observer`) and the internal ones (I5 pending
bytes, I6 idle retention, I8 playback) are checked on every reachable state.

It runs on the reference model (always) and on `core.session.SessionProtocol` (skipped
until it exists). A child state is a deep copy of its parent with one more input applied (replayed
from the root instead when a session cannot be deep-copied).
"""

from __future__ import annotations

import copy
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import (
    ConversationItemDelete,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
)
from spec.limits import Limits
from spec.reference.session import PREROLL_MS, ReferenceSession
from spec.session_config import SessionConfig, TurnDetection
from spec.stage_results import (
    AsrTranscript,
    StageFailure,
    TtsAudio,
    TtsDone,
    TurnEndVerdict,
    VadScores,
    VlmDecisionResult,
)
from tests.stateful.observer import Observer

DEPTH = 6
LIMITS = Limits(max_pending_input_bytes=16_000, max_pending_commits=2, idle_timeout_s=60.0)
VAD = TurnDetection(silence_duration_ms=64, min_speech_duration_ms=64, prefix_padding_ms=32)
#: semantic VAD (B32): its pause is 7 frames; `high` waits 2 s at most
SEMANTIC = TurnDetection(type="semantic_vad", eagerness="high")
SPEECH = struct.pack("<1024h", *([9000, -9000] * 512))  # 64 ms: two VAD frames
QUIET = bytes(2048)  # 64 ms
LONG_QUIET = bytes(12_800)  # 400 ms: two of them overflow the pre-roll
JPEG = b"\xff\xd8\xff\xe0" + b"j" * 60
APPEND_MAX = max(len(SPEECH), len(QUIET), len(LONG_QUIET))

Input = Any  # a client event, a stage result, or ("wait", ms)


@dataclass
class Run:
    """One replayed session with its stream observer."""

    session: Any
    obs: Observer
    now: int = 0


def _first(obs: Observer, stage: str) -> str | None:
    reqs = obs.open_of(stage)
    return reqs[0] if reqs else None


def _alphabet(vad: bool, semantic: bool = False) -> dict[str, Callable[[Observer], Input | None]]:
    """Symbol -> the input it stands for in the current state (None: not applicable)."""

    def asr(o: Observer) -> Input | None:
        r = _first(o, "asr")
        return AsrTranscript(request_id=r, text="what is it") if r else None

    def speak(o: Observer) -> Input | None:
        r = _first(o, "vlm")
        return VlmDecisionResult(request_id=r, action="speak", text="A cup.") if r else None

    def audio(o: Observer) -> Input | None:
        r = _first(o, "tts")
        return TtsAudio(request_id=r, pcm16=bytes(4800), text="A cup.") if r else None

    def done(o: Observer) -> Input | None:
        r = _first(o, "tts")
        return TtsDone(request_id=r) if r else None

    def fail(o: Observer) -> Input | None:
        if not o.open:
            return None
        r = next(iter(o.open))
        return StageFailure(
            request_id=r, code=ErrorCode.ENGINE_ERROR, message="x", may_have_accepted=True
        )

    def ack(o: Observer) -> Input | None:
        return PlaybackAck(response_id=o.created[-1], played_ms=100) if o.created else None

    def delete(o: Observer) -> Input | None:
        return ConversationItemDelete(item_id=next(iter(o.live))) if o.live else None

    symbols: dict[str, Callable[[Observer], Input | None]] = {
        "speech": lambda o: InputAudioBufferAppend(audio=SPEECH),
        "quiet": lambda o: InputAudioBufferAppend(audio=QUIET),
        "quiet.long": lambda o: InputAudioBufferAppend(audio=LONG_QUIET),
        "frame": lambda o: InputAudioBufferAppend(video_frames=[JPEG]),
        "commit": lambda o: InputAudioBufferCommit(event_id="c"),
        "commit+response": lambda o: InputAudioBufferCommit(event_id="c", create_response=True),
        "response.create": lambda o: ResponseCreate(),
        "cancel": lambda o: ResponseCancel(),
        "clear": lambda o: InputAudioBufferClear(),
        "asr": asr,
        "vlm.speak": speak,
        "tts.audio": audio,
        "tts.done": done,
        "failure": fail,
        "ack": ack,
        "delete": delete,
        "wait": lambda o: ("wait", 1500),
    }
    if vad:
        symbols["vad.start"] = lambda o: (
            VadScores((0.95, 0.95)) if o.vad_frames_available() >= 2 else None
        )
        symbols["vad.stop"] = lambda o: (
            VadScores((0.02, 0.02)) if o.vad_frames_available() >= 2 else None
        )
    if semantic:
        symbols["vad.pause"] = lambda o: (
            VadScores((0.02,) * 7) if o.vad_frames_available() >= 7 else None
        )
        for name, probability, words in (
            ("finished", 0.95, None),
            ("unfinished", 0.05, None),
            ("none", None, None),
            # a finished sound, but the pause's words trail off (B32)
            ("finished_trailing_words", 0.95, "bigger than"),
        ):
            symbols[f"verdict.{name}"] = lambda o, p=probability, w=words: (
                TurnEndVerdict(request_id=o.turn_ends[-1], probability=p, transcript=w)
                if o.turn_ends
                else None
            )
    return symbols


def _apply(run: Run, item: Input) -> None:
    s, obs = run.session, run.obs
    if isinstance(item, tuple):
        run.now += item[1]
        s.handle_timeout(run.now)
        obs.feed(s.next_outputs())
        return
    if isinstance(item, VadScores):
        obs.scored(len(item.probabilities))
    if hasattr(item, "request_id"):
        s.backend_event(item, run.now)
        outs = s.next_outputs()
        if not isinstance(item, TtsAudio):
            obs.answered(item.request_id)
        obs.feed(outs, transcript_for=item.request_id if isinstance(item, AsrTranscript) else None)
        return
    if isinstance(item, VadScores):
        s.backend_event(item, run.now)
        obs.feed(s.next_outputs())
        return
    try:
        s.receive(item, run.now)
    except RemoteProtocolError as exc:
        assert s.next_outputs() == [], "a rejected event emitted something"
        assert exc.event_id == item.event_id
        return
    outs = s.next_outputs()
    obs.feed(outs)
    if isinstance(item, InputAudioBufferCommit) and not obs.closed:
        assert obs.commits_for(outs, "c") == 1, "I3: accepted commit not acknowledged once"


_ID = re.compile(r"\b(item|resp|event)_\d+")


def _canon(value: Any) -> str:
    """repr with ids renamed in order of appearance (ids carry no state of their own)."""
    names: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        return names.setdefault(m.group(0), f"{m.group(1)}#{len(names)}")

    return _ID.sub(rename, repr(value))


def _core_checks(session: Any) -> Any:
    """I5/I6 on core's `statistics()` snapshot (when it has one); returns the snapshot."""
    stats = getattr(session, "statistics", None)
    if stats is None:
        return None
    snap = stats()
    assert snap.pending_bytes <= LIMITS.max_pending_input_bytes, f"I5: {snap}"
    if snap.buffer_state == "idle":
        assert snap.buffer_frames <= 1, f"I6: {snap}"
        assert snap.buffer_audio_bytes <= PREROLL_MS * 32 + APPEND_MAX, f"I6: {snap}"
    return snap


def explore(
    make: Callable[[], Any], *, vad: bool, key_of: Callable[[Run], Any], semantic: bool = False
) -> int:
    """BFS to DEPTH; returns the number of distinct states reached."""
    alphabet = _alphabet(vad, semantic)

    def replay(path: tuple[Input, ...]) -> Run:
        run = Run(make(), Observer(vad_on=vad))
        run.obs.feed(run.session.next_outputs())
        for item in path:
            _apply(run, item)
        return run

    def fork(parent: Run, path: tuple[Input, ...]) -> Run:
        """A copy of the parent state: deepcopy when the session allows it, else replay."""
        try:
            return copy.deepcopy(parent)
        except Exception:
            return replay(path)

    root = replay(())
    seen = {key_of(root)}
    frontier: list[tuple[Input, ...]] = [()]
    for _ in range(DEPTH):
        nxt: list[tuple[Input, ...]] = []
        for path in frontier:
            parent = replay(path)
            if parent.obs.closed:
                continue
            for symbol in alphabet.values():
                item = symbol(parent.obs)
                if item is None:
                    continue
                run = fork(parent, path)
                _apply(run, item)
                key = key_of(run)
                if key not in seen:
                    seen.add(key)
                    nxt.append((*path, item))
        frontier = nxt
    for path in frontier:  # I4 on the deepest states too
        replay(path).obs.teardown()
    return len(seen)


def _config(mode: str) -> SessionConfig:
    return SessionConfig(
        turn_detection={"manual": None, "vad": VAD, "semantic": SEMANTIC}[mode],
        preemptive_response=False,
    )


def _reference(mode: str) -> Callable[[], ReferenceSession]:
    config = _config(mode)
    return lambda: ReferenceSession(session_id="s1", config=config, limits=LIMITS)


def _reference_key(run: Run) -> Any:
    session = run.session
    assert isinstance(session, ReferenceSession)
    assert session.invariant_violations() == []
    return (session.snapshot(), run.obs.vad_frames_available())


MODES = [("manual", 1000), ("vad", 1000), ("semantic", 1000)]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "minimum"), MODES, ids=[m for m, _ in MODES])
def test_bfs_depth_6_holds_invariants_on_every_reachable_state_of_the_reference(
    mode: str, minimum: int
) -> None:
    vad, semantic = mode != "manual", mode == "semantic"
    detector_states: set[str] = set()

    def key(run: Run) -> Any:
        detector_states.add(run.session.vad.state)
        return _reference_key(run)

    states = explore(_reference(mode), vad=vad, key_of=key, semantic=semantic)
    print(f"reference BFS ({mode}), depth {DEPTH}: {states} states, detector {detector_states}")
    assert states > minimum
    if semantic:  # B32: the pause under review and the held pause are explored
        assert {"silence", "speech", "review", "held"} <= detector_states


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "minimum"), MODES, ids=[m for m, _ in MODES])
def test_bfs_depth_6_holds_invariants_on_every_reachable_state_of_session_protocol(
    mode: str, minimum: int
) -> None:
    core = pytest.importorskip("core.session")
    config = _config(mode)
    vad, semantic = mode != "manual", mode == "semantic"

    def make() -> Any:
        return core.SessionProtocol(session_id="s1", config=config, limits=LIMITS, now_ms=0)

    def key(run: Run) -> Any:
        snap = _core_checks(run.session)
        obs = run.obs
        observed = (
            obs.closed,
            obs.active is not None,
            tuple(sorted(s for s, _ in obs.open.values())),
            len(obs.live),
            obs.vad_frames_available(),
            len(obs.turn_ends),
        )
        return (
            _canon((snap, observed)) if snap is not None else _canon((observed, len(obs.created)))
        )

    states = explore(make, vad=vad, key_of=key, semantic=semantic)
    print(f"SessionProtocol BFS ({mode}), depth {DEPTH}: {states} states")
    assert states > minimum
