"""A thin driver around `SessionProtocol` for behaviour tests: send events, inspect what
came out, and play the backend's part."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.session import SessionProtocol
from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.errors import RemoteProtocolError
from spec.limits import Limits
from spec.session_config import SessionConfig, validate_session
from spec.stage_results import (
    AsrTranscript,
    StageFailure,
    TtsAudio,
    TtsDone,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)


def speech_pcm(ms: int = 200, amplitude: int = 8000) -> bytes:
    """16 kHz pcm16 tone loud enough to count as speech."""
    n = ms * 16
    return (np.sin(np.arange(n) / 5.0) * amplitude).astype("<i2").tobytes()


def quiet_pcm(ms: int = 200) -> bytes:
    """Low-level noise well under the speech floor (RMS ~ 3e-4)."""
    rng = np.random.default_rng(ms)
    return (rng.normal(0, 10, ms * 16)).astype("<i2").tobytes()


def jpeg(tag: str = "red", size: int = 64) -> bytes:
    """Bytes that pass the JPEG magic check, distinguishable by `tag`."""
    return b"\xff\xd8\xff\xe0" + tag.encode().ljust(size, b".")


def item_create(
    *parts: ev.ContentPart, role: str = "user", item_id: str | None = None
) -> ev.ClientEvent:
    """`conversation.item.create` of a message with these content parts."""
    return ev.ConversationItemCreate(
        item=ev.ConversationItem(id=item_id, role=role, content=list(parts))
    )


def tag(out: Any) -> str:
    config = getattr(out, "__struct_config__", None)
    return str(config.tag) if config is not None else type(out).__name__


@dataclass
class Driver:
    config: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    profile: str = "speech"
    now: int = 0
    log: list[Any] = field(default_factory=list)
    #: the backend's ASR ends what it hears as a sentence with a mark, as Whisper does (B32)
    punctuated_transcripts: bool = False

    def __post_init__(self) -> None:
        cfg: SessionConfig = validate_session(self.config)
        self.p = SessionProtocol(
            session_id="sess_1",
            config=cfg,
            limits=self.limits,
            profile=self.profile,
            now_ms=0,
            punctuated_transcripts=self.punctuated_transcripts,
        )
        self.take()

    # --- io ---------------------------------------------------------------------------

    def take(self) -> list[Any]:
        out = self.p.next_outputs()
        self.log.extend(out)
        return out

    def send(self, event: ev.ClientEvent, advance: int = 10) -> list[Any]:
        self.now += advance
        self.p.receive(event, self.now)
        return self.take()

    def refuse(self, event: ev.ClientEvent) -> RemoteProtocolError:
        before = self.p.statistics()
        try:
            self.p.receive(event, self.now)
        except RemoteProtocolError as exc:
            assert self.p.next_outputs() == [], "a refused event must not emit anything"
            assert self.p.statistics() == before, "a refused event must not change state"
            return exc
        raise AssertionError(f"{tag(event)} was accepted")

    def result(self, result: Any, advance: int = 10) -> list[Any]:
        self.now += advance
        self.p.backend_event(result, self.now)
        return self.take()

    # --- client shorthands ------------------------------------------------------------

    def append(self, audio: bytes = b"", frames: list[bytes] | None = None, **kw: Any) -> list[Any]:
        return self.send(ev.InputAudioBufferAppend(audio=audio, video_frames=frames or [], **kw))

    def commit(self, event_id: str | None = None, **kw: Any) -> list[Any]:
        return self.send(ev.InputAudioBufferCommit(event_id=event_id, **kw))

    def speech_turn(self, ms: int = 300, event_id: str | None = None) -> list[Any]:
        self.append(speech_pcm(ms))
        return self.commit(event_id, create_response=True)

    # --- backend shorthands -----------------------------------------------------------

    def effects(self, kind: type, since: int = 0) -> list[Any]:
        return [o for o in self.log[since:] if isinstance(o, kind)]

    def last(self, kind: type) -> Any:
        found = self.effects(kind)
        assert found, f"no {kind.__name__} emitted"
        return found[-1]

    def transcribe(self, text: str, request: SubmitAsr | None = None) -> list[Any]:
        request = request or self.last(SubmitAsr)
        return self.result(AsrTranscript(request.request_id, text))

    def reply(self, text: str = "I see something red.", action: str = "speak") -> list[Any]:
        vlm: SubmitVlm = self.last(SubmitVlm)
        if text:
            self.result(VlmDelta(vlm.request_id, text))
        return self.result(VlmDecisionResult(vlm.request_id, action, text))

    def speak(self, ms: int = 500, text: str | None = None, done: bool = True) -> list[Any]:
        tts: SubmitTts = self.last(SubmitTts)
        pcm = bytes(ms * 48)  # 24 kHz pcm16: 48 bytes per ms
        out = self.result(TtsAudio(tts.request_id, pcm, tts.text if text is None else text))
        if done:
            out += self.result(TtsDone(tts.request_id))
        return out

    def full_turn(self, transcript: str = "what colour is this", reply: str = "It is red.") -> None:
        self.speech_turn()
        self.transcribe(transcript)
        self.reply(reply)
        self.speak()

    def vad(self, *probabilities: float, levels: tuple[float, ...] = ()) -> list[Any]:
        """The VAD's verdicts on the next frames, with their levels (dBFS) if given."""
        return self.result(VadScores(tuple(probabilities), levels))

    def fail(self, request_id: str, code: Any, **kw: Any) -> list[Any]:
        return self.result(StageFailure(request_id, code, "stage exploded", **kw))

    # --- queries ----------------------------------------------------------------------

    def tags(self, outputs: list[Any] | None = None) -> list[str]:
        return [tag(o) for o in (self.log if outputs is None else outputs)]

    def events(self, name: str, outputs: list[Any] | None = None) -> list[Any]:
        return [o for o in (self.log if outputs is None else outputs) if tag(o) == name]
