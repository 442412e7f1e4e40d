"""`StageLifecycle`: the one load/release lifecycle every backend stage shares."""

from __future__ import annotations

import pytest

from backends.base import StageLifecycle
from backends.cpu.asr import WhisperAsr
from backends.cpu.describer import FrameDescriber
from backends.cpu.hibari_tts import HibariTts
from backends.cpu.tts import PiperTts
from backends.cpu.vad import SileroVad
from backends.gpu.asr import AsrStage
from backends.gpu.tts import TtsStage
from backends.gpu.vlm import VlmStage
from backends.scripted.stages import ScriptedAsr, ScriptedTts, ScriptedVad, ScriptedVlm

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recording(StageLifecycle):
    name = "rec"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def load(self) -> None:
        self.calls.append("load")

    async def release(self) -> None:
        self.calls.append("release")


@pytest.mark.parametrize(
    "stage",
    [
        ScriptedVad,
        ScriptedAsr,
        ScriptedVlm,
        ScriptedTts,
        SileroVad,
        WhisperAsr,
        FrameDescriber,
        PiperTts,
        HibariTts,
        AsrStage,
        VlmStage,
        TtsStage,
    ],
)
def test_every_stage_uses_the_shared_lifecycle(stage: type) -> None:
    assert issubclass(stage, StageLifecycle)
    assert "__aenter__" not in vars(stage) and "__aexit__" not in vars(stage)


async def test_entering_loads_and_returns_the_stage_leaving_releases() -> None:
    stage = Recording()
    async with stage as entered:
        assert entered is stage
        assert stage.calls == ["load"]
    assert stage.calls == ["load", "release"]


async def test_an_error_in_the_block_still_releases_and_propagates() -> None:
    stage = Recording()
    with pytest.raises(RuntimeError, match="boom"):
        async with stage:
            raise RuntimeError("boom")
    assert stage.calls == ["load", "release"]


async def test_the_default_hooks_do_nothing() -> None:
    async with StageLifecycle() as stage:
        assert isinstance(stage, StageLifecycle)
