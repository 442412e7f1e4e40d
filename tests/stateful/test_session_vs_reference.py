"""`core.session.SessionProtocol` against the independent reference model, step by step.

The state machine lives in `tests.stateful.machine`; this module plugs the real session
in. It skips cleanly until `core.session` exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings

from spec.limits import Limits
from spec.session_config import SessionConfig
from tests.stateful.machine import SessionMachine

session = pytest.importorskip("core.session")


def _make_sut(config: SessionConfig, limits: Limits, profile: str, punctuated: bool = False) -> Any:
    return session.SessionProtocol(
        session_id="s1",
        config=config,
        limits=limits,
        profile=profile,
        now_ms=0,
        punctuated_transcripts=punctuated,
    )


class SessionVsReference(SessionMachine):
    make_sut = staticmethod(_make_sut)


TestSessionVsReference = SessionVsReference.TestCase
# more programs than the profile's default (ci: 800, about 30 s while they agree), capped
# for the long profiles
TestSessionVsReference.settings = settings(
    settings(), max_examples=min(settings().max_examples * 8, 2000)
)


def _live_lockstep(
    config: SessionConfig, limits: Limits, *, punctuated: bool = False
) -> tuple[Any, Callable[[Any], list]]:
    """The session and the reference model with live transcripts on (`punctuated`: from an
    ASR that ends sentences with a mark), and a step that feeds both one event (a
    client's, else a backend result) and checks they agree; it returns what the model
    emitted."""
    from spec.events.base import ClientEvent
    from spec.reference.session import ReferenceSession
    from tests.stateful.observer import project

    ref = ReferenceSession(
        session_id="s1",
        config=config,
        limits=limits,
        profile="speech",
        punctuated_transcripts=punctuated,
    )
    sut = _make_sut(config, limits, "speech", punctuated)
    ref.live.enabled = sut.live.enabled = True

    def step(event: Any) -> list[Any]:
        for s in (sut, ref):
            if isinstance(event, ClientEvent):
                s.receive(event, 0)
            else:
                s.backend_event(event, 0)
        got, want = sut.next_outputs(), ref.next_outputs()
        assert [project(o) for o in got] == [project(o) for o in want]
        return want

    return sut, step


def test_live_transcripts_agree_step_by_step_on_a_spoken_turn_with_pauses() -> None:
    """The exploration rarely answers a partial before its utterance ends; this program
    does, in every way (a delta, a revision, a failure, a late answer that becomes the
    commit's transcript), in lockstep."""
    from spec.events import InputAudioBufferAppend
    from spec.stage_results import AsrPartial, VadScores
    from tests.stateful.machine import LIMITS, VAD_LIVE

    _, step = _live_lockstep(
        SessionConfig(turn_detection=VAD_LIVE, preemptive_response=False), LIMITS
    )

    step(InputAudioBufferAppend(audio=b"\x10\x00" * 16_000 * 2))
    hi, lo = (0.95,), (0.02,)
    [partial] = [o for o in step(VadScores(hi * 6 + lo * 7)) if hasattr(o, "pcm16")]
    assert [type(o).__name__ for o in step(AsrPartial(partial.request_id, "what"))] == [
        "InputAudioTranscriptionDelta"
    ]
    [second] = [o for o in step(VadScores(hi * 4 + lo * 7)) if hasattr(o, "pcm16")]
    assert step(AsrPartial(second.request_id, "What colour")) != []  # " colour"
    [third] = [o for o in step(VadScores(hi * 3 + lo * 7)) if hasattr(o, "pcm16")]
    assert step(AsrPartial(third.request_id, None)) == []  # failed: nothing
    [fourth] = [o for o in step(VadScores(hi * 3 + lo * 7)) if hasattr(o, "pcm16")]
    step(VadScores(lo * 15))  # the turn ends before the partial answers: no more live
    # text, but the commit holds the audio it heard, so its words are the transcript
    late = step(AsrPartial(fourth.request_id, "What colour is this"))
    assert [type(o).__name__ for o in late][:1] == ["InputAudioTranscriptionCompleted"]


@pytest.mark.parametrize("first", ["pause", "cadence"])
@pytest.mark.parametrize("detector", ["server", "semantic"])
def test_a_pause_superseding_a_cadence_partial_agrees_step_by_step(
    detector: str, first: str
) -> None:
    """The exploration's buffer limit (2 s) never lets speech reach the 3 s cadence; this
    program does, with room for 5 s: a cadence partial, a pause while it is out (its own
    partial supersedes it and, under semantic VAD, the review names it), the two answered
    in either order (the superseded one is dropped), then the turn goes on, in lockstep."""
    import msgspec

    from spec.effects import LIVE_CADENCE_MS, SubmitPartialAsr, SubmitTurnEnd
    from spec.events import InputAudioBufferAppend
    from spec.stage_results import AsrPartial, VadScores
    from tests.stateful.machine import LIMITS, SEMANTIC, VAD_LIVE

    limits = msgspec.structs.replace(LIMITS, max_pending_input_bytes=200_000)
    config = SessionConfig(
        turn_detection=VAD_LIVE if detector == "server" else SEMANTIC, preemptive_response=False
    )
    sut, step = _live_lockstep(config, limits)

    hi, lo = (0.95,), (0.02,)
    cadence = LIVE_CADENCE_MS // 32 + 1  # frames
    step(InputAudioBufferAppend(audio=b"\x10\x00" * 16_000 * 5))
    [ticked] = [o for o in step(VadScores(hi * (cadence + 3))) if isinstance(o, SubmitPartialAsr)]
    out = step(VadScores(lo * 7))  # a pause while the cadence partial is out
    [pause] = [o for o in out if isinstance(o, SubmitPartialAsr)]
    reviews = [o.partial_request_id for o in out if isinstance(o, SubmitTurnEnd)]
    assert reviews == ([pause.request_id] if detector == "semantic" else [])
    texts = {pause.request_id: "I want to know", ticked.request_id: "I want"}
    order = (pause, ticked) if first == "pause" else (ticked, pause)
    sent = [step(AsrPartial(p.request_id, texts[p.request_id])) for p in order]
    assert [o.delta for out in sent for o in out if hasattr(o, "delta")] == ["I want to know"]
    step(VadScores(hi * 4 + lo * 7))  # speech again, and a pause with nothing out
    assert sut.live.in_flight is not None and sut.live.in_flight[2]


@pytest.mark.parametrize("detector", ["server", "semantic"])
def test_b43_a_fade_a_dip_and_the_pause_after_agree_step_by_step(detector: str) -> None:
    """The pause's onset by energy (B43): loud speech, a dip far below the floor that
    Silero still scores speech (its partial asked there), speech again, then the fade
    that ends the utterance, its words, Silero's pause and the turn's end, in lockstep."""
    from spec.effects import SubmitPartialAsr, SubmitTurnEnd
    from spec.events import InputAudioBufferAppend
    from spec.stage_results import AsrPartial, TurnEndVerdict, VadScores
    from tests.stateful.machine import FADED_DB, LIMITS, LOUD_DB, SEMANTIC, VAD_LIVE

    config = SessionConfig(
        turn_detection=VAD_LIVE if detector == "server" else SEMANTIC, preemptive_response=False
    )
    _, step = _live_lockstep(config, LIMITS)
    hi, lo = 0.95, 0.02
    step(InputAudioBufferAppend(audio=b"\x10\x00" * 30_000))  # 1.9 s
    step(VadScores((hi,) * 8, (LOUD_DB,) * 8))
    dipped = step(VadScores((hi,) * 2, (FADED_DB,) * 2))  # Silero's lag: still speech
    [dip] = [o for o in dipped if isinstance(o, SubmitPartialAsr)]
    step(VadScores((hi,) * 6, (LOUD_DB,) * 6))  # speech again: the dip's words are stale
    step(AsrPartial(dip.request_id, "what"))
    [fade] = [o for o in step(VadScores((hi,), (FADED_DB,))) if isinstance(o, SubmitPartialAsr)]
    step(AsrPartial(fade.request_id, "what colour is this"))
    out = step(VadScores((hi,) * 2 + (lo,) * 8, (FADED_DB,) * 10))
    for review in [o for o in out if isinstance(o, SubmitTurnEnd)]:
        assert review.partial_request_id == fade.request_id
        step(TurnEndVerdict(review.request_id, 0.95))
    step(VadScores((lo,) * 10, (FADED_DB,) * 10))


@pytest.mark.parametrize("punctuated", [True, False], ids=["punctuated", "unpunctuated"])
def test_b44_a_question_the_words_close_agrees_step_by_step(punctuated: bool) -> None:
    """A question the words close (B44) under eagerness high: the pause's words "Is it
    red?" with a held verdict at 64 ms, speech again inside 200 ms (a comma), then a
    verdict that waits for its words, which close the question, and the turn's end at
    200 ms, in lockstep; from an ASR that never punctuates the same words finish nothing."""
    from spec.effects import SubmitPartialAsr, SubmitTurnEnd
    from spec.events import InputAudioBufferAppend
    from spec.stage_results import AsrPartial, TurnEndVerdict, VadScores
    from tests.stateful.machine import LIMITS, SEMANTIC

    assert SEMANTIC.eagerness == "high"
    config = SessionConfig(turn_detection=SEMANTIC, preemptive_response=False)
    _, step = _live_lockstep(config, LIMITS, punctuated=punctuated)
    hi, lo = 0.95, 0.02
    step(InputAudioBufferAppend(audio=b"\x10\x00" * 30_000))  # 1.9 s
    step(VadScores((hi,) * 6))

    def pause() -> tuple[SubmitTurnEnd, SubmitPartialAsr]:
        out = step(VadScores((lo,) * 2))  # 64 ms: the pause's partial and its review
        [review] = [o for o in out if isinstance(o, SubmitTurnEnd)]
        [partial] = [o for o in out if isinstance(o, SubmitPartialAsr)]
        return review, partial

    review, partial = pause()
    step(AsrPartial(partial.request_id, "Is it red?"))
    step(TurnEndVerdict(review.request_id, 0.03))
    step(VadScores((lo,) * 3))  # 160 ms
    step(VadScores((hi,) * 4))  # "Or more orange?": the question was a comma
    review, partial = pause()
    assert step(TurnEndVerdict(review.request_id, 0.03)) == []  # waits for the words
    step(AsrPartial(partial.request_id, "Is it red? Or more orange?"))
    out = step(VadScores((lo,) * 5))  # 224 ms
    stopped = [o for o in out if type(o).__name__ == "InputAudioBufferSpeechStopped"]
    assert bool(stopped) is punctuated
    step(VadScores((lo,) * 10))


@pytest.mark.parametrize("answered", ["before", "after"])
def test_b41_a_push_to_talk_hold_with_live_text_agrees_step_by_step(answered: str) -> None:
    """Manual turns with live transcripts (B41): a hold's first speech names its item, a
    quiet append asks the pause's partial, speech and a second pause ask another, and the
    release takes the last one's words (answered before or after it), in lockstep; then a
    second hold whose speech outruns its partial does not take its words."""
    from spec.effects import SubmitPartialAsr
    from spec.events import InputAudioBufferAppend, InputAudioBufferCommit
    from spec.stage_results import AsrPartial
    from tests.conformance.harness import quiet_pcm, speech_pcm
    from tests.stateful.machine import LIMITS

    _, step = _live_lockstep(SessionConfig(turn_detection=None, preemptive_response=False), LIMITS)

    def append(pcm: bytes) -> list[Any]:
        return step(InputAudioBufferAppend(audio=pcm))

    append(quiet_pcm(100))  # idle pre-roll before the hold's speech
    append(speech_pcm(300))
    [first] = [o for o in append(quiet_pcm(40)) if isinstance(o, SubmitPartialAsr)]
    assert step(AsrPartial(first.request_id, "what")) != []  # a delta
    append(speech_pcm(200))
    [second] = [o for o in append(quiet_pcm(40)) if isinstance(o, SubmitPartialAsr)]
    append(quiet_pcm(60))
    if answered == "before":
        step(AsrPartial(second.request_id, "what colour"))
    out = step(InputAudioBufferCommit(create_response=True))
    if answered == "after":
        out = step(AsrPartial(second.request_id, "what colour"))
    assert "InputAudioTranscriptionCompleted" in [type(o).__name__ for o in out]
    append(speech_pcm(300))
    [third] = [o for o in append(quiet_pcm(40)) if isinstance(o, SubmitPartialAsr)]
    append(speech_pcm(100))
    step(InputAudioBufferCommit(create_response=True))  # queued behind the first reply
    assert step(AsrPartial(third.request_id, "late")) == []  # heard only a part of it


def test_audio_of_a_later_tts_request_arriving_first_is_spaced_alike() -> None:
    """A program hypothesis found: two sentences, the second's audio arrives before the
    first's; core and model must space the transcript deltas the same way."""
    from spec.events import InputAudioBufferAppend, ResponseCreate
    from spec.reference.session import ReferenceSession
    from spec.stage_results import TtsAudio, VlmDelta
    from tests.stateful.machine import JPEG, LIMITS
    from tests.stateful.observer import project

    deltas = []
    for make in (ReferenceSession, session.SessionProtocol):
        s = make(session_id="s1", config=SessionConfig(), limits=LIMITS, now_ms=0)
        s.receive(InputAudioBufferAppend(video_frames=[JPEG]), 0)
        s.receive(ResponseCreate(), 0)
        s.backend_event(VlmDelta("resp_1:vlm:1", "Hi. "), 0)
        s.backend_event(VlmDelta("resp_1:vlm:1", "Hi. "), 0)
        s.backend_event(TtsAudio("resp_1:tts:2", bytes(480), "Hi"), 0)
        s.backend_event(TtsAudio("resp_1:tts:1", bytes(480), "Hi"), 0)
        out = [project(o) for o in s.next_outputs()]
        deltas.append([o for o in out if o[0] == "response.output_audio_transcript.delta"])
    assert deltas[0] == deltas[1]
    assert [dict(o[2:])["delta"] for o in deltas[0]] == ["Hi", " Hi"]


@pytest.mark.parametrize("languages", [("en",), ("en", "de"), None, ()])
def test_the_asr_languages_and_a_refused_pin_agree_with_the_reference_model(
    languages: tuple[str, ...] | None,
) -> None:
    """The exploration runs with an ASR that detects any language; the languages a
    backend names reach `session.created`, and refuse a pin, alike in core and model."""
    from spec.errors import RemoteProtocolError
    from spec.events import SessionPatch, SessionUpdate
    from spec.reference.session import ReferenceSession
    from tests.stateful.machine import LIMITS
    from tests.stateful.observer import project

    runs = []
    for make in (ReferenceSession, session.SessionProtocol):
        s = make(session_id="s1", limits=LIMITS, now_ms=0, input_languages=languages)
        out = [project(o) for o in s.next_outputs()]
        for n, language in enumerate(["fr", "EN-us", None], 1):
            patch = SessionPatch(input_audio_transcription={"language": language})
            try:
                s.receive(SessionUpdate(event_id=f"evt_{n}", session=patch), n)
            except RemoteProtocolError as exc:
                out.append(project(s.error_event(exc)))
            out += [project(o) for o in s.next_outputs()]
        runs.append((out, s.config.transcription_language))
    assert runs[0] == runs[1]
    refused = [o for o in runs[0][0] if o[0] == "error"]
    assert len(refused) == (1 if languages else 0)


class _NoVerdict:
    """A `data` whose every draw is None: the pause's review gives no verdict."""

    def draw(self, strategy: Any) -> None:
        return None


def test_a_refused_response_create_leaves_the_turn_time_of_a_pause_that_ends_later() -> None:
    """Found by the exploration: a `response.create` refused during a semantic pause set
    the session's turn clock, so the turn a later timeout ended was stamped with the
    refused event's time (a refused event changes nothing, D30)."""
    machine = SessionVsReference()
    machine.start(
        profile="speech",
        vad="semantic",
        auto=False,
        delegation=True,
        live=True,
        tools=False,
        punctuated=False,
    )
    machine.live_pause(
        data=_NoVerdict(),  # type: ignore[arg-type]
        wait_ms=0,
        when="before",
        words="What colour is this?",
    )
    machine.advance_clock(ms=1)
    machine.response_create()  # refused: nothing is queued yet
    machine.advance_clock(ms=400)  # the pause ends: its turn keeps the time of the last event
    machine.teardown()


def _refused_alike(events: list[Any]) -> list[tuple[Any, ...]]:
    """Feed `events` to core and to the model, each refusal as its `error` event; assert
    they emit the same and return it."""
    from spec.errors import RemoteProtocolError
    from spec.reference.session import ReferenceSession
    from tests.stateful.machine import LIMITS
    from tests.stateful.observer import project

    runs = []
    for make in (ReferenceSession, session.SessionProtocol):
        s = make(session_id="s1", config=SessionConfig(), limits=LIMITS, now_ms=0)
        out = [project(o) for o in s.next_outputs()]
        for n, event in enumerate(events, 1):
            try:
                s.receive(event, n)
            except RemoteProtocolError as exc:
                out.append(project(s.error_event(exc)))
            out += [project(o) for o in s.next_outputs()]
        runs.append(out)
    assert runs[0] == runs[1]
    return runs[0]


def _error(projected: tuple[Any, ...]) -> tuple[str, str]:
    """(code, param) of a projected `error` event."""
    [(_, code, param, _)] = [f for f in projected[2:] if f[0] == "error"]
    return code, param


_IMAGE_TOO_BIG = "x" * 300


@pytest.mark.parametrize(
    ("item", "code", "param"),
    [
        ({"type": "web_search"}, "bad_event", "item.type"),
        ({"content": [{"type": "input_text", "text": "a"}] * 65}, "bad_event", "item.content"),
        ({"content": [{"type": "input_text"}]}, "bad_event", "item.content[0].text"),
        (
            {"content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]},
            "invalid_image",
            "item.content[0].image_url",
        ),
        (
            {"content": [{"type": "input_image", "image_url": "data:image/png;base64,%%%"}]},
            "invalid_image",
            "item.content[0].image_url",
        ),
        (
            {"type": "function_call", "call_id": "c1", "name": "f", "content": [{"type": "x"}]},
            "bad_event",
            "item.content",
        ),
        ({"type": "function_call_output", "call_id": "c1"}, "bad_event", "item.output"),
        (
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "[" * 70_000},
            "bad_event",
            "item.arguments",
        ),
    ],
    ids=[
        "not-a-message",
        "too-many-parts",
        "text-part-without-text",
        "image-not-a-data-url",
        "image-not-base64",
        "call-with-content",
        "output-without-output",
        "arguments-too-long",
    ],
)
def test_a_bad_item_gets_the_same_typed_error_from_core_and_the_reference_model(
    item: dict[str, Any], code: str, param: str
) -> None:
    """`conversation.item.create` with an item the session cannot take is refused with the
    same code and param by core and the model, and changes nothing."""
    import msgspec

    from spec.events import ConversationItem, ConversationItemCreate

    wire = msgspec.convert(item, ConversationItem)
    out = _refused_alike([ConversationItemCreate(event_id="evt_1", item=wire)])
    assert [o[0] for o in out] == ["session.created", "error"]
    assert _error(out[1]) == (code, param)


def test_a_function_call_reusing_a_live_item_id_is_refused_alike() -> None:
    """A client's `function_call` item whose id names an item already in the history is
    refused `bad_event` at `item.id` by core and the model, and the first item stays."""
    from spec.events import ContentPart, ConversationItem, ConversationItemCreate

    first = ConversationItem(id="item_a", content=[ContentPart(type="input_text", text="hi")])
    call = ConversationItem(id="item_a", type="function_call", call_id="c1", name="f")
    out = _refused_alike(
        [
            ConversationItemCreate(event_id="evt_1", item=first),
            ConversationItemCreate(event_id="evt_2", item=call),
        ]
    )
    assert _error(out[-1]) == ("bad_event", "item.id")
    assert [o[0] for o in out].count("conversation.item.added") == 1


@pytest.mark.parametrize(
    "fmt", ["g711_alaw", "alaw", "audio/pcma", {"type": "audio/pcma", "rate": 8_000}]
)
def test_a_g711_alaw_append_is_converted_alike_by_core_and_the_reference_model(
    fmt: Any,
) -> None:
    """An append in G.711 A-law (named by any of its spellings, or as a format object with
    its rate) is decoded and resampled the same by core and the model: the same speech,
    so the same commit and transcript request, of 16 kHz audio."""
    import msgspec

    from spec.effects import SubmitAsr
    from spec.events import AudioFormat, InputAudioBufferAppend, InputAudioBufferCommit
    from tests.stateful.machine import LIMITS

    alaw = bytes([0xAA] * 4 + [0x2A] * 4) * 128  # 128 ms of a loud 1 kHz square at 8 kHz
    fmt = fmt if isinstance(fmt, str) else msgspec.convert(fmt, AudioFormat)
    _, step = _live_lockstep(SessionConfig(turn_detection=None), LIMITS)
    step(InputAudioBufferAppend(audio=alaw, format=fmt))
    out = step(InputAudioBufferCommit(create_response=True))
    [asr] = [o for o in out if isinstance(o, SubmitAsr)]
    assert len(asr.pcm16) == 128 * 16 * 2  # 128 ms at 16 kHz, pcm16


@pytest.mark.parametrize("name", ["audio/pcma", "audio/pcmu"])
def test_d2_a_g711_format_object_without_a_rate_is_8_khz_as_a_named_format(name: str) -> None:
    """Found by the comparison: an append whose `format` is an object naming G.711 without
    a rate was read at the session's input rate by core (16 kHz, half the audio's length),
    where a format named by a string, the model and the session validator take 8 kHz
    (decision D2)."""
    from spec.effects import SubmitAsr
    from spec.events import AudioFormat, InputAudioBufferAppend, InputAudioBufferCommit
    from tests.stateful.machine import LIMITS

    loud = (
        bytes([0xAA] * 4 + [0x2A] * 4) if name == "audio/pcma" else bytes([0x80] * 4 + [0x00] * 4)
    )
    _, step = _live_lockstep(SessionConfig(turn_detection=None), LIMITS)
    step(InputAudioBufferAppend(audio=loud * 128, format=AudioFormat(type=name)))
    out = step(InputAudioBufferCommit(create_response=True))
    [asr] = [o for o in out if isinstance(o, SubmitAsr)]
    assert len(asr.pcm16) == 128 * 16 * 2  # 128 ms of 8 kHz audio, at 16 kHz
