"""Slow: the per-stage device audit (`backends/gpu/device_audit.py`) on the CPU.

There is one device here, so the `meta` device plays "the other device": a stage placed
on `cpu` that moves a tensor to `meta`, allocates there or mixes the two must fail with
a `DeviceAuditError` naming the stage, its device, the op and the device found, while
the same work on the CPU passes. The tiny random Qwen3-ASR and Qwen3-VL of
`tools/gpu_tiny_models.py` run their real engines (`hf_engines.py`) under the audit, and
a planted op in an engine's worker thread fails its request (the audit is installed in
the thread that runs the ops, not only in the caller's). Skipped without torch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from backends.base import StageFailed, TtsRequest
from backends.gpu.device_audit import DeviceAudit, DeviceAuditError, active_audit, device_audit
from backends.gpu.placement import default_placement
from backends.gpu.tts import TtsStage

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def _current_mode() -> Any:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode()


# --- the audit on its own ---------------------------------------------------------------


def test_a_tensor_moved_to_another_device_fails_naming_stage_device_and_op() -> None:
    with pytest.raises(DeviceAuditError) as info, device_audit("asr", "cpu"):
        torch.ones(2, 2).to("meta")
    error = info.value
    assert str(error) == "asr (configured cpu): aten::_to_copy on meta"
    assert (error.stage, error.configured, error.op, error.found) == (
        "asr",
        "cpu",
        "aten::_to_copy",
        "meta",
    )
    assert isinstance(error, StageFailed)  # passes map_engine_errors unchanged


def test_an_allocation_under_another_default_device_fails() -> None:
    with (
        pytest.raises(DeviceAuditError, match=r"^vlm \(configured cpu\): aten::ones on meta$"),
        device_audit("vlm", "cpu"),
        torch.device("meta"),
    ):
        torch.ones(3)


def test_an_op_mixing_devices_fails_before_torch_does() -> None:
    elsewhere = torch.zeros(4, device="meta")  # made outside the audit
    with (
        pytest.raises(DeviceAuditError, match=r"aten::add\.Tensor on meta"),
        device_audit("tts", "cpu"),
    ):
        torch.zeros(4) + elsewhere


def test_a_violation_the_code_under_audit_catches_still_fails_at_the_exit() -> None:
    with (
        pytest.raises(DeviceAuditError, match="aten::_to_copy on meta"),
        device_audit("tts", "cpu"),
    ):
        with contextlib.suppress(Exception):  # a library trying an op and moving on
            torch.zeros(2).to("meta")
        torch.zeros(2) * 2  # and carrying on on the right device


def test_work_on_the_configured_device_and_cpu_scalars_pass() -> None:
    with device_audit("vlm", "cpu") as audit:
        assert active_audit() is audit and _current_mode() is not None
        weights = torch.randn(8, 8)
        logits = torch.softmax(weights @ torch.randn(8, 2), dim=0) * torch.tensor(2.0)
        token = int(torch.argmax(logits))
        torch.tensor([token]).tolist()
    assert active_audit() is None and _current_mode() is None
    assert isinstance(audit, DeviceAudit) and audit.violation is None


def test_host_tensors_pass_on_a_device_stage_unless_strict() -> None:
    """A stage on a device (here `meta` standing in for a GPU) may hold host tensors by
    default (its thread tokenizes and copies); `host=False` fails them, all but scalars."""
    on_device = torch.zeros(3, device="meta")
    with device_audit("vlm", "meta"):
        torch.zeros(3).to("meta") + on_device  # a host allocation and its copy in
    with device_audit("vlm", "meta", host=False):
        (on_device * torch.tensor(2.0)).sum()  # a 0-dim CPU operand, as torch allows
    with (
        pytest.raises(DeviceAuditError, match=r"^vlm \(configured meta\): aten::zeros on cpu$"),
        device_audit("vlm", "meta", host=False),
    ):
        torch.zeros(3)  # the default device is not the stage's


def test_a_cuda_stage_needs_a_device_index() -> None:
    with pytest.raises(ValueError, match="index"):
        device_audit("asr", "cuda")


def test_the_audit_sees_only_its_own_thread() -> None:
    failures: list[BaseException] = []

    def elsewhere() -> None:
        try:
            torch.zeros(2).to("meta")  # no audit in this thread
            with device_audit("tts", "cpu"):
                torch.zeros(2).to("meta")
        except BaseException as exc:
            failures.append(exc)

    with device_audit("asr", "cpu"):
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        torch.zeros(2) + 1  # this thread's own work is still fine
    assert len(failures) == 1 and isinstance(failures[0], DeviceAuditError)
    assert failures[0].stage == "tts"


def test_cuda_waits_on_another_device_fail_before_they_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`torch.cuda.synchronize` and a stream's `synchronize` are not ops: the audit wraps
    them, and the check comes first, so no CUDA device is needed to see it."""
    with (
        pytest.raises(DeviceAuditError, match=r"^asr \(configured cpu\): torch\.cuda\.synchronize"),
        device_audit("asr", "cpu"),
    ):
        torch.cuda.synchronize("cuda:0")
    with (
        pytest.raises(DeviceAuditError, match=r"^tts \(configured cuda:1\): .* on cuda:0$"),
        device_audit("tts", "cuda:1"),
    ):
        torch.cuda.synchronize(0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with (
        pytest.raises(DeviceAuditError, match=r"torch\.cuda\.synchronize on cuda:0"),
        device_audit("tts", "cuda:1"),
    ):
        torch.cuda.synchronize()  # device-less: the current device, cuda:0

    class Stream:
        device = torch.device("cuda:0")

    with (
        pytest.raises(DeviceAuditError, match=r"torch\.cuda\.Stream\.synchronize on cuda:0"),
        device_audit("tts", "cuda:1"),
    ):
        torch.cuda.Stream.synchronize(Stream())
    with (
        pytest.raises(DeviceAuditError, match=r"torch\.cuda\.set_device on cuda:0"),
        device_audit("tts", "cuda:1"),
    ):
        torch.cuda.set_device(0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_device_less_cuda_call_lands_on_the_current_device_and_fails() -> None:
    with (
        pytest.raises(
            DeviceAuditError, match=r"^asr \(configured cpu\): aten::_to_copy on cuda:0$"
        ),
        device_audit("asr", "cpu"),
    ):
        torch.zeros(2).cuda()


def test_off_enters_nothing_and_patches_nothing() -> None:
    """Off is a nullcontext: no mode, no check, and (in a fresh process) torch.cuda's
    functions untouched."""
    audit = device_audit("asr", "cpu", enabled=False)
    assert isinstance(audit, contextlib.nullcontext)
    with audit:
        assert _current_mode() is None and active_audit() is None
        torch.zeros(2).to("meta")  # wrong device, not audited
    script = (
        "import torch\n"
        "from backends.gpu.device_audit import device_audit\n"
        "with device_audit('asr', 'cpu', enabled=False):\n"
        "    torch.zeros(2).to('meta')\n"
        "wrapped = [f for f in (torch.cuda.synchronize, torch.cuda.set_device,"
        " torch.cuda.Stream.synchronize) if hasattr(f, '__wrapped__')]\n"
        "assert not wrapped, wrapped\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


# --- the stages under the audit -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    pytest.importorskip("PIL")
    sys.path.insert(0, str(ROOT / "tools"))
    from gpu_tiny_models import build_all  # type: ignore[import-not-found]

    paths: dict[str, str] = build_all(tmp_path_factory.mktemp("tiny"))
    return paths


def _jpeg(color: tuple[int, int, int]) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (320, 240), color).save(out, format="JPEG")
    return out.getvalue()


async def _raw_request(engine: Any, prompt: Any, tokens: int = 6) -> str:
    from backends.gpu.engine_api import Sampling

    stream = await engine.submit("raw", prompt, Sampling(max_tokens=tokens))
    return "".join([piece async for piece in stream])


def test_the_transformers_engines_run_clean_under_the_audit(tiny: dict[str, str]) -> None:
    """A spoken turn's ASR and a camera turn's VLM (a frame prepared on arrival, then
    the turn) through the real stages, every op audited: none leaves the CPU."""
    from backends.base import AsrRequest, PromptContext, VlmDecisionResult, VlmRequest
    from backends.gpu.asr import AsrStage
    from backends.gpu.engine_api import Sampling
    from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine
    from backends.gpu.vlm import VlmStage

    async def main() -> tuple[str, Any]:
        asr_engine = HfAsrEngine(tiny["asr"], device_audit=True)
        asr_placement = replace(default_placement(1).asr, model=tiny["asr"], max_model_len=1024)
        async with AsrStage(asr_engine, asr_placement, sampling=Sampling(max_tokens=6)) as asr:
            pcm = (np.random.default_rng(0).standard_normal(16_000) * 0.05).astype(np.float32)
            transcript = await asr.transcribe(AsrRequest("a1", pcm))
        # Any: GenerationEngine declares prepares_frames settable, HfVlmEngine's is a property
        vlm_engine: Any = HfVlmEngine(tiny["vlm"], device_audit=True)
        vlm_placement = replace(default_placement(1).vlm, model=tiny["vlm"], max_model_len=1024)
        stage = VlmStage(
            vlm_engine, vlm_placement, sampling=Sampling(max_tokens=8), image_tokens=64
        )
        async with stage:
            frame = _jpeg((200, 30, 30))
            await stage.prepare_frame(frame)
            ctx = PromptContext(
                system="You watch a camera.", transcript="What is red?", frames=(frame,)
            )
            items = [item async for item in stage.generate(VlmRequest("v1", ctx))]
        return transcript.text, items[-1]

    text, decision = anyio.run(main)
    assert isinstance(text, str)
    assert isinstance(decision, VlmDecisionResult)


@pytest.mark.parametrize("audited", [True, False])
def test_a_planted_op_in_an_engines_worker_thread_fails_its_request(
    tiny: dict[str, str], audited: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode runs in the engine's own thread: the audit is entered there. A token
    pick that also makes a meta tensor fails the request when audited, and passes when
    the audit is off (nothing wrapped)."""
    from backends.gpu import hf_engines
    from backends.gpu.engine_api import EnginePrompt
    from backends.gpu.hf_engines import HfVlmEngine

    real_sample = hf_engines._sample

    def sample_and_misplace(*args: Any) -> int:
        torch.zeros(1, device="meta")  # e.g. a scratch buffer on "the" other device
        return real_sample(*args)

    async def main() -> str:
        engine = HfVlmEngine(tiny["vlm"], device_audit=audited, max_len=512)
        await engine.start()
        try:
            monkeypatch.setattr(hf_engines, "_sample", sample_and_misplace)
            return await _raw_request(engine, EnginePrompt("<|im_start|>user\nhello<|im_end|>\n"))
        finally:
            await engine.close()

    if audited:
        with pytest.raises(
            DeviceAuditError, match=r"^vlm \(configured cpu\): aten::zeros on meta$"
        ):
            anyio.run(main)
    else:
        assert isinstance(anyio.run(main), str)


class _TorchSynth:
    """A `SpeechSynthesizer` doing a little torch work per chunk, optionally on meta."""

    sample_rate_hz = 24_000

    def __init__(self, device: str) -> None:
        self.device = device

    def load(self) -> None:
        pass

    def warmup(self) -> None:
        torch.zeros(4) @ torch.zeros(4)

    def stream(
        self, text: str, *, speaker: str, language: str, stop: threading.Event
    ) -> Iterator[Any]:
        for _ in range(2):
            samples = torch.zeros(1920).to(self.device)
            yield np.zeros(samples.shape[0], np.float32)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("audited", "device"), [(True, "cpu"), (True, "meta"), (False, "meta")])
def test_the_tts_stage_audits_its_worker_threads(audited: bool, device: str) -> None:
    placement = replace(default_placement().tts, device="cpu", device_audit=audited)

    async def main() -> int:
        async with TtsStage(_TorchSynth(device), placement) as stage:
            await stage.warmup()
            chunks = [c async for c in stage.synthesize(TtsRequest("t1", "Hello.", 24_000))]
        return len(chunks)

    if audited and device == "meta":
        with pytest.raises(
            DeviceAuditError, match=r"^tts \(configured cpu\): aten::_to_copy on meta$"
        ):
            anyio.run(main)
    else:
        assert anyio.run(main) == 2


@pytest.mark.parametrize("batch_streams", [0, 4])
def test_the_tiny_tts_runs_clean_under_the_audit(tmp_path: Path, batch_streams: int) -> None:
    """The eager `qwen_tts` path (Talker, code predictor, Code2Wav) of a tiny checkpoint,
    and the batched streams' (their loop thread audited), warm-up and one utterance,
    every op audited on the CPU."""
    if importlib.util.find_spec("qwen_tts") is None:
        pytest.skip("needs qwen-tts-hf (make test-gpu-path)")
    sys.path.insert(0, str(ROOT / "tools"))
    from gpu_tiny_models import build_tiny_tts, build_tokenizer

    from backends.gpu.tts import make_synthesizer

    model = build_tiny_tts(tmp_path / "tts", build_tokenizer())
    placement = replace(
        default_placement().tts,
        model=str(model),
        device="cpu",
        dtype="float32",
        max_tokens=6,
        device_audit=True,
        batch_streams=batch_streams,
    )

    async def main() -> bytes:
        async with TtsStage(make_synthesizer(placement), placement) as stage:
            await stage.warmup()
            request = TtsRequest("t1", "Hello there, the cat is on the table.", 24_000)
            return b"".join([c.pcm16 async for c in stage.synthesize(request)])

    assert anyio.run(main)
