"""Moonshine tiny-en on our onnxruntime: transcripts of Piper speech, lines of a long
utterance, the pinned files, and failure translation.

Each transcript asserted word for word also records its margin: its decode's closest
choice, the chosen token's probability minus the next best's (greedy decoding keeps its
choice while that stays above 0)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.base import AsrRequest, BackendUnavailable, StageFailed
from backends.cpu.assets import MOONSHINE_TINY_EN
from backends.cpu.backend import create_backend
from backends.cpu.moonshine import LINE_MAX_S, LINE_MIN_S, MoonshineAsr, line_cuts
from tests.backends.cpu_audio import HUMAN_SPEECH_TEXT, human_speech
from tests.model_margins import expect_above

from .conftest import Speech

pytestmark = pytest.mark.anyio

RATE_HZ = 16_000


def _installed() -> bool:
    return importlib.util.find_spec("moonshine_voice") is not None


@pytest.fixture(scope="module")
async def asr() -> AsyncIterator[MoonshineAsr]:
    pytest.importorskip("onnxruntime")
    if not _installed():
        pytest.skip("moonshine-voice is not installed (pip install --no-deps moonshine-voice)")
    stage = MoonshineAsr()
    async with stage:
        yield stage


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower().replace("colour", "color"))


def _expect_sure(asr: MoonshineAsr, pcm: np.ndarray, text: str, what: str) -> None:
    decoded, steps = asr.decode(pcm)
    assert decoded == text, (decoded, text)
    token, lead = min(steps, key=lambda s: s[1])
    expect_above(lead, 0.0, f"Moonshine's closest choice in {what} ({token!r})")


@pytest.mark.slow
@pytest.mark.model_output
@pytest.mark.parametrize(
    "spoken", ["Show me the red ball.", "What do you see here?", "Please look at the camera."]
)
async def test_transcript_of_piper_speech_has_the_spoken_words(
    asr: MoonshineAsr, cpu_speech: Speech, spoken: str
) -> None:
    pcm = cpu_speech(spoken, RATE_HZ)
    transcript = await asr.transcribe(AsrRequest("r1", pcm))
    assert transcript.request_id == "r1"
    assert _words(transcript.text) == _words(spoken)
    _expect_sure(asr, pcm, transcript.text, repr(spoken))


@pytest.mark.slow
@pytest.mark.model_output
async def test_a_long_utterance_is_transcribed_line_by_line_with_every_word(
    asr: MoonshineAsr,
) -> None:
    speech = human_speech()  # 11 s: longer than a line
    assert len(line_cuts(speech)) == 2
    transcript = await asr.transcribe(AsrRequest("r2", speech))
    assert _words(transcript.text) == _words(HUMAN_SPEECH_TEXT)


async def test_a_line_that_ended_is_decoded_once_for_every_partial_after_it(
    asr: MoonshineAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    utterance = (rng.standard_normal(int(14 * RATE_HZ)) * 0.01).astype(np.float32)
    decoded: list[int] = []
    real = asr.decode

    def counting(line: np.ndarray) -> tuple[str, list[tuple[str, float]]]:
        decoded.append(line.size)
        return real(line)

    monkeypatch.setattr(asr, "decode", counting)
    first_cut = line_cuts(utterance)[0]
    await asr.transcribe(AsrRequest("p1", utterance[: int(10 * RATE_HZ)], partial=True))
    assert decoded == [first_cut, int(10 * RATE_HZ) - first_cut]
    decoded.clear()
    await asr.transcribe(AsrRequest("final", utterance))
    # the first line again from what the partial decoded; only the rest is new work
    assert decoded[0] != first_cut
    assert sum(decoded) == utterance.size - first_cut


def test_a_growing_utterance_is_cut_at_the_same_places() -> None:
    rng = np.random.default_rng(3)
    audio = (rng.standard_normal(int(30 * RATE_HZ)) * 0.1).astype(np.float32)
    audio[int(6.2 * RATE_HZ) : int(6.5 * RATE_HZ)] = 0.0  # a pause inside the first line
    whole = line_cuts(audio)
    assert int(6.2 * RATE_HZ) < whole[0] < int(6.5 * RATE_HZ)  # in the pause
    for seconds in (9, 13.5, 21, 29):
        prefix = line_cuts(audio[: int(seconds * RATE_HZ)])
        assert prefix[:-1] == [cut for cut in whole if cut < prefix[-1]][: len(prefix) - 1]
    lines = np.diff([0, *whole])
    assert all(LINE_MIN_S * RATE_HZ <= n <= LINE_MAX_S * RATE_HZ for n in lines[:-1])
    assert lines[-1] <= LINE_MAX_S * RATE_HZ


def test_a_short_utterance_is_one_line() -> None:
    audio = np.zeros(int(LINE_MAX_S * RATE_HZ), np.float32)
    assert line_cuts(audio) == [audio.size]


async def test_empty_utterance_has_an_empty_transcript(asr: MoonshineAsr) -> None:
    transcript = await asr.transcribe(AsrRequest("r3", np.zeros(0, dtype=np.float32)))
    assert transcript.text == ""


async def test_a_click_shorter_than_the_encoder_needs_is_transcribed(asr: MoonshineAsr) -> None:
    transcript = await asr.transcribe(AsrRequest("r4", np.zeros(800, dtype=np.float32)))
    assert isinstance(transcript.text, str)


async def test_library_failure_becomes_stage_failed(
    asr: MoonshineAsr, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        def run(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("onnxruntime exploded")

    monkeypatch.setattr(asr, "_encoder", Broken())
    with pytest.raises(StageFailed) as info:
        await asr.transcribe(AsrRequest("r5", np.zeros(16_000, dtype=np.float32)))
    assert info.value.stage == "asr"
    assert "r5" in str(info.value)
    assert "onnxruntime exploded" in str(info.value)


async def test_transcribe_before_loading_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="not loaded"):
        await MoonshineAsr().transcribe(AsrRequest("r6", np.zeros(160, np.float32)))


@pytest.mark.parametrize("part", ["encoder", "decoder", "tokenizer"])
def test_packaged_model_files_have_the_pinned_sha256(part: str) -> None:
    if not _installed():
        pytest.skip("moonshine-voice is not installed")
    pinned = getattr(MOONSHINE_TINY_EN, part)
    path = pinned.path()
    assert path.parent.name == "tiny-en"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned.sha256


def test_a_model_file_with_another_sha256_is_unavailable_and_says_how_to_install(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "encoder_model.ort"
    fake.write_bytes(b"not the pinned model")
    with pytest.raises(BackendUnavailable) as info:
        MOONSHINE_TINY_EN.encoder.read(fake)
    assert MOONSHINE_TINY_EN.encoder.sha256 in str(info.value)
    assert "pip install --no-deps 'moonshine-voice==0.1.0'" in str(info.value)
    assert info.value.stage == "asr"


def test_the_asr_setting_picks_the_stage() -> None:
    assert type(create_backend(asr="moonshine").asr).__name__ == "MoonshineAsr"
    assert type(create_backend(asr="whisper").asr).__name__ == "WhisperAsr"
    # a faster-whisper directory means Whisper
    assert type(create_backend(asr_model="/models/w").asr).__name__ == "WhisperAsr"
    assert create_backend(asr="moonshine", profile="camera").asr is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"asr": "wav2vec"}, "unknown asr"),
        ({"asr": "moonshine", "asr_model": "/models/w"}, "faster-whisper"),
    ],
)
def test_an_asr_setting_that_cannot_be_served_is_refused(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(BackendUnavailable, match=message):
        create_backend(**options)
