"""The scripted backend follows its Script: answers, parking, failures, death, aborts, VAD."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import anyio
import numpy as np
import pytest

from backends.base import (
    AsrRequest,
    Backend,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    EngineDead,
    InvalidPromptContext,
    PromptContext,
    Stage,
    StageFailed,
    SubmissionFailed,
    TtsAudio,
    TtsRequest,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.registry import load_backend
from backends.scripted.backend import DESCRIPTION, create_backend, script_of
from backends.scripted.script import FaultStep, Script
from backends.scripted.stages import (
    SILENCE_PROBABILITY,
    SPEECH_PROBABILITY,
    ScriptedAsr,
    ScriptedTts,
    ScriptedVlm,
    word_pieces,
)

ALL_ERRORS = [StageFailed, SubmissionFailed, EngineDead, BackendTimeout, InvalidPromptContext]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    script = Script(latency={"vad": 0.0, "asr": 0.0, "vlm": 0.0, "tts": 0.0})
    async with create_backend(script=script) as entered:
        await entered.warmup()
        yield entered


def _asr(backend: Backend) -> ScriptedAsr:
    assert isinstance(backend.asr, ScriptedAsr)
    return backend.asr


def _vlm(backend: Backend) -> ScriptedVlm:
    assert isinstance(backend.vlm, ScriptedVlm)
    return backend.vlm


def _tts(backend: Backend) -> ScriptedTts:
    assert isinstance(backend.tts, ScriptedTts)
    return backend.tts


def _utterance(request_id: str = "resp_1:asr:1") -> AsrRequest:
    return AsrRequest(request_id, np.zeros(1600, dtype=np.float32))


def _turn(transcript: str | None = None, request_id: str = "resp_1:vlm:1") -> VlmRequest:
    return VlmRequest(request_id, PromptContext(system="be brief", transcript=transcript))


async def _reply(backend: Backend, request: VlmRequest) -> list[VlmDelta | VlmDecisionResult]:
    return [item async for item in _vlm(backend).generate(request)]


async def _speech(backend: Backend, request: TtsRequest) -> list[TtsAudio]:
    return [chunk async for chunk in _tts(backend).synthesize(request)]


# --- construction ----------------------------------------------------------------------


def test_registry_builds_scripted_backend_with_all_stages() -> None:
    backend = load_backend("scripted")
    assert backend.name == "scripted"
    assert backend.description == DESCRIPTION
    assert all(isinstance(stage, Stage) for stage in backend.stages())
    assert [stage.name for stage in backend.stages()] == ["vad", "asr", "vlm", "tts", "turn_end"]
    assert script_of(backend) is _vlm(backend).script is _tts(backend).script


def test_camera_profile_has_no_asr_stage() -> None:
    assert create_backend(profile="camera").asr is None


def test_scripted_asr_knows_the_languages_the_script_names() -> None:
    backend = create_backend()
    assert _asr(backend).languages is None  # by default it detects any
    script_of(backend).asr_languages = ("en",)
    assert _asr(backend).languages == ("en",)


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(BackendUnavailable):
        create_backend(profile="radio")


@pytest.mark.anyio
async def test_stage_used_before_entering_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable):
        await _asr(create_backend()).transcribe(_utterance())


@pytest.mark.anyio
async def test_warmup_consumes_no_scripted_answer(backend: Backend) -> None:
    script = script_of(backend)
    assert script.warmed_up == {"vad", "asr", "vlm", "tts", "turn_end"}
    assert script.requests == []


# --- answers ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_transcripts_are_answered_in_order_then_the_default(backend: Backend) -> None:
    script_of(backend).say("hello there", "second")
    texts = [(await _asr(backend).transcribe(_utterance(f"r:asr:{i}"))).text for i in range(3)]
    assert texts == ["hello there", "second", "scripted transcript"]


@pytest.mark.anyio
async def test_reply_streams_word_deltas_then_one_decision_with_the_whole_text(
    backend: Backend,
) -> None:
    script_of(backend).reply("It is a red cup.")
    items = await _reply(backend, _turn("what is it?"))
    deltas = [item.text for item in items if isinstance(item, VlmDelta)]
    assert deltas == ["It", " is", " a", " red", " cup."]
    assert items[-1] == VlmDecisionResult("resp_1:vlm:1", VlmAction.SPEAK, "It is a red cup.")


@pytest.mark.anyio
async def test_empty_reply_queue_echoes_the_transcript(backend: Backend) -> None:
    with_transcript = await _reply(backend, _turn("turn on the light."))
    without = await _reply(backend, _turn(None))
    assert with_transcript[-1] == VlmDecisionResult(
        "resp_1:vlm:1", VlmAction.SPEAK, "I hear you: turn on the light."
    )
    assert without[-1] == VlmDecisionResult("resp_1:vlm:1", VlmAction.SPEAK, "I hear you.")


@pytest.mark.anyio
async def test_silence_decision_streams_no_text(backend: Backend) -> None:
    script_of(backend).stay_silent()
    assert await _reply(backend, _turn("hmm")) == [
        VlmDecisionResult("resp_1:vlm:1", VlmAction.LISTEN, "")
    ]


@pytest.mark.anyio
async def test_delegate_reply_carries_its_question(backend: Backend) -> None:
    script_of(backend).reply("Let me check.", action=VlmAction.DELEGATE, question="weather?")
    items = await _reply(backend, _turn("weather"))
    assert items[-1] == VlmDecisionResult(
        "resp_1:vlm:1", VlmAction.DELEGATE, "Let me check.", "weather?"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("rate", [24_000, 16_000, 8_000])
async def test_tts_speaks_60ms_per_character_in_100ms_chunks(backend: Backend, rate: int) -> None:
    text = "Hello there, how are you?"  # 25 characters: 1500 ms
    chunks = await _speech(backend, TtsRequest("r:tts:1", text, sample_rate_hz=rate))
    samples = [len(chunk.pcm16) // 2 for chunk in chunks]
    assert sum(samples) == rate * 1500 // 1000
    assert samples == [rate // 10] * 15
    assert "".join(chunk.text for chunk in chunks) == text
    assert chunks[0].text == "Hello"  # "Hello" starts at 0 ms, " there," at 300 ms
    assert chunks[3].text == " there,"
    tone = np.frombuffer(b"".join(c.pcm16 for c in chunks), dtype="<i2")
    assert np.abs(tone).max() > 5000


@pytest.mark.anyio
async def test_tts_of_empty_text_yields_nothing(backend: Backend) -> None:
    assert await _speech(backend, TtsRequest("r:tts:1", "")) == []


def test_word_pieces_join_back_to_the_text() -> None:
    for text in ["", " ", "one", " lead and trail  ", "a  b\tc"]:
        assert "".join(word_pieces(text)) == text


# --- parking ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_parked_request_waits_until_released(backend: Backend) -> None:
    script = script_of(backend)
    script.park("asr")
    answers: list[str] = []

    async def transcribe() -> None:
        answers.append((await _asr(backend).transcribe(_utterance("resp_1:asr:1"))).text)

    async with anyio.create_task_group() as tg:
        tg.start_soon(transcribe)
        assert await script.wait_parked("asr") == ["resp_1:asr:1"]
        # a sentinel instead of a sleep: a whole request of an unparked stage (its latency
        # included) is served while the parked one still has no answer
        assert [c.pcm16 for c in await _speech(backend, TtsRequest("resp_1:tts:1", "Hi."))]
        assert answers == []
        assert script.parked("asr") == ["resp_1:asr:1"]
        script.release("asr")
    assert answers == ["scripted transcript"]
    assert script.parked("asr") == []


@pytest.mark.anyio
async def test_releasing_one_request_keeps_the_stage_parked(backend: Backend) -> None:
    script = script_of(backend)
    script.park("tts")
    done: list[str] = []

    async def speak(request_id: str) -> None:
        await _speech(backend, TtsRequest(request_id, "Hi."))
        done.append(request_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(speak, "a")
        tg.start_soon(speak, "b")
        assert sorted(await script.wait_parked("tts", 2)) == ["a", "b"]
        script.release("tts", "b")
        with anyio.fail_after(30):  # a hang guard: "b" is served at once
            while done != ["b"]:
                await anyio.sleep(0.001)
        assert script.parked("tts") == ["a"]
        script.release("tts")
    assert done == ["b", "a"]


@pytest.mark.anyio
async def test_release_from_another_thread_wakes_a_parked_request(backend: Backend) -> None:
    script = script_of(backend)
    script.park("vlm")
    items: list[VlmDelta | VlmDecisionResult] = []

    async def generate() -> None:
        items.extend(await _reply(backend, _turn("hi")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(generate)
        await script.wait_parked("vlm")
        thread = threading.Thread(target=script.release, args=("vlm",))
        thread.start()
        await anyio.to_thread.run_sync(thread.join)
    assert items[-1] == VlmDecisionResult("resp_1:vlm:1", VlmAction.SPEAK, "I hear you: hi.")


@pytest.mark.anyio
async def test_waiting_for_a_parked_request_times_out(backend: Backend) -> None:
    with pytest.raises(TimeoutError):
        await script_of(backend).wait_parked("asr", timeout=0.02)


# --- failures --------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("error", ALL_ERRORS)
async def test_failure_at_submission_raises_the_chosen_error_once(
    backend: Backend, error: type[BackendError]
) -> None:
    script_of(backend).fail("asr", error, message="boom")
    with pytest.raises(error, match="boom") as info:
        await _asr(backend).transcribe(_utterance())
    assert info.value.stage == "asr"
    assert (await _asr(backend).transcribe(_utterance("r:asr:2"))).text == "scripted transcript"


@pytest.mark.anyio
async def test_vlm_failure_after_two_items_follows_two_deltas(backend: Backend) -> None:
    script = script_of(backend)
    script.reply("one two three").fail("vlm", StageFailed, after_items=2)
    received: list[VlmDelta | VlmDecisionResult] = []
    with pytest.raises(StageFailed):
        async for item in _vlm(backend).generate(_turn("go")):
            received.append(item)
    assert received == [VlmDelta("resp_1:vlm:1", "one"), VlmDelta("resp_1:vlm:1", " two")]


@pytest.mark.anyio
async def test_tts_failure_after_three_chunks_follows_three_chunks(backend: Backend) -> None:
    script_of(backend).fail("tts", SubmissionFailed, after_items=3)
    received: list[TtsAudio] = []
    with pytest.raises(SubmissionFailed):
        async for chunk in _tts(backend).synthesize(TtsRequest("r:tts:1", "x" * 20)):
            received.append(chunk)
    assert len(received) == 3


@pytest.mark.anyio
async def test_failure_aimed_at_one_request_spares_the_others(backend: Backend) -> None:
    script_of(backend).fail("asr", StageFailed, request_id="resp_2:asr:1")
    assert (await _asr(backend).transcribe(_utterance("resp_1:asr:1"))).text
    with pytest.raises(StageFailed):
        await _asr(backend).transcribe(_utterance("resp_2:asr:1"))


def test_streaming_failure_on_a_non_streaming_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="streaming"):
        Script().fail("asr", StageFailed, after_items=1)


@pytest.mark.anyio
async def test_dead_engine_fails_every_request_until_revived(backend: Backend) -> None:
    script = script_of(backend)
    script.kill("asr")
    for i in range(3):
        with pytest.raises(EngineDead):
            await _asr(backend).transcribe(_utterance(f"r:asr:{i}"))
    script.revive("asr")
    assert (await _asr(backend).transcribe(_utterance("r:asr:9"))).text


@pytest.mark.anyio
async def test_engine_dying_mid_stream_fails_the_stream(backend: Backend) -> None:
    script = script_of(backend)
    received: list[TtsAudio] = []
    with pytest.raises(EngineDead):
        async for chunk in _tts(backend).synthesize(TtsRequest("r:tts:1", "x" * 20)):
            received.append(chunk)
            script.kill("tts")
    assert len(received) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("step", "received"), [("submit", 0), ("first", 0), ("mid", 2), ("finish", 4)]
)
async def test_an_injected_vlm_fault_raises_at_its_step(
    backend: Backend, step: FaultStep, received: int
) -> None:
    """One reply of four word pieces and a decision: five items, the middle one third."""
    script = script_of(backend)
    script.reply("one two three four").inject("vlm", step, "raise")
    items: list[VlmDelta | VlmDecisionResult] = []
    with pytest.raises(StageFailed, match=f"at {step}"):
        async for item in _vlm(backend).generate(_turn("go")):
            items.append(item)
    assert len(items) == received
    assert len(await _reply(backend, _turn("again"))) == 5  # spent on one request


@pytest.mark.anyio
async def test_an_injected_tts_fault_at_finish_follows_every_chunk(backend: Backend) -> None:
    script_of(backend).inject("tts", "finish", "dead")
    chunks: list[TtsAudio] = []
    with pytest.raises(EngineDead):
        async for chunk in _tts(backend).synthesize(TtsRequest("r:tts:1", "x" * 20)):
            chunks.append(chunk)
    assert len(chunks) == 12  # 1.2 s of speech: every chunk, then the death


@pytest.mark.anyio
async def test_an_injected_hang_waits_until_cancelled(backend: Backend) -> None:
    script_of(backend).inject("asr", "finish", "hang")
    with anyio.move_on_after(0.05) as scope:  # the runner's stage timeout, in small
        await _asr(backend).transcribe(_utterance())
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_an_injected_fault_aims_at_its_request_prefix(backend: Backend) -> None:
    script_of(backend).inject("asr", "submit", "raise", request_prefix="sess_b/")
    assert (await _asr(backend).transcribe(_utterance("sess_a/resp_1:asr:1"))).text
    with pytest.raises(StageFailed):
        await _asr(backend).transcribe(_utterance("sess_b/resp_1:asr:1"))


def test_a_fault_at_a_step_the_stage_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="no fault step `mid`"):
        Script().inject("asr", "mid", "raise")


@pytest.mark.anyio
async def test_max_records_keeps_only_the_latest_records() -> None:
    """A served scripted backend (a soak's) must not keep every request it served."""
    backend = create_backend(max_records=3)
    async with backend:
        script = script_of(backend)
        script.latency = dict.fromkeys(script.latency, 0.0)
        for i in range(20):
            await _asr(backend).transcribe(_utterance(f"r:asr:{i}"))
            await _asr(backend).abort(f"r:asr:{i}")
    assert 3 <= len(script.requests) <= 6
    assert script.requests[-1].request_id == "r:asr:19"
    assert 3 <= len(script.aborts) <= 6
    assert script.is_aborted("r:asr:19") and not script.is_aborted("r:asr:0")


# --- aborts ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_abort_is_recorded_and_ends_a_parked_stream_quietly(backend: Backend) -> None:
    script = script_of(backend)
    script.park("tts")
    chunks: list[TtsAudio] = []

    async def speak() -> None:
        chunks.extend(await _speech(backend, TtsRequest("resp_1:tts:1", "Hello.")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(speak)
        await script.wait_parked("tts")
        await _tts(backend).abort("resp_1:tts:1")
    assert chunks == []
    assert script.aborted_ids("tts") == ["resp_1:tts:1"]


@pytest.mark.anyio
async def test_abort_mid_stream_stops_before_the_next_chunk(backend: Backend) -> None:
    received: list[TtsAudio] = []
    async for chunk in _tts(backend).synthesize(TtsRequest("resp_1:tts:1", "x" * 30)):
        received.append(chunk)
        await _tts(backend).abort("resp_1:tts:1")
    assert len(received) == 1


@pytest.mark.anyio
async def test_aborted_parked_transcription_fails(backend: Backend) -> None:
    script = script_of(backend)
    script.park("asr")
    errors: list[BaseException] = []

    async def transcribe() -> None:
        try:
            await _asr(backend).transcribe(_utterance("resp_1:asr:1"))
        except StageFailed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(transcribe)
        await script.wait_parked("asr")
        await _asr(backend).abort("resp_1:asr:1")
    assert len(errors) == 1
    assert script.aborted_ids() == ["resp_1:asr:1"]


@pytest.mark.anyio
async def test_every_request_is_recorded_in_order(backend: Backend) -> None:
    await _asr(backend).transcribe(_utterance("resp_1:asr:1"))
    await _reply(backend, _turn("hi", "resp_1:vlm:1"))
    await _speech(backend, TtsRequest("resp_1:tts:1", "Hi."))
    script = script_of(backend)
    assert [(r.stage, r.request_id) for r in script.requests] == [
        ("asr", "resp_1:asr:1"),
        ("vlm", "resp_1:vlm:1"),
        ("tts", "resp_1:tts:1"),
    ]
    assert script.requests_of("tts") == [TtsRequest("resp_1:tts:1", "Hi.")]


# --- latency ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tts_waits_the_stage_latency_before_every_chunk(backend: Backend) -> None:
    script_of(backend).latency["tts"] = 0.02
    start = anyio.current_time()
    chunks = await _speech(backend, TtsRequest("r:tts:1", "x" * 10))  # 600 ms: 6 chunks
    assert len(chunks) == 6
    assert anyio.current_time() - start >= 6 * 0.02


# --- VAD -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_vad_batch_scores_tone_frames_as_speech_and_silence_as_not(
    backend: Backend,
) -> None:
    vad = backend.vad
    assert vad is not None
    states = [vad.new_state() for _ in range(3)]
    t = np.arange(512) / 16_000
    tone = (0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    quiet = np.full(512, 0.001, dtype=np.float32)
    frames = np.stack([tone, quiet, np.zeros(512, dtype=np.float32)])
    scores = await vad.score(states, frames)
    assert scores.dtype == np.float32
    assert scores.tolist() == pytest.approx(
        [SPEECH_PROBABILITY, SILENCE_PROBABILITY, SILENCE_PROBABILITY]
    )
    assert all(state.data["frames"] == 1 for state in states)


@pytest.mark.anyio
async def test_vad_refuses_a_batch_whose_shape_does_not_match(backend: Backend) -> None:
    vad = backend.vad
    assert vad is not None
    with pytest.raises(StageFailed):
        await vad.score([vad.new_state()], np.zeros((2, 512), dtype=np.float32))


@pytest.mark.anyio
async def test_vad_sequences_are_one_script_step_and_advance_each_state_per_frame(
    backend: Backend,
) -> None:
    vad = backend.vad
    assert vad is not None
    t = np.arange(512) / 16_000
    tone = (0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    quiet = np.zeros(512, dtype=np.float32)
    states = [vad.new_state() for _ in range(2)]
    before = len(script_of(backend).requests_of("vad"))
    scored = await vad.score_sequences(states, [np.stack([tone, quiet, tone]), quiet[None]])
    assert [p.tolist() for p in scored] == [
        pytest.approx([SPEECH_PROBABILITY, SILENCE_PROBABILITY, SPEECH_PROBABILITY]),
        pytest.approx([SILENCE_PROBABILITY]),
    ]
    assert [s.data["frames"] for s in states] == [3, 1]
    assert len(script_of(backend).requests_of("vad")) == before + 1
    with pytest.raises(StageFailed, match="sequences"):
        await vad.score_sequences(states, [np.zeros((2, 300), dtype=np.float32), quiet[None]])


@pytest.mark.anyio
async def test_b10_vad_batcher_scores_concurrent_sessions_frames_in_one_call(
    backend: Backend,
) -> None:
    from runtime.vad_batcher import VadBatcher

    vad = backend.vad
    assert vad is not None
    batcher = VadBatcher(vad)
    frames = np.zeros((3, 512), dtype=np.float32)
    results: list[list[float]] = []

    async def one() -> None:
        results.append(await batcher.score(vad.new_state(), frames))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    assert results == [[pytest.approx(SILENCE_PROBABILITY)] * 3] * 4
    assert (batcher.batches, batcher.frames) == (1, 12)
