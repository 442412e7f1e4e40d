"""The GPU stages over fake engines: the request path without torch or vLLM."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import anyio
import numpy as np
import pytest

from backends.base import (
    AsrRequest,
    EngineDead,
    InvalidPromptContext,
    PromptContext,
    StageFailed,
    SubmissionFailed,
    TtsRequest,
    VlmAction,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.gpu.asr import AsrStage, build_asr_prompt, clean_asr_text, ensure_audio_only
from backends.gpu.engine_api import EnginePrompt, Sampling
from backends.gpu.engines import VllmEngine, engine_kwargs
from backends.gpu.placement import default_placement
from backends.gpu.tts import TtsStage, to_pcm16
from backends.gpu.vlm import VlmStage

EngineDeadError = type("EngineDeadError", (Exception,), {"__module__": "vllm.v1.engine.exceptions"})


class FakeEngine:
    """A GenerationEngine that streams scripted pieces and records calls."""

    def __init__(
        self,
        pieces: list[str],
        *,
        fail_at: int | None = None,
        submit_error: Exception | None = None,
    ) -> None:
        self.name = "fake"
        self.pieces = pieces
        self.fail_at = fail_at
        self.submit_error = submit_error
        self.submitted: list[tuple[str, EnginePrompt, Sampling]] = []
        self.aborted: list[str] = []
        self.started = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def submit(self, request_id: str, prompt: EnginePrompt, sampling: Sampling) -> Any:
        self.submitted.append((request_id, prompt, sampling))
        if self.submit_error is not None:
            raise self.submit_error
        return self._stream()

    async def _stream(self) -> AsyncIterator[str]:
        for i, piece in enumerate(self.pieces):
            if i == self.fail_at:
                raise EngineDeadError("engine core died")
            await anyio.sleep(0)
            yield piece

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    prepares_frames = False

    def prepare_image(self, image: Any) -> bool:
        raise AssertionError("not an engine that prepares frames")


def _vlm(engine: FakeEngine, **changes: Any) -> VlmStage:
    placement = replace(default_placement().vlm, max_model_len=512, **changes)
    return VlmStage(engine, placement, sampling=Sampling(max_tokens=64))


async def _collect(stage: VlmStage, request: VlmRequest) -> list[VlmDelta | VlmDecisionResult]:
    return [item async for item in stage.generate(request)]


CTX = PromptContext(system="Watch.", transcript="What is it?")


def test_vlm_streams_deltas_then_one_decision() -> None:
    engine = FakeEngine(["</resp", "onse> It is ", "a red ", "ball.\nextra"])
    items = anyio.run(_collect, _vlm(engine), VlmRequest("r1", CTX))
    assert items[-1] == VlmDecisionResult("r1", VlmAction.SPEAK, "It is a red ball.")
    assert "".join(i.text for i in items[:-1] if isinstance(i, VlmDelta)) == "It is a red ball."
    request_id, prompt, sampling = engine.submitted[0]
    assert (
        request_id == "r1"
        and prompt.images == ()
        and prompt.text.endswith("<|im_start|>assistant\n")
    )
    assert sampling.max_tokens == 64


def test_vlm_silence_has_no_deltas() -> None:
    items = anyio.run(_collect, _vlm(FakeEngine(["</silence>"])), VlmRequest("r1", CTX))
    assert items == [VlmDecisionResult("r1", VlmAction.LISTEN)]


def test_vlm_request_max_tokens_caps_sampling() -> None:
    engine = FakeEngine(["</silence>"])
    anyio.run(_collect, _vlm(engine), VlmRequest("r1", CTX, max_tokens=5))
    assert engine.submitted[0][2].max_tokens == 5


def test_vlm_over_budget_context_fails_before_submission_and_next_request_works() -> None:
    engine = FakeEngine(["</silence>"])
    stage = _vlm(engine)
    bad = VlmRequest("bad", PromptContext(system="word " * 1000, transcript="x"))
    with pytest.raises(InvalidPromptContext, match="budget"):
        anyio.run(_collect, stage, bad)
    assert engine.submitted == []
    assert anyio.run(_collect, stage, VlmRequest("good", CTX))[-1].action is VlmAction.LISTEN  # type: ignore[union-attr]


def test_vlm_abandoned_stream_is_aborted_on_the_engine() -> None:
    engine = FakeEngine(["</response> one", " two", " three", " four"])

    async def main() -> None:
        stream = _vlm(engine).generate(VlmRequest("r1", CTX))
        assert isinstance(await stream.__anext__(), VlmDelta)
        await stream.aclose()  # the response was cancelled

    anyio.run(main)
    assert engine.aborted == ["r1"]


def test_vlm_submission_failure_is_compensated_and_translated() -> None:
    engine = FakeEngine([], submit_error=RuntimeError("zmq"))
    with pytest.raises(SubmissionFailed) as info:
        anyio.run(_collect, _vlm(engine), VlmRequest("r1", CTX))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert engine.aborted == ["r1"]


def test_vlm_engine_death_while_streaming_evicts_and_refuses_later_requests() -> None:
    engine = FakeEngine(["</response> a", " b", " c"], fail_at=1)
    stage = _vlm(engine)
    with pytest.raises(EngineDead):
        anyio.run(_collect, stage, VlmRequest("r1", CTX))
    assert stage.health.evicted
    with pytest.raises(EngineDead):
        anyio.run(_collect, stage, VlmRequest("r2", CTX))
    assert [s[0] for s in engine.submitted] == ["r1"]  # r2 never reached the dead engine


def test_vlm_budget_uses_the_stage_tokenizer() -> None:
    stage = _vlm(FakeEngine([]), context_budget_tokens=100, max_tokens=64)
    assert stage.budget_tokens == 100
    assert _vlm(FakeEngine([])).budget_tokens == 512 - 64


def test_vlm_frames_are_decoded_only_at_submission() -> None:
    pil = pytest.importorskip("PIL.Image")
    import io

    out = io.BytesIO()
    pil.new("RGB", (1000, 500)).save(out, format="PNG")
    engine = FakeEngine(["</silence>"])
    ctx = replace(CTX, frames=(out.getvalue(),))
    anyio.run(_collect, _vlm(engine), VlmRequest("r1", ctx))
    (image,) = engine.submitted[0][1].images
    assert image.size == (448, 224)
    with pytest.raises(InvalidPromptContext, match="frames"):
        anyio.run(_collect, _vlm(engine), VlmRequest("r2", replace(CTX, frames=(b"not an image",))))


class PreparingEngine(FakeEngine):
    """A fake engine that prepares frames: each `prepare_image` waits for `go`."""

    prepares_frames = True

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__([])
        self.fail = fail
        self.go = threading.Event()
        self.prepared: list[tuple[int, int]] = []  # the decoded images' sizes

    def prepare_image(self, image: Any) -> bool:
        if self.fail:
            raise RuntimeError("vision tower out of memory")
        self.go.wait()
        self.prepared.append(image.size)
        return True


def _png(width: int, height: int) -> bytes:
    pil = pytest.importorskip("PIL.Image")
    import io

    out = io.BytesIO()
    pil.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()


def test_vlm_prepares_frames_decoded_as_at_their_turn_and_drops_them_when_busy() -> None:
    from backends.gpu.vlm import MAX_PREPARING

    engine = PreparingEngine()
    stage = _vlm(engine)
    frame = _png(1000, 500)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(MAX_PREPARING + 1):
                tg.start_soon(stage.prepare_frame, frame)
            # the frame past the bound returns at once: dropped, not queued
            while stage._preparing < MAX_PREPARING:
                await anyio.sleep(0)
            await stage.prepare_frame(frame)
            engine.go.set()

    assert stage.prepares_frames
    anyio.run(main)
    assert engine.prepared == [(448, 224)] * MAX_PREPARING  # scaled as `pieces` scales it
    assert stage._preparing == 0


@pytest.mark.parametrize(
    ("engine", "frame"),
    [(PreparingEngine(), b"not an image"), (PreparingEngine(fail=True), None)],
    ids=["undecodable frame", "engine failure"],
)
def test_vlm_frame_preparation_never_raises(engine: PreparingEngine, frame: bytes | None) -> None:
    engine.go.set()
    anyio.run(_vlm(engine).prepare_frame, frame or _png(64, 64))
    assert engine.prepared == []


def test_vlm_over_an_engine_that_prepares_nothing_does_nothing() -> None:
    stage = _vlm(FakeEngine([]))
    assert not stage.prepares_frames
    anyio.run(stage.prepare_frame, _png(64, 64))


# --- ASR (B2) -------------------------------------------------------------------------


def test_asr_prompt_and_cleanup() -> None:
    assert build_asr_prompt("en").endswith("<|im_start|>assistant\nlanguage English<asr_text>")
    assert build_asr_prompt(None).endswith("<|im_start|>assistant\n")
    assert clean_asr_text("language English<asr_text>hello   there</asr_text>") == "hello there"
    assert clean_asr_text(" hi <|im_end|>") == "hi"
    assert clean_asr_text("language None<asr_text>") == ""


def test_asr_language_is_detected_unless_the_request_sets_it() -> None:
    """No forced `language English`: detected by default; a session language is forced."""
    engine = FakeEngine(["language German<asr_text>hallo"])
    stage = AsrStage(engine, default_placement().asr)
    pcm = np.zeros(16_000, dtype=np.float32)
    anyio.run(stage.transcribe, AsrRequest("a1", pcm))
    assert engine.submitted[0][1].text.endswith("<|im_start|>assistant\n")
    anyio.run(stage.transcribe, AsrRequest("a2", pcm, language="de"))
    assert engine.submitted[1][1].text.endswith("assistant\nlanguage German<asr_text>")


def test_qwen3_asr_detects_any_language() -> None:
    """Multilingual: no language list, so `session.update` refuses no pin."""
    assert AsrStage(FakeEngine([]), default_placement().asr).languages is None


def test_asr_transcribes_audio_only() -> None:
    engine = FakeEngine(["hello ", " world"])
    stage = AsrStage(engine, default_placement().asr)
    pcm = np.zeros(16_000, dtype=np.float32)
    transcript = anyio.run(stage.transcribe, AsrRequest("a1", pcm))
    assert transcript.text == "hello world"
    prompt = engine.submitted[0][1]
    assert (
        prompt.images == ()
        and prompt.audio is not None
        and set(prompt.multi_modal_data()) == {"audio"}
    )


def test_asr_guard_refuses_visual_data_before_submission() -> None:
    audio = (np.zeros(160, dtype=np.float32), 16_000)
    with pytest.raises(StageFailed, match="visual"):
        ensure_audio_only(EnginePrompt(build_asr_prompt(), images=(object(),), audio=audio))
    with pytest.raises(StageFailed, match="visual"):
        ensure_audio_only(EnginePrompt(build_asr_prompt() + "<|image_pad|>", audio=audio))
    with pytest.raises(StageFailed, match="audio"):
        ensure_audio_only(EnginePrompt(build_asr_prompt()))


def test_vllm_asr_engine_refuses_images_before_reaching_the_serializer() -> None:
    class RecordingLlm:
        def __init__(self) -> None:
            self.added: list[Any] = []

        async def add_request(self, *args: Any) -> None:
            self.added.append(args)

    engine = VllmEngine(default_placement().asr)
    llm = RecordingLlm()
    engine._llm = llm
    prompt = EnginePrompt("x", images=(object(),), audio=(np.zeros(1, np.float32), 16_000))
    with pytest.raises(StageFailed, match="image"):
        anyio.run(engine.submit, "a1", prompt, Sampling())
    assert llm.added == []


def test_engine_kwargs_follow_the_placement() -> None:
    placement = default_placement()
    vlm = engine_kwargs(placement.vlm)
    assert vlm["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16, 24, 32]  # sized for 32 sessions
    assert vlm["enforce_eager"] is False
    assert vlm["device_ids"] == [0]
    assert vlm["limit_mm_per_prompt"] == {"image": 8, "video": 0}
    asr = engine_kwargs(replace(placement.asr, enforce_eager=True), available=frozenset(
        {"model", "tokenizer", "dtype", "load_format", "gpu_memory_utilization", "max_model_len",
         "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "seed", "disable_log_stats",
         "trust_remote_code", "limit_mm_per_prompt"}
    ))  # fmt: skip
    assert "cudagraph_capture_sizes" not in asr and "device_ids" not in asr  # old vLLM: env pinning
    assert asr["limit_mm_per_prompt"] == {"audio": 1}
    old = engine_kwargs(
        placement.vlm,
        available=frozenset({*vlm, "compilation_config"} - {"cudagraph_capture_sizes"}),
    )
    assert old["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 24, 32]}
    with pytest.raises(StageFailed, match="no engine argument"):
        engine_kwargs(placement.asr, available=frozenset({"model"}))


# --- TTS ------------------------------------------------------------------------------


class FakeSynth:
    sample_rate_hz = 24_000

    def __init__(self, chunks: int = 3) -> None:
        self.chunks = chunks
        self.calls: list[tuple[str, str, str]] = []
        self.loaded = False

    def load(self) -> None:
        self.loaded = True

    def warmup(self) -> None:
        pass

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Any]:
        self.calls.append((text, speaker, language))
        for _ in range(self.chunks):
            if stop.is_set():
                return
            yield np.full(2400, 0.5, dtype=np.float32)

    def close(self) -> None:
        pass


def test_tts_streams_pcm16_with_default_speaker_and_language() -> None:
    synth = FakeSynth()
    stage = TtsStage(synth, default_placement().tts)

    async def main() -> list[Any]:
        async with stage:
            return [c async for c in stage.synthesize(TtsRequest("t1", "  Hello   world. "))]

    chunks = anyio.run(main)
    assert synth.calls == [("Hello world.", "Vivian", "Auto")]
    assert [len(c.pcm16) for c in chunks] == [4800, 4800, 4800]
    assert chunks[0].text == "Hello world." and chunks[1].text == ""
    assert np.frombuffer(chunks[0].pcm16, "<i2")[0] == 16384


def test_tts_resamples_and_skips_empty_text() -> None:
    stage = TtsStage(FakeSynth(chunks=1), default_placement().tts)

    async def main() -> tuple[list[Any], list[Any]]:
        a = [
            c
            async for c in stage.synthesize(
                TtsRequest("t1", "Hi", sample_rate_hz=16_000, voice="Ryan")
            )
        ]
        b = [c async for c in stage.synthesize(TtsRequest("t2", "   "))]
        return a, b

    resampled, empty = anyio.run(main)
    assert len(resampled[0].pcm16) == 1600 * 2
    assert empty == []
    assert to_pcm16(np.array([2.0, -2.0], np.float32), 24_000, 24_000) == b"\xff\x7f\x01\x80"


def test_tts_abort_stops_the_stream() -> None:
    stage = TtsStage(FakeSynth(chunks=100), default_placement().tts)

    async def main() -> int:
        n = 0
        async for _ in stage.synthesize(TtsRequest("t1", "long text")):
            n += 1
            if n == 2:
                await stage.abort("t1")
        return n

    assert anyio.run(main) <= 3


def test_tts_voices_are_the_checkpoint_speakers() -> None:
    from types import SimpleNamespace

    from backends.gpu.tts import speakers_of

    listing = SimpleNamespace(get_supported_speakers=lambda: ["Vivian", "Ryan"])
    assert speakers_of(listing) == {"Vivian", "Ryan"}
    table = SimpleNamespace(
        model=SimpleNamespace(
            config=SimpleNamespace(talker_config=SimpleNamespace(spk_id={"serena": 3}))
        )
    )
    assert speakers_of(table) == {"serena"}
    assert speakers_of(None) is None and speakers_of(object()) is None


# --- TTS chunk schedule ----------------------------------------------------------------

FRAME = 1920  # samples of one 12.5 Hz codec frame at 24 kHz


def test_tts_chunks_start_at_the_first_size_then_double_up_to_the_chunk_size() -> None:
    from itertools import islice

    from backends.gpu.tts import chunk_schedule

    def first(n: int, *args: int) -> list[int]:
        return list(islice(chunk_schedule(*args), n))

    assert first(6, 2, 8) == [2, 2, 4, 8, 8, 8]
    assert first(6, 1, 8) == [1, 1, 2, 4, 8, 8]
    assert first(6, 2, 12) == [2, 2, 4, 4, 12, 12]
    assert first(3, 8, 8) == first(3, 16, 8) == [8, 8, 8]  # a first chunk >= chunk_frames: fixed
    with pytest.raises(ValueError, match=">= 1 frame"):
        next(chunk_schedule(0, 8))


def _causal_decode(frames: Any, length: int) -> np.ndarray:
    """A stand-in Code2Wav: causal with unbounded memory (each frame's samples are the sum
    of its window so far), so cutting a window at another frame changes the audio."""
    assert length >= len(frames)
    values = np.cumsum(np.asarray(frames, dtype=np.float64)) / 1000.0
    return np.repeat(values, FRAME).astype(np.float32)


class _FakeFasterQwen:
    """What `CudaGraphSynthesizer` uses of `FasterQwen3TTS`, over scripted codec frames."""

    def __init__(self, frames: int, *, frame_generator: bool = True) -> None:
        self.codes = np.arange(1, frames + 1)
        self.model = SimpleNamespace(
            model=SimpleNamespace(tts_model_type="custom_voice"),
            _validate_languages=lambda languages: None,
            _validate_speakers=lambda speakers: None,
        )
        self.predictor_graph = self.talker_graph = object()
        self.asked: list[int] = []  # chunk_size of each generator call
        self.pulled = 0  # Talker steps taken
        self.closed = False
        if frame_generator:
            self._prepare_generation_custom = lambda **kw: (None,) * 7

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.instance

    instance: Any = None

    def steps(self, *, chunk_size: int, **kwargs: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
        self.asked.append(chunk_size)
        try:
            for start in range(0, self.codes.size, chunk_size):
                self.pulled = min(start + chunk_size, self.codes.size)
                yield self.codes[start : start + chunk_size], {}
        finally:
            self.closed = True

    def generate_custom_voice_streaming(
        self, *, chunk_size: int, **kwargs: Any
    ) -> Iterator[tuple[np.ndarray, int, dict[str, Any]]]:
        for codes, timing in self.steps(chunk_size=chunk_size):
            yield _causal_decode(codes, codes.size), 24_000, timing


def _graph_synth(monkeypatch: pytest.MonkeyPatch, fake: _FakeFasterQwen, **kwargs: Any) -> Any:
    """A loaded `CudaGraphSynthesizer` over `fake` (no torch, no CUDA)."""
    import sys
    import types

    from backends.gpu import tts

    package = types.ModuleType("faster_qwen3_tts")
    package.FasterQwen3TTS = _FakeFasterQwen  # type: ignore[attr-defined]
    streaming = types.ModuleType("faster_qwen3_tts.streaming")
    streaming.fast_generate_streaming = fake.steps  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "faster_qwen3_tts", package)
    monkeypatch.setitem(sys.modules, "faster_qwen3_tts.streaming", streaming)
    monkeypatch.setattr(tts, "import_qwen_tts", lambda: None)
    monkeypatch.setattr(tts, "_torch_dtype", lambda name: name)
    monkeypatch.setattr(_FakeFasterQwen, "instance", fake)
    synth = tts.CudaGraphSynthesizer("tiny", device="cuda:0", **kwargs)
    synth.load()
    decodes: list[tuple[int, int]] = []

    def decode(frames: Any, length: int) -> np.ndarray:
        decodes.append((len(frames), length))
        return _causal_decode(frames, length)

    monkeypatch.setattr(synth, "_decode", decode)
    synth.decodes = decodes  # type: ignore[attr-defined]
    return synth


def _pcm_chunks(synth: Any, sample_rate_hz: int = 24_000) -> list[bytes]:
    stage = TtsStage(synth, default_placement().tts)

    async def main() -> list[bytes]:
        request = TtsRequest("t1", "Hello there.", sample_rate_hz=sample_rate_hz)
        return [c.pcm16 async for c in stage.synthesize(request)]

    return anyio.run(main)


def test_graph_tts_first_chunk_is_two_frames_then_chunks_grow_with_the_same_audio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    growing = _graph_synth(monkeypatch, _FakeFasterQwen(61))
    chunks = _pcm_chunks(growing)
    fixed = _graph_synth(monkeypatch, _FakeFasterQwen(61), first_chunk_frames=8)
    fixed_chunks = _pcm_chunks(fixed)

    assert [len(c) // 2 // FRAME for c in chunks] == [2, 2, 4, 8, 8, 8, 8, 8, 8, 5]
    assert [len(c) // 2 // FRAME for c in fixed_chunks] == [8, 8, 8, 8, 8, 8, 8, 5]
    assert b"".join(chunks) == b"".join(fixed_chunks)
    # the growing stream asks the generator for single frames; from 8 frames on it decodes
    # the windows fixed chunking decodes (25 frames of left context once 32 are out)
    assert _FakeFasterQwen.instance.asked == [1]
    assert growing.decodes[:3] == [(2, 8), (4, 8), (8, 8)]
    assert (
        growing.decodes[2:]
        == fixed.decodes
        == [(8, 8), (16, 16), (24, 24), (32, 32)] + [(33, 33)] * 3 + [(30, 30)]
    )


def test_graph_tts_first_chunk_resampled_is_at_most_two_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunks = _pcm_chunks(_graph_synth(monkeypatch, _FakeFasterQwen(20)), sample_rate_hz=16_000)
    fixed = _pcm_chunks(
        _graph_synth(monkeypatch, _FakeFasterQwen(20), first_chunk_frames=8), sample_rate_hz=16_000
    )
    frame_16k = FRAME * 16_000 // 24_000
    assert len(chunks[0]) // 2 <= 2 * frame_16k
    assert [len(c) // 2 // frame_16k for c in chunks] == [2, 2, 4, 8, 4]
    assert b"".join(chunks) == b"".join(fixed)  # whole frames: the same 16 kHz samples


def test_graph_tts_abort_after_the_first_chunk_stops_the_talker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeFasterQwen(200)
    stage = TtsStage(_graph_synth(monkeypatch, fake), default_placement().tts)

    async def main() -> list[Any]:
        got = []
        async for chunk in stage.synthesize(TtsRequest("t1", "long text")):
            got.append(chunk)
            await stage.abort("t1")
        return got

    chunks = anyio.run(main)
    assert len(chunks) == 1 and chunks[0].text == "long text"
    assert fake.pulled <= 4 and fake.closed  # at most the next chunk's frames, then closed


def test_graph_tts_without_the_frame_generator_streams_fixed_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeFasterQwen(20, frame_generator=False)
    chunks = _pcm_chunks(_graph_synth(monkeypatch, fake))
    assert fake.asked == [8]  # the library's own streaming, one chunk size throughout
    assert [len(c) // 2 // FRAME for c in chunks] == [8, 8, 4]


class _FakeQwenTts:
    """`qwen_tts.Qwen3TTSModel.generate_custom_voice`: the whole utterance at once."""

    def __init__(self, frames: int) -> None:
        rng = np.random.default_rng(0)
        self.audio = rng.uniform(-0.9, 0.9, frames * FRAME).astype(np.float32)

    def generate_custom_voice(self, **kwargs: Any) -> tuple[list[np.ndarray], int]:
        return [self.audio], 24_000


@pytest.mark.parametrize("rate", [24_000, 16_000])
def test_eager_tts_streams_the_same_growing_chunks(rate: int) -> None:
    from backends.gpu.tts import EagerSynthesizer

    def chunks(**kwargs: int) -> list[bytes]:
        synth = EagerSynthesizer("tiny", device="cpu", **kwargs)
        synth._model = _FakeQwenTts(29)
        return _pcm_chunks(synth, sample_rate_hz=rate)

    frame = FRAME * rate // 24_000
    growing, fixed = chunks(), chunks(first_chunk_frames=8)
    assert len(growing[0]) // 2 == 2 * frame
    assert [len(c) // 2 // frame for c in growing] == [2, 2, 4, 8, 8, 5]
    assert [len(c) // 2 // frame for c in fixed] == [8, 8, 8, 5]
    assert b"".join(growing) == b"".join(fixed)
    assert b"".join(growing) == to_pcm16(_FakeQwenTts(29).audio, 24_000, rate)
