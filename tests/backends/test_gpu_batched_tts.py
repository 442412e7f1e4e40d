"""Slow: the batched streaming TTS (`backends/gpu/batched_tts.py`, `talker_batch.py`) on a
tiny random Qwen3-TTS, torch on the CPU: a stream's audio is the same alone and among 7
or 31 others joining and leaving (greedy): bit for bit with each Code2Wav window decoded
alone, up to float32 rounding with a step's windows decoded in one call (the default); a
cancelled stream leaves within one step; a join never costs the decoding streams a step;
memory is the slots' and never grows; the TTS stage speaks for several sessions at once.

The tests wait for events (a stream's first chunk, its end) and read the steps the loop
recorded; they never time anything. Skipped without torch, transformers or qwen_tts.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
if importlib.util.find_spec("qwen_tts") is None:  # imported through `import_qwen_tts`
    pytest.skip("needs qwen-tts-hf (make test-gpu-path)", allow_module_level=True)

from backends.gpu.batched_tts import BatchedSynthesizer
from backends.gpu.engine_api import Sampling
from backends.gpu.slot_scheduler import SlotPhase
from backends.gpu.talker_batch import TtsSampling

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_tts, build_tokenizer  # type: ignore[import-not-found]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

FRAMES = 32  # codec frames per stream at most (2.56 s): short streams, many joins
#: the stream watched: the tiny model speaks it to the frame limit (some texts end sooner)
TARGET = "The cat is on the table."
TEXTS = [
    "Hello there, how are you today?",
    "I can see a red ball near the window.",
    "Yes.",
    "Let me think about that for a second, please.",
    "Turn left at the next corner.",
    "It is sunny outside.",
    "Could you say that again?",
]


@pytest.fixture(scope="module")
def tiny_tts(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_tts(tmp_path_factory.mktemp("tiny") / "tts", build_tokenizer()))


@pytest.fixture
def synth(tiny_tts: str) -> Iterator[BatchedSynthesizer]:
    synthesizer = BatchedSynthesizer(
        tiny_tts,
        device="cpu",
        slots=32,
        max_len=256,
        max_new_tokens=FRAMES,
        prefill_chunk_tokens=8,  # prompts take a few steps: joins overlap decoding
        graphs=False,
        batch_code2wav=False,  # bit for bit: each window decoded alone
    )
    synthesizer.record_steps = True
    synthesizer.load()
    yield synthesizer
    synthesizer.close()


class Listener:
    """One stream read in a thread: its chunks, an event at its first chunk and at its
    end; `stop` set after `cut_after` chunks (a barge-in) when given."""

    def __init__(
        self,
        synth: BatchedSynthesizer,
        text: str,
        *,
        cut_after: int | None = None,
        sampling: TtsSampling | None = None,
    ) -> None:
        self.chunks: list[np.ndarray] = []
        self.first = threading.Event()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.cut_after = cut_after
        self.sampling = sampling
        self._thread = threading.Thread(target=self._read, args=(synth, text), daemon=True)
        self._thread.start()

    def _read(self, synth: BatchedSynthesizer, text: str) -> None:
        try:
            for chunk in synth.stream(
                text, speaker="Vivian", language="Auto", stop=self.stop, sampling=self.sampling
            ):
                self.chunks.append(chunk)
                self.first.set()
                if self.cut_after is not None and len(self.chunks) >= self.cut_after:
                    self.stop.set()
        finally:
            self.first.set()
            self.done.set()

    def audio(self) -> bytes:
        assert self.done.wait(120)
        return b"".join(c.tobytes() for c in self.chunks)


def _among(synth: BatchedSynthesizer, others: int, sampling: TtsSampling | None = None) -> bytes:
    """The target's audio while `others` streams join before, with and after it,
    a third of them cut off after their first chunk."""
    before = [Listener(synth, TEXTS[(i + 1) % len(TEXTS)]) for i in range(others // 3)]
    target = Listener(synth, TARGET, sampling=sampling)
    beside = [Listener(synth, TEXTS[(i + 2) % len(TEXTS)], cut_after=1) for i in range(others // 3)]
    assert target.first.wait(120)  # the rest join while the target is decoding
    after = [
        Listener(synth, TEXTS[(i + 3) % len(TEXTS)])
        for i in range(others - len(before) - len(beside))
    ]
    audio = target.audio()
    for listener in [*before, *beside, *after]:
        listener.audio()
    return audio


def _decoding_steps(synth: BatchedSynthesizer) -> dict[str, list[int]]:
    steps: dict[str, list[int]] = {}
    for index, decoding, _ in synth.steps:
        for request_id in decoding:
            steps.setdefault(request_id, []).append(index)
    return steps


def test_a_streams_audio_is_the_same_alone_and_among_7_and_31_others(
    synth: BatchedSynthesizer,
) -> None:
    alone = Listener(synth, TARGET).audio()
    assert len(alone) == FRAMES * 1920 * 4  # every frame: float32 samples at 24 kHz
    assert _among(synth, 7) == alone
    assert _among(synth, 31) == alone
    assert max(len(decoding) for _, decoding, _ in synth.steps) > 4  # it did batch
    assert synth.batch is not None and synth.batch.prefixes_computed == 1  # one speaker


def test_a_seeded_sampled_stream_is_the_same_alone_and_among_others(
    synth: BatchedSynthesizer,
) -> None:
    assert synth.sampling is not None and synth.sampling.talker.temperature == 0  # the tiny's
    seeded = TtsSampling(Sampling(temperature=0.9, top_k=50, seed=7), 0.9, 50)
    alone = Listener(synth, TARGET, sampling=seeded).audio()
    greedy = Listener(synth, TARGET).audio()
    assert alone != greedy  # it did sample
    assert _among(synth, 7, seeded) == alone  # the others greedy, the target its own draws


def test_code2wav_batched_across_streams_moves_the_audio_by_rounding_only(tiny_tts: str) -> None:
    synthesizer = BatchedSynthesizer(
        tiny_tts,
        device="cpu",
        slots=32,
        max_len=256,
        max_new_tokens=FRAMES,
        prefill_chunk_tokens=8,
        graphs=False,
    )
    synthesizer.load()
    try:
        assert synthesizer.batch_code2wav  # the default
        alone = np.frombuffer(Listener(synthesizer, TARGET).audio(), dtype=np.float32)
        among = np.frombuffer(_among(synthesizer, 31), dtype=np.float32)
    finally:
        synthesizer.close()
    # the same codes, so the same audio up to float32 rounding of the batched convolutions
    assert among.shape == alone.shape
    np.testing.assert_allclose(among, alone, rtol=0, atol=1e-5 * np.abs(alone).max())


def test_a_join_never_costs_a_decoding_stream_a_step(synth: BatchedSynthesizer) -> None:
    _among(synth, 15)
    joined_while_decoding = 0
    for request_id, indices in _decoding_steps(synth).items():
        # from its first frame to its last, a stream decodes at every step
        assert indices == list(range(indices[0], indices[-1] + 1)), request_id
    for _, decoding, joined in synth.steps:
        if joined and decoding:
            joined_while_decoding += 1
    assert joined_while_decoding > 0  # joins did land beside decoding streams


def test_a_cancelled_stream_leaves_its_slot_within_one_step(synth: BatchedSynthesizer) -> None:
    keeps = Listener(synth, TEXTS[4])
    assert keeps.first.wait(120)  # submitted first: "tts-0"
    cut = Listener(synth, TARGET)
    assert cut.first.wait(120)
    steps_then = len(synth.steps)
    cut.stop.set()
    assert len(cut.audio()) < FRAMES * 1920 * 4  # cut off before its last frame
    keeps.audio()
    cut_id = "tts-1"  # the second stream submitted
    late = [index for index, decoding, _ in synth.steps if cut_id in decoding]
    # the step in flight when stop was set may still serve it; the next one never does
    assert not [index for index in late if index > steps_then]
    assert synth.scheduler is not None
    assert all(view.phase is SlotPhase.FREE for view in synth.scheduler.slot_views())


def test_memory_is_the_slots_and_streams_beyond_them_wait(tiny_tts: str) -> None:
    synthesizer = BatchedSynthesizer(
        tiny_tts, device="cpu", slots=4, max_len=256, max_new_tokens=FRAMES, graphs=False
    )
    synthesizer.record_steps = True
    synthesizer.load()
    try:
        assert synthesizer.batch is not None
        decoder = synthesizer.batch.decoder
        before = decoder.cache_bytes, [k.shape for k in decoder.cache.keys]
        listeners = [Listener(synthesizer, TEXTS[i % len(TEXTS)]) for i in range(10)]
        audio = [listener.audio() for listener in listeners]
        assert all(audio)
        assert max(len(decoding) for _, decoding, _ in synthesizer.steps) <= 4
        assert (decoder.cache_bytes, [k.shape for k in decoder.cache.keys]) == before
    finally:
        synthesizer.close()


def test_the_tts_stage_speaks_for_many_sessions_at_once_through_the_batched_streams(
    tiny_tts: str,
) -> None:
    import anyio

    from backends.base import TtsRequest
    from backends.gpu.placement import parse_placement
    from backends.gpu.tts import TtsStage, make_synthesizer

    placement = parse_placement(
        {"tts": {"model": tiny_tts, "device": "cpu", "batch_streams": 4, "max_tokens": FRAMES}}
    ).tts
    synthesizer = make_synthesizer(placement)
    assert isinstance(synthesizer, BatchedSynthesizer)
    synthesizer.record_steps = True
    stage = TtsStage(synthesizer, placement)
    heard: list[tuple[str, float]] = []
    stage.observe_timing(lambda name, seconds: heard.append((name, seconds)))
    spoken: dict[str, bytes] = {}

    async def speak(request_id: str, text: str) -> None:
        pcm = b""
        async for chunk in stage.synthesize(TtsRequest(request_id, text)):
            pcm += chunk.pcm16
        spoken[request_id] = pcm

    async def main() -> None:
        await stage.load()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(speak, "a", TARGET)
                tg.start_soon(speak, "b", TEXTS[1])
                tg.start_soon(speak, "c", TARGET)
        finally:
            await stage.release()

    anyio.run(main)
    # no lock held per utterance: they shared steps, and a and c say the same
    assert max(len(decoding) for _, decoding, _ in synthesizer.steps) >= 2
    assert spoken["a"] == spoken["c"] and len(spoken["a"]) == FRAMES * 1920 * 2
    assert spoken["b"]
    # each stream's timing, and the stage histograms heard every part of it
    timing = synthesizer.last_timing
    assert timing is not None and timing.first_chunk_s is not None
    assert timing.queue_wait_s is not None and timing.prefill_s is not None
    assert timing.decode_steps > 0 and timing.decode_step_s is not None
    names = [name for name, _ in heard]
    assert {"tts_queue_wait", "tts_prefill", "tts_first_chunk", "tts_decode_step"} <= set(names)
    assert names.count("tts_first_chunk") == 3  # one per stream


def test_a_stream_speaks_at_least_two_frames_as_qwen_tts_does(synth: BatchedSynthesizer) -> None:
    import torch

    assert synth.batch is not None
    eos = synth.batch.eos_id

    def end_at_once(module: object, inputs: object, output: object) -> object:
        assert hasattr(output, "index_fill")
        return output.index_fill(-1, torch.tensor([eos]), 1e4)  # the end is always the argmax

    hook = synth.batch.talker.codec_head.register_forward_hook(end_at_once)
    try:
        audio = Listener(synth, TARGET).audio()
    finally:
        hook.remove()
    assert len(audio) == 2 * 1920 * 4  # `min_new_tokens=2`: two frames, then the end
