"""The hypothesis state machine that drives a session under test and the reference model
(`spec.reference.session.ReferenceSession`) with the same inputs and compares them.

Client rules have no preconditions (clients may send anything, stale and foreign ids
included); backend rules have preconditions (a backend only answers requests that an
emitted effect opened), except one rule that replays results of any request ever opened
(stale results must be dropped). A clock rule advances time and fires deadlines.

After every step the two output streams are compared through `observer.project`: event
type and id, item and response ids, error code/param/event_id (and a transcription
failure's code), `no_response`, `client_event_id`, VAD `audio_start_ms`/`audio_end_ms`,
content index, transcripts, texts and deltas, `played_ms`, items (id, role, content parts,
status once past `conversation.item.added`), response status and reason; effects by type
with request id and item ref, the audio length of `SubmitAsr`/`ScoreVad`, the whole VLM
prompt (system, history, transcript, frames) and every TTS text.
"""

from __future__ import annotations

import base64
import copy
import struct
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from spec.errors import ErrorCode, RemoteProtocolError
from spec.events import (
    AudioPlaybackAckAlias,
    ContentPart,
    ConversationItem,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    InputCommitAlias,
    OutputAudioBufferClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionEventAck,
    SessionHeartbeat,
    SessionPatch,
    SessionResume,
    SessionUpdate,
)
from spec.function_tools import validate_tools
from spec.limits import MAX_FUNCTION_ARGUMENTS_BYTES, Limits
from spec.reference.session import ReferenceSession
from spec.session_config import SessionConfig, TurnDetection
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    DelegationAnswer,
    StageFailure,
    TtsAudio,
    TtsDone,
    TurnEndVerdict,
    VadScores,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
)
from tests.stateful.observer import Observer, project

__all__ = ["LIMITS", "SEMANTIC", "VAD", "SessionMachine"]

#: small limits so backpressure, the commit cap, the context cap, the truncation of the
#: oldest items (by count and by history bytes) and forgetting the oldest responses are
#: reachable
LIMITS = Limits(
    max_pending_input_bytes=64_000,
    max_pending_commits=2,
    max_video_frame_bytes=200,
    max_context_images=3,
    max_items=5,
    max_responses=2,
    max_history_bytes=60,
    idle_timeout_s=8.0,
)
#: short VAD durations so a few score frames cross them
VAD = TurnDetection(silence_duration_ms=96, min_speech_duration_ms=64, prefix_padding_ms=64)
#: semantic VAD at its shortest wait (2 s: 63 frames, a few score rules)
SEMANTIC = TurnDetection(type="semantic_vad", eagerness="high")
#: with live transcripts: turns end after 640 ms, so a pause's partial (asked on its first
#: silent frame) comes well before
VAD_LIVE = TurnDetection(silence_duration_ms=640, min_speech_duration_ms=64, prefix_padding_ms=64)

JPEG = b"\xff\xd8\xff\xe0" + b"j" * 40
PNG = b"\x89PNG\r\n\x1a\n" + b"p" * 40
BIG_JPEG = b"\xff\xd8" + b"x" * 200
FRAMES = st.sampled_from([JPEG, PNG, JPEG + b"2", b"", b"GIF89a-not-an-image", BIG_JPEG])
GOOD_FRAMES = st.lists(st.sampled_from([JPEG, PNG, PNG + b"3"]), max_size=2)


def _loud(samples: int) -> bytes:
    return struct.pack(f"<{samples}h", *([9000, -9000] * (samples // 2 + 1))[:samples])


@st.composite
def audio_payloads(draw: Any) -> dict[str, Any]:
    """Audio of an append, in formats whose 16 kHz conversion is exact."""
    ms = draw(st.sampled_from([1, 10, 20, 32, 64, 100, 200, 400]))
    kind = draw(
        st.sampled_from(["speech", "quiet", "speech", "quiet", "f32", "ulaw", "pcm48", "odd"])
    )
    if kind == "speech":
        return {"audio": _loud(16 * ms)}
    if kind == "quiet":
        return {"audio": bytes(32 * ms)}
    if kind == "f32":
        return {
            "audio": struct.pack(f"<{16 * ms}f", *([0.5, -0.5] * 8 * ms)),
            "format": "pcm_f32le",
        }
    if kind == "ulaw":
        return {"audio": bytes([0x80, 0x00] * 4 * ms), "format": "g711_ulaw"}
    if kind == "pcm48":
        return {"audio": bytes(96 * ms), "sample_rate_hz": 48_000}
    return {"audio": b"\x01" * (32 * ms + 1)}  # not a whole number of samples


#: a function tool the sessions may declare (B37-B39)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SESSION_PATCHES = st.sampled_from(
    [
        SessionPatch(tools=[WEATHER]),
        SessionPatch(tools=[WEATHER], tool_choice="none"),
        # a delegated question becomes a call of `delegate` (B40)
        SessionPatch(tools=[WEATHER, {"type": "function", "name": "delegate"}]),
        SessionPatch(tool_choice="required"),  # a turn without a call fails (3.8)
        SessionPatch(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}),
        SessionPatch(tools=None),
        SessionPatch(tools=[{**WEATHER, "name": "no spaces"}]),  # refused
        SessionPatch(tool_choice={"type": "function", "name": "book_flight"}),  # refused
        SessionPatch(turn_detection=VAD.public()),
        SessionPatch(turn_detection={**VAD.public(), "interrupt_response": False}),
        SessionPatch(turn_detection={**VAD.public(), "create_response": False}),
        SessionPatch(turn_detection=None),
        SessionPatch(turn_detection={"threshold": 0.1}),  # refused
        SessionPatch(turn_detection={"type": "semantic_vad", "eagerness": "eager"}),  # refused
        SessionPatch(turn_detection=SEMANTIC.public()),
        SessionPatch(turn_detection={"type": "semantic_vad", "eagerness": "medium"}),
        SessionPatch(
            turn_detection={
                **SEMANTIC.public(),
                "create_response": False,
                "interrupt_response": False,
            }
        ),
        SessionPatch(input_audio_format="mp3"),  # refused
        SessionPatch(idle_timeout_s=3.0),
        SessionPatch(idle_timeout_s=None),
        SessionPatch(instructions="Be brief."),
        SessionPatch(extra_body={"auto_response": True}),
        SessionPatch(extra_body={"auto_response": False}),
        SessionPatch(output_audio_format="pcm16"),
    ]
)
FOREIGN_ITEMS = st.sampled_from(["item_999", "nope", "resp_1", ""])
FOREIGN_RESPONSES = st.sampled_from(["resp_999", "item_1", "x"])
VERDICTS = st.sampled_from([None, 0.05, 0.3, 0.5, 0.95])
#: the words of the pause's partial a verdict carries (B32): none, finished (a question,
#: which finishes a held pause under eagerness high, B44: drawn more often, as the
#: exploration reaches few verdicts), trailing off, a question mark after an open word,
#: unpunctuated; with whether the ASR punctuates (mostly: Whisper does)
PAUSE_WORDS = st.sampled_from(
    [
        None,
        "Is it red?",
        "Is it red?",
        "bigger than",
        "I was wondering whether...",
        "bigger than the?",
        "my favourite colour",
    ]
)


PUNCTUATED = st.sampled_from([True, True, False])


def _verdict(data: st.DataObject, request_id: str, probability: float | None) -> TurnEndVerdict:
    return TurnEndVerdict(
        request_id=request_id,
        probability=probability,
        transcript=data.draw(PAUSE_WORDS),
        punctuated=data.draw(PUNCTUATED),
    )


SCORES = st.sampled_from([0.97, 0.9, 0.6, 0.45, 0.3, 0.1, 0.0])
#: frame levels (dBFS, B43): speech, speech 10 dB down (above the floor, FADE_DB below the
#: loudest), and far below the floor; none sits on it
LOUD_DB, SOFT_DB, FADED_DB = -20.0, -30.0, -90.0
LEVELS = st.sampled_from([LOUD_DB, SOFT_DB, FADED_DB])


def _diff(got: list[Any], want: list[Any]) -> str:
    lines = ["outputs differ (sut | reference):"]
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else "-"
        w = want[i] if i < len(want) else "-"
        lines.append(f"{'  ' if g == w else '!!'} {g} | {w}")
    return "\n".join(lines)


class SessionMachine(RuleBasedStateMachine):
    """Drives `make_sut(...)` and a `ReferenceSession` in lockstep."""

    #: builds the session under test: (config, limits, profile, whether the ASR
    #: punctuates) -> session
    make_sut: Callable[[SessionConfig, Limits, str, bool], Any] = staticmethod(
        lambda config, limits, profile, punctuated: ReferenceSession(
            session_id="s1",
            config=config,
            limits=limits,
            profile=profile,
            now_ms=0,
            punctuated_transcripts=punctuated,
        )
    )

    items = Bundle("items")
    calls = Bundle("calls")
    responses = Bundle("responses")
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.n = 0
        self.obs = Observer()
        self.ref: ReferenceSession | None = None
        self.sut: Any = None

    # --- plumbing ----------------------------------------------------------------------

    def eid(self) -> str:
        self.n += 1
        return f"evt_{self.n}"

    @initialize(
        profile=st.sampled_from(["speech", "speech", "speech", "camera"]),
        vad=st.sampled_from(["off", "server", "semantic"]),
        auto=st.booleans(),
        delegation=st.sampled_from([True, True, True, False]),
        live=st.booleans(),
        tools=st.booleans(),
        punctuated=PUNCTUATED,
    )
    def start(
        self,
        profile: str,
        vad: str,
        auto: bool,
        delegation: bool,
        live: bool,
        tools: bool,
        punctuated: bool,
    ) -> None:
        server = VAD_LIVE if live else VAD
        detection = {"off": None, "server": server, "semantic": SEMANTIC}[vad]
        # the reference model has no preemptive response (B35): its wire is what a session
        # with one must produce, which tests/stateful/test_preemption_is_invisible.py holds
        config = SessionConfig(
            turn_detection=detection,
            auto_response=auto,
            preemptive_response=False,
            tools=validate_tools([WEATHER]) if tools else (),
        )
        self.ref = ReferenceSession(
            session_id="s1",
            config=config,
            limits=LIMITS,
            profile=profile,
            now_ms=0,
            delegation=delegation,
            # the ASR ends sentences with a mark (B32): the pause's words may then trail
            # off for want of one, or close a question (B44)
            punctuated_transcripts=punctuated,
        )
        self.sut = type(self).make_sut(config, LIMITS, profile, punctuated)
        self.sut.delegation = delegation  # a background model answers (3.6)
        # live transcripts (B33), as a runtime whose ASR offers them turns them on
        self.ref.live.enabled = self.sut.live.enabled = live
        self.settle()

    def settle(self, transcript_for: str | None = None) -> list[Any]:
        """Compare what both emitted; fire due deadlines the way a runtime would."""
        assert self.ref is not None
        got, want = self.sut.next_outputs(), self.ref.next_outputs()
        got_p, want_p = [project(o) for o in got], [project(o) for o in want]
        assert got_p == want_p, _diff(got_p, want_p)
        self.obs.feed(want, transcript_for=transcript_for)
        deadline = self.ref.next_deadline()
        got_deadline = self.sut.next_deadline()
        assert got_deadline == deadline, f"next_deadline: sut {got_deadline}, reference {deadline}"
        if deadline is not None and deadline <= self.now:
            self.sut.handle_timeout(self.now)
            self.ref.handle_timeout(self.now)
            want += self.settle()
        return want

    def client(self, event: Any) -> tuple[list[Any], RemoteProtocolError | None]:
        assert self.ref is not None
        before = copy.deepcopy(vars(self.ref))
        errors: list[RemoteProtocolError | None] = []
        for session in (self.sut, self.ref):
            try:
                session.receive(event, self.now)
            except RemoteProtocolError as exc:
                errors.append(exc)
            else:
                errors.append(None)
        got, want = errors
        assert (got is None) == (want is None), f"sut raised {got!r}, reference {want!r}"
        if got is not None and want is not None:
            assert (got.code, got.param, got.event_id) == (want.code, want.param, want.event_id), (
                f"rejection differs: sut {(got.code, got.param, got.event_id)}, "
                f"reference {(want.code, want.param, want.event_id)}"
            )
            assert self.sut.next_outputs() == [], "a rejected event emitted something"
            assert vars(self.ref) == before, "the reference changed on a rejection"
            assert project(self.sut.error_event(got)) == project(self.ref.error_event(want))
            return [], want
        return self.settle(), None

    def backend(self, result: Any, *, answered: str | None = None) -> list[Any]:
        assert self.ref is not None
        self.sut.backend_event(result, self.now)
        self.ref.backend_event(result, self.now)
        if answered is not None:
            self.obs.answered(answered)
        transcript_for = result.request_id if isinstance(result, AsrTranscript) else None
        return self.settle(transcript_for=transcript_for)

    # --- bundles: ids seen in the stream -----------------------------------------------

    @precondition(lambda self: bool(self.obs.new_items))
    @rule(target=items)
    def learn_items(self) -> Any:
        new, self.obs.new_items = self.obs.new_items, []
        return multiple(*new)

    @precondition(lambda self: bool(self.obs.new_calls))
    @rule(target=calls)
    def learn_calls(self) -> Any:
        new, self.obs.new_calls = self.obs.new_calls, []
        return multiple(*new)

    @precondition(lambda self: bool(self.obs.new_responses))
    @rule(target=responses)
    def learn_responses(self) -> Any:
        new, self.obs.new_responses = self.obs.new_responses, []
        return multiple(*new)

    @precondition(lambda self: bool(self.obs.new_requests))
    @rule(target=requests)
    def learn_requests(self) -> Any:
        new, self.obs.new_requests = self.obs.new_requests, []
        return multiple(*new)

    # --- client rules (no preconditions) -----------------------------------------------

    @rule(
        audio=st.one_of(st.none(), audio_payloads()),
        frames=st.one_of(GOOD_FRAMES, st.lists(FRAMES, max_size=3)),
        is_speech=st.sampled_from([None, None, True, False]),
        probability=st.sampled_from([None, None, 0.2, 0.8]),
        odd=st.sampled_from([None, None, None, {"format": "mp3"}, {"sample_rate_hz": 4000}]),
    )
    def append(
        self,
        audio: dict[str, Any] | None,
        frames: list[bytes],
        is_speech: bool | None,
        probability: float | None,
        odd: dict[str, Any] | None,
    ) -> None:
        kwargs: dict[str, Any] = dict(audio or {})
        kwargs.update(odd or {})
        self.client(
            InputAudioBufferAppend(
                event_id=self.eid(),
                video_frames=frames,
                is_speech=is_speech,
                speech_probability=probability,
                **kwargs,
            )
        )

    @rule(frames=st.integers(1, 2), ms=st.sampled_from([100, 400, 1000]))
    def append_large(self, frames: int, ms: int) -> None:
        """Big speech appends: backpressure becomes reachable."""
        self.client(
            InputAudioBufferAppend(
                event_id=self.eid(), audio=_loud(16 * ms), video_frames=[JPEG] * frames
            )
        )

    @rule(
        kind=st.sampled_from(["commit", "commit", "alias"]),
        create=st.sampled_from([None, True, False]),
        response_create=st.sampled_from([None, None, True, False]),
    )
    def commit(self, kind: str, create: bool | None, response_create: bool | None) -> None:
        cls = InputCommitAlias if kind == "alias" else InputAudioBufferCommit
        eid = self.eid()
        outs, exc = self.client(
            cls(event_id=eid, create_response=create, response_create=response_create)
        )
        # I3: exactly one committed carrying the event id, or exactly one error
        if self.obs.closed:
            assert outs == []
        elif exc is None:
            assert self.obs.commits_for(outs, eid) == 1, "I3: accepted commit not acknowledged once"
        else:
            assert exc.event_id == eid and self.obs.commits_for(outs, eid) == 0

    @rule()
    def clear(self) -> None:
        self.client(InputAudioBufferClear(event_id=self.eid()))

    @rule(
        role=st.sampled_from(["user", "user", "user", "assistant", "system"]),
        parts=st.lists(
            st.sampled_from(["text", "audio", "audio_transcript", "image"]), min_size=0, max_size=3
        ),
        with_id=st.booleans(),
    )
    def create_item(self, role: str, parts: list[str], with_id: bool) -> None:
        self.client(self._create(None if not with_id else f"c_{self.n}", role, parts))

    @rule(
        item_id=items,
        parts=st.lists(st.sampled_from(["text", "audio", "image"]), min_size=1, max_size=2),
    )
    def recreate_item(self, item_id: str, parts: list[str]) -> None:
        """A known id: refused while live, a new version once deleted (B5)."""
        self.client(self._create(item_id, "user", parts))

    def _create(self, item_id: str | None, role: str, parts: list[str]) -> ConversationItemCreate:
        url = "data:image/png;base64," + base64.b64encode(PNG).decode()
        table = {
            "text": ContentPart(type="input_text", text="what is this"),
            "audio": ContentPart(type="input_audio", audio=_loud(1600)),
            "audio_transcript": ContentPart(type="input_audio", transcript="hello"),
            "image": ContentPart(type="input_image", image_url=url),
        }
        item = ConversationItem(id=item_id, role=role, content=[table[p] for p in parts])
        return ConversationItemCreate(event_id=self.eid(), item=item)

    @rule(item_id=items)
    def delete_item(self, item_id: str) -> None:
        self.client(ConversationItemDelete(event_id=self.eid(), item_id=item_id))

    @rule(item_id=items)
    def retrieve_item(self, item_id: str) -> None:
        self.client(ConversationItemRetrieve(event_id=self.eid(), item_id=item_id))

    @rule(item_id=items, audio_end_ms=st.sampled_from([0, 50, 100, 5000]))
    def truncate_item(self, item_id: str, audio_end_ms: int) -> None:
        self.client(
            ConversationItemTruncate(
                event_id=self.eid(), item_id=item_id, audio_end_ms=audio_end_ms
            )
        )

    @rule(
        kind=st.sampled_from(["delete", "retrieve", "truncate"]),
        item_id=FOREIGN_ITEMS,
    )
    def foreign_item(self, kind: str, item_id: str) -> None:
        eid = self.eid()
        event: Any
        if kind == "delete":
            event = ConversationItemDelete(event_id=eid, item_id=item_id)
        elif kind == "retrieve":
            event = ConversationItemRetrieve(event_id=eid, item_id=item_id)
        else:
            event = ConversationItemTruncate(event_id=eid, item_id=item_id, audio_end_ms=0)
        self.client(event)

    @rule()
    def response_create(self) -> None:
        self.client(ResponseCreate(event_id=self.eid()))

    @rule(clear=st.booleans())
    def cancel(self, clear: bool) -> None:
        cls = OutputAudioBufferClear if clear else ResponseCancel
        self.client(cls(event_id=self.eid()))

    @rule(response_id=responses, clear=st.booleans())
    def cancel_named(self, response_id: str, clear: bool) -> None:
        cls = OutputAudioBufferClear if clear else ResponseCancel
        self.client(cls(event_id=self.eid(), response_id=response_id))

    @rule(response_id=FOREIGN_RESPONSES, clear=st.booleans())
    def cancel_foreign(self, response_id: str, clear: bool) -> None:
        cls = OutputAudioBufferClear if clear else ResponseCancel
        self.client(cls(event_id=self.eid(), response_id=response_id))

    @rule(
        response_id=responses,
        which=st.sampled_from(["none", "own", "own", "other"]),
        other=items,
        played=st.sampled_from([0.0, 40.0, 100.0, 250.0, 10_000.0]),
        alias=st.booleans(),
    )
    def ack(self, response_id: str, which: str, other: str, played: float, alias: bool) -> None:
        item_id = {
            "none": None,
            "own": self.obs.assistant_item.get(response_id, f"item_of_{response_id}"),
            "other": other,
        }[which]
        cls = AudioPlaybackAckAlias if alias else PlaybackAck
        self.client(
            cls(event_id=self.eid(), response_id=response_id, item_id=item_id, played_ms=played)
        )

    @rule(response_id=st.sampled_from([None, "resp_999"]), played=st.sampled_from([0.0, 10.0]))
    def ack_foreign(self, response_id: str | None, played: float) -> None:
        self.client(PlaybackAck(event_id=self.eid(), response_id=response_id, played_ms=played))

    @rule(patch=SESSION_PATCHES)
    def session_update(self, patch: SessionPatch) -> None:
        self.client(SessionUpdate(event_id=self.eid(), session=patch))

    @rule(kind=st.sampled_from(["heartbeat", "heartbeat", "resume", "event_ack", "close"]))
    def session_misc(self, kind: str) -> None:
        eid = self.eid()
        event: Any = {
            "heartbeat": SessionHeartbeat(event_id=eid),
            "resume": SessionResume(event_id=eid, session_id="s1"),
            "event_ack": SessionEventAck(event_id=eid, server_event_seq=1),
            "close": SessionClose(event_id=eid, reason="client_close"),
        }[kind]
        self.client(event)

    # --- backend rules (preconditions: only requests an effect opened) -----------------

    @precondition(lambda self: bool(self.obs.open_of("asr")))
    @rule(data=st.data(), text=st.sampled_from(["what is this", "", "look at the cup"]))
    def asr_transcript(self, data: st.DataObject, text: str) -> None:
        req = data.draw(st.sampled_from(self.obs.open_of("asr")))
        self.backend(AsrTranscript(request_id=req, text=text), answered=req)

    @precondition(lambda self: bool(self.obs.partials))
    @rule(text=st.sampled_from([None, "", "what", "what colour is", "What colour is this?"]))
    def asr_partial(self, text: str | None) -> None:
        # one out at most here: the 2 s buffer limit never reaches the 3 s cadence, so no
        # pause supersedes (test_session_vs_reference runs that case as a program)
        request_id = self.obs.partials.pop()
        self.obs.answered_partial(request_id, text)
        self.backend(AsrPartial(request_id=request_id, text=text))

    @precondition(lambda self: bool(self.obs.open_of("vlm")))
    @rule(
        data=st.data(),
        text=st.sampled_from(
            ["Hi. ", "It is a", " cup! ", "ok", "Why? No", "Well, it is red, ", "so - yes; "]
        ),
    )
    def vlm_delta(self, data: st.DataObject, text: str) -> None:
        req = data.draw(st.sampled_from(self.obs.open_of("vlm")))
        self.backend(VlmDelta(request_id=req, text=text))

    @precondition(lambda self: bool(self.obs.open_of("vlm")))
    @rule(
        data=st.data(),
        index=st.sampled_from([0, 0, 1]),
        name=st.sampled_from(["get_weather", "get_weather", "book_flight"]),
        delta=st.sampled_from(['{"city": ', '"Paris"}', "", "x" * MAX_FUNCTION_ARGUMENTS_BYTES]),
    )
    def vlm_call_delta(self, data: st.DataObject, index: int, name: str, delta: str) -> None:
        """A piece of a function call (B38): offered or not, past its bound or not."""
        req = data.draw(st.sampled_from(self.obs.open_of("vlm")))
        self.backend(VlmCallDelta(request_id=req, index=index, name=name, delta=delta))

    @rule(
        call_id=st.one_of(calls, st.sampled_from(["call_999", "mine"])),
        output=st.sampled_from(['{"sky": "sunny"}', ""]),
    )
    def function_output(self, call_id: str, output: str) -> None:
        """The client answers a call (B39): a known, answered, cut or unknown call id."""
        self.client(
            ConversationItemCreate(
                event_id=self.eid(),
                item=ConversationItem(type="function_call_output", call_id=call_id, output=output),
            )
        )

    @rule(
        call_id=st.sampled_from(["mine", "call_1", ""]),
        name=st.sampled_from(["get_weather", "bad name"]),
    )
    def function_call_item(self, call_id: str, name: str) -> None:
        """The client brings a call of its own as history (B39)."""
        self.client(
            ConversationItemCreate(
                event_id=self.eid(),
                item=ConversationItem(
                    type="function_call", call_id=call_id, name=name, arguments="{}"
                ),
            )
        )

    @precondition(lambda self: bool(self.obs.open_of("vlm")))
    @rule(
        data=st.data(),
        action=st.sampled_from(["speak", "speak", "listen", "delegate", "delegate"]),
        text=st.sampled_from(["", "Sure.", "Here it is. Done"]),
        question=st.sampled_from(["", "How far is the moon?", "How far is the moon?", "  "]),
    )
    def vlm_decision(self, data: st.DataObject, action: str, text: str, question: str) -> None:
        req = data.draw(st.sampled_from(self.obs.open_of("vlm")))
        self.backend(
            VlmDecisionResult(request_id=req, action=action, text=text, question=question),
            answered=req,
        )

    @precondition(lambda self: bool(self.obs.open_of("vlm")))
    @rule(data=st.data(), text=st.sampled_from(["", "Let me check."]))
    def vlm_delegates(self, data: st.DataObject, text: str) -> None:
        """A delegation with a question (3.6): its own rule, so answers get explored."""
        req = data.draw(st.sampled_from(self.obs.open_of("vlm")))
        decision = VlmDecisionResult(
            request_id=req, action="delegate", text=text, question="What is that?"
        )
        self.backend(decision, answered=req)

    @precondition(lambda self: bool(self.obs.delegations))
    @rule(
        data=st.data(),
        text=st.sampled_from(["About 384,000 km. It varies", "Yes.", "", "Far! "]),
        fail=st.sampled_from([False, False, True]),
    )
    def delegation_result(self, data: st.DataObject, text: str, fail: bool) -> None:
        req = data.draw(st.sampled_from(sorted(self.obs.delegations)))
        result: Any = (
            StageFailure(request_id=req, code=ErrorCode.STAGE_FAILED, message="HTTP 500")
            if fail
            else DelegationAnswer(request_id=req, text=text)
        )
        self.backend(result, answered=req)

    @precondition(lambda self: bool(self.obs.open_of("vlm")))
    @rule(data=st.data(), fail=st.booleans())
    def vlm_delegates_and_is_answered_at_once(self, data: st.DataObject, fail: bool) -> None:
        """The answer (or failure) comes while the note is still speaking: it waits for
        the slot (D32)."""
        req = data.draw(st.sampled_from(self.obs.open_of("vlm")))
        decision = VlmDecisionResult(
            request_id=req, action="delegate", text="Let me check.", question="Why?"
        )
        self.backend(decision, answered=req)
        for delegation in sorted(self.obs.delegations):
            result: Any = (
                StageFailure(request_id=delegation, code=ErrorCode.STAGE_FAILED, message="down")
                if fail
                else DelegationAnswer(request_id=delegation, text="Because. It is so.")
            )
            self.backend(result, answered=delegation)

    @precondition(lambda self: bool(self.obs.open_of("tts")))
    @rule(
        data=st.data(),
        ms=st.sampled_from([10, 40, 100, 300]),
        text=st.sampled_from(["", "Hi", " there."]),
    )
    def tts_audio(self, data: st.DataObject, ms: int, text: str) -> None:
        req = data.draw(st.sampled_from(self.obs.open_of("tts")))
        self.backend(TtsAudio(request_id=req, pcm16=bytes(48 * ms), text=text))

    @precondition(lambda self: bool(self.obs.open_of("tts")))
    @rule(data=st.data())
    def tts_done(self, data: st.DataObject) -> None:
        req = data.draw(st.sampled_from(self.obs.open_of("tts")))
        self.backend(TtsDone(request_id=req), answered=req)

    @precondition(lambda self: bool(self.obs.open))
    @rule(
        data=st.data(),
        code=st.sampled_from([ErrorCode.STAGE_FAILED, ErrorCode.ENGINE_ERROR]),
        may_have_accepted=st.booleans(),
        engine_dead=st.booleans(),
    )
    def stage_failure(
        self, data: st.DataObject, code: ErrorCode, may_have_accepted: bool, engine_dead: bool
    ) -> None:
        req = data.draw(st.sampled_from(sorted(self.obs.open)))
        self.backend(
            StageFailure(
                request_id=req,
                code=code,
                message="stage failed",
                may_have_accepted=may_have_accepted,
                engine_dead=engine_dead,
            ),
            answered=req,
        )

    @rule(
        request_id=requests,
        kind=st.sampled_from(["asr", "delta", "decision", "audio", "done", "fail", "answer"]),
    )
    def stale_result(self, request_id: str, kind: str) -> None:
        """Any result for any request ever opened: dropped unless still open."""
        if request_id in self.obs.open or request_id in self.obs.delegations:
            return  # the rules above cover open requests
        result: Any = {
            "asr": AsrTranscript(request_id=request_id, text="late"),
            "delta": VlmDelta(request_id=request_id, text="Late. "),
            "decision": VlmDecisionResult(request_id=request_id, action="speak", text="Late."),
            "audio": TtsAudio(request_id=request_id, pcm16=bytes(480)),
            "done": TtsDone(request_id=request_id),
            "fail": StageFailure(
                request_id=request_id, code=ErrorCode.ENGINE_ERROR, message="late"
            ),
            "answer": DelegationAnswer(request_id=request_id, text="Late."),
        }[kind]
        self.backend(result)

    @precondition(lambda self: self.obs.vad_on and self.obs.vad_frames_available() > 0)
    @rule(
        data=st.data(),
        shape=st.sampled_from(["speech", "silence", "burst", "fade", "random"]),
    )
    def vad_scores(self, data: st.DataObject, shape: str) -> None:
        available = min(self.obs.vad_frames_available(), 24)
        n = data.draw(st.integers(1, available))
        levels: list[float] = []
        if shape == "fade":
            # speech whose energy falls (B43): loud frames, then frames far below the
            # floor that Silero's lag still scores speech, perhaps speech again after
            loud = data.draw(st.integers(0, n))
            scores = [0.95] * n
            levels = [LOUD_DB] * loud + [FADED_DB] * (n - loud)
        elif shape == "speech":
            scores = [0.95] * n
        elif shape == "silence":
            scores = [0.02] * n
        elif shape == "burst":
            high = data.draw(st.integers(0, n))
            scores = [0.95] * high + [0.02] * (n - high)
        else:
            scores = data.draw(st.lists(SCORES, min_size=n, max_size=n))
            if data.draw(st.booleans()):
                levels = data.draw(st.lists(LEVELS, min_size=n, max_size=n))
        self.obs.scored(n)
        asked = len(self.obs.turn_ends)
        self.backend(VadScores(tuple(scores), tuple(levels)))
        if len(self.obs.turn_ends) > asked and data.draw(st.booleans()):
            # a semantic VAD pause went under review: its verdict often comes at once
            probability = data.draw(VERDICTS)
            self.backend(_verdict(data, self.obs.turn_ends[-1], probability))

    def _in_semantic_speech(self) -> bool:
        ref = self.ref
        td = ref.config.turn_detection if ref is not None else None
        return (
            ref is not None
            and td is not None
            and td.type == "semantic_vad"
            and ref.vad.state == "speech"
            and self.obs.vad_frames_available() >= 7
        )

    @precondition(lambda self: self._in_semantic_speech())
    @rule(data=st.data())
    def semantic_pause(self, data: st.DataObject) -> None:
        """Semantic VAD speech, then a pause long enough for review (7 quiet frames), and
        often its verdict at once: the review, held and resumed states are reached."""
        asked = len(self.obs.turn_ends)
        self.obs.scored(7)
        self.backend(VadScores((0.02,) * 7))
        if len(self.obs.turn_ends) > asked and data.draw(st.booleans()):
            probability = data.draw(VERDICTS)
            self.backend(_verdict(data, self.obs.turn_ends[-1], probability))

    def _live_vad(self) -> bool:
        ref = self.ref
        return (
            ref is not None
            and not self.obs.closed
            and ref.live.enabled
            and ref.config.turn_detection is not None
        )

    def _scores(self, *probabilities: float) -> list[Any]:
        """Score as many of these frames as the appended audio allows."""
        n = min(len(probabilities), self.obs.vad_frames_available())
        if n == 0:
            return []
        self.obs.scored(n)
        return self.backend(VadScores(tuple(probabilities[:n])))

    def _answer_partial(self, text: str | None) -> None:
        if self.obs.partials:
            request_id = self.obs.partials.pop()
            self.obs.answered_partial(request_id, text)
            self.backend(AsrPartial(request_id=request_id, text=text))

    @precondition(lambda self: self._live_vad())
    @rule(
        data=st.data(),
        words=st.sampled_from([None, "What colour is this?", "Is it bigger than", "my"]),
        when=st.sampled_from(["before", "before", "after", "never"]),
        wait_ms=st.sampled_from([0, 500, 1990, 2000, 2500]),
    )
    def live_pause(self, data: st.DataObject, words: str | None, when: str, wait_ms: int) -> None:
        """Speech, then a pause with its live partial (5.2), whose words come before or
        after what the pause leads to, or never: under server VAD the turn ends in that
        pause, so its commit holds the audio the partial heard and takes its words; under
        semantic VAD the pause is reviewed, and a verdict without words waits for them at
        most its budget (5.1)."""
        self.client(InputAudioBufferAppend(event_id=self.eid(), audio=_loud(16 * 1200)))
        assert self.ref is not None
        semantic = self.ref.config.turn_detection is not None and (
            self.ref.config.turn_detection.type == "semantic_vad"
        )
        asked = len(self.obs.turn_ends)
        self._scores(0.95, 0.95, 0.95)
        self._scores(*([0.02] * 7))  # the pause: its partial (and, semantic, its review)
        if when == "before":
            self._answer_partial(words)
        if semantic and len(self.obs.turn_ends) > asked:
            verdict = TurnEndVerdict(self.obs.turn_ends[-1], data.draw(VERDICTS))
            self.backend(verdict)
            self.now += wait_ms
            self.sut.handle_timeout(self.now)
            self.ref.handle_timeout(self.now)
            self.settle()
        else:
            self._scores(*([0.02] * 16))  # the turn ends in the pause
        if when == "after":
            self._answer_partial(words)

    @precondition(lambda self: bool(self.obs.turn_ends))
    @rule(
        data=st.data(),
        probability=VERDICTS,
        latest=st.booleans(),
    )
    def turn_end_verdict(
        self, data: st.DataObject, probability: float | None, latest: bool
    ) -> None:
        """An end-of-turn verdict: for the latest request (usually), else any earlier one
        (stale: dropped)."""
        requests = self.obs.turn_ends
        request_id = requests[-1] if latest else data.draw(st.sampled_from(requests))
        self.backend(_verdict(data, request_id, probability))

    # --- the clock ---------------------------------------------------------------------

    @rule(ms=st.sampled_from([1, 30, 400, 1100, 2500, 4000]))
    def advance_clock(self, ms: int) -> None:
        assert self.ref is not None
        self.now += ms
        self.sut.handle_timeout(self.now)
        self.ref.handle_timeout(self.now)
        self.settle()

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def reference_invariants_hold(self) -> None:
        if self.ref is not None:
            assert self.ref.invariant_violations() == []
            # I1 as the stream shows it, and the active response agrees with the model
            active = self.ref.active.id if self.ref.active is not None else None
            assert self.obs.active == active

    def teardown(self) -> None:
        if self.ref is not None:
            self.obs.teardown()
