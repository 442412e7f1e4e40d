"""Smart Turn v3.2, the CPU backend's end-of-turn model (B32): its pinned file, our own
Whisper log-mel features checked against two other implementations, and the regression
cases with real (Piper) speech through Silero, the session's turn detector and the model.

The speech cases are replayed sans-IO: the audio goes into a `SessionProtocol` in 20 ms
appends, Silero scores every 32 ms frame as the runtime would, and each `SubmitTurnEnd`
is answered at once by the model. Nothing depends on the wall clock, so the verdicts and
the turns are the same on every machine; the probabilities seen are printed.

A mid-sentence pause is made by cutting one spoken sentence where Piper's alignment ends
"I want to know", before "what colour this is", and putting a second of low noise in
between: both halves keep the sentence's continuing intonation. (Piper speaking "I want
to know" alone ends it like a finished sentence, and the model rightly hears it so.)

Every verdict asserted here keeps a margin of at least 0.15 from the eagerness threshold
(`tests/model_margins.py`), on this CPU and on an emulated one without AVX-512
(`tools/model_margins.py`). A sentence whose score sits near the threshold ("I want to
know what colour this is." said whole: 0.51-0.89 as its audio moves by -110 dB) is a
figure that tool reports, not a case here.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from backends.base import BackendUnavailable, TurnEndRequest
from backends.cpu.assets import (
    SMART_TURN_SHA256,
    read_verified_turn_model,
    smart_turn_model_path,
)
from backends.cpu.log_mel import N_FRAMES, N_MELS, WINDOW_SAMPLES, last_window, log_mel
from backends.cpu.smart_turn import SmartTurn
from backends.cpu.vad import SileroVad
from clients.duplex_client import DuplexClient
from core.session import SessionProtocol
from spec import events as ev
from spec.effects import SubmitTurnEnd
from spec.session_config import EAGERNESS, validate_session
from spec.stage_results import TurnEndVerdict, VadScores
from tests.backends.cpu_audio import (
    HUMAN_SPEECH_PAUSES,
    VAD_END_THRESHOLD,
    expect_sure_words,
    human_speech,
    paused_after,
    quiet_noise,
    require_cpu_extra,
    shared_cpu_server,
    speech,
    speech_bounds,
    to_pcm16,
)
from tests.model_margins import expect_above, expect_below
from tests.system_tools import qemu_x86_64_binary

pytestmark = pytest.mark.anyio

RATE = 16_000
ROOT = Path(__file__).resolve().parents[2]


def _model_or_skip() -> Path:
    try:
        return smart_turn_model_path()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


# --- the file ----------------------------------------------------------------------------


def test_b32_the_packaged_smart_turn_model_has_the_pinned_sha256() -> None:
    path = _model_or_skip()
    assert path.name == "smart-turn-v3.2-cpu.onnx"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SMART_TURN_SHA256


def test_b32_a_turn_model_with_another_digest_is_unavailable_and_says_how_to_install(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "smart-turn.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(BackendUnavailable) as info:
        read_verified_turn_model(fake)
    assert SMART_TURN_SHA256 in str(info.value)
    assert "pip install --no-deps 'pipecat-ai==1.14.0'" in str(info.value)


async def test_b32_a_missing_configured_turn_model_never_falls_back(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.onnx"
    with pytest.raises(BackendUnavailable, match="never falls back"):
        async with SmartTurn(missing):
            pass


def test_b32_a_missing_pipecat_package_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "pipecat" else real_find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(BackendUnavailable) as info:
        smart_turn_model_path()
    assert "pip install --no-deps 'pipecat-ai==1.14.0'" in str(info.value)


# --- the features ------------------------------------------------------------------------


def _signals() -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(3)
    out = []
    for n in (1_000, 40_000, WINDOW_SAMPLES, 200_000):
        t = np.arange(n)
        out.append(
            (rng.normal(0, 0.05, n) + 0.3 * np.sin(t / 7.0) * np.sin(t / 900)).astype(np.float32)
        )
    return out


def test_b32_the_window_is_the_last_8_s_zero_padded_in_front() -> None:
    short = np.ones(10, dtype=np.float32)
    window = last_window(short)
    assert len(window) == WINDOW_SAMPLES and window[-10:].sum() == 10 and window[:-10].sum() == 0
    long = np.arange(WINDOW_SAMPLES + 5, dtype=np.float32)
    assert last_window(long)[0] == 5


def test_b32_log_mel_matches_faster_whispers_whisper_features() -> None:
    """faster-whisper's extractor (numpy, its own code) on the same normalized window."""
    extractor_module = pytest.importorskip("faster_whisper.feature_extractor")
    extractor = extractor_module.FeatureExtractor(feature_size=N_MELS, chunk_length=8)
    for pcm in _signals():
        window = last_window(pcm)
        normalized = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
        reference = extractor(normalized, padding=0)
        ours = log_mel(pcm)
        assert ours.shape == reference.shape == (N_MELS, N_FRAMES)
        assert ours.dtype == np.float32
        assert np.abs(ours - reference).max() < 1e-4


def test_b32_log_mel_matches_the_extractor_smart_turn_ships_with() -> None:
    """pipecat-ai's own feature code (loaded from its file: the package is never imported)."""
    model = _model_or_skip()
    source = model.parents[1] / "_whisper_features.py"
    spec = importlib.util.spec_from_file_location("smart_turn_features", source)
    if spec is None or spec.loader is None:
        pytest.skip(f"{source} is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for pcm in _signals():
        reference = module.compute_whisper_log_mel_features(last_window(pcm))
        assert np.abs(log_mel(pcm) - reference).max() < 1e-5


# --- the same verdict on every CPU -------------------------------------------------------

#: run under `qemu-x86_64 -cpu max` (AVX2, no AVX-512): the product's whole prediction on
#: the samples in argv[1], and, for the record, onnxruntime's default fused int8 kernels
_ON_AN_AVX2_CPU = """
import json, sys
import anyio
import numpy as np
from numpy._core._multiarray_umath import __cpu_features__ as cpu
from backends.cpu.assets import read_verified_turn_model, smart_turn_model_path
from backends.cpu.failures import single_thread_onnx
from backends.cpu.log_mel import log_mel
from backends.cpu.smart_turn import SmartTurn
assert cpu["AVX2"] and not cpu["AVX512F"], "the emulated CPU is not AVX2 without AVX-512"
pcm = np.load(sys.argv[1])
async def product():
    async with SmartTurn() as turn:
        return turn.predict_sync(pcm)
fused = single_thread_onnx(read_verified_turn_model(smart_turn_model_path()), stage="t", what="t")
(score,) = fused.run(None, {"input_features": log_mel(pcm)[None]})
print(json.dumps({"product": anyio.run(product), "fused_int8": float(score.reshape(-1)[0])}))
"""


@pytest.mark.slow
@pytest.mark.emulated
async def test_b32_a_cpu_without_avx512_gives_the_same_verdict(
    models: tuple[SileroVad, SmartTurn], tmp_path: Path
) -> None:
    """Regression: onnxruntime's fused int8 kernels saturate on AVX2 (0.35 there against
    0.84 here for this sentence); the product's session runs the QDQ graph as written."""
    qemu = qemu_x86_64_binary()
    _, turn = models
    pcm = np.concatenate(
        [quiet_noise(0.5, rms=0.0005, seed=4), speech("I want to know what colour this is.")]
    )
    np.save(tmp_path / "pcm.npy", pcm)
    here = turn.predict_sync(pcm)
    done = await anyio.run_process(
        [qemu, "-cpu", "max", sys.executable, "-c", _ON_AN_AVX2_CPU, str(tmp_path / "pcm.npy")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    there = json.loads(done.stdout.decode().strip().splitlines()[-1])
    print(f"verdict here {here:.4f}; on the emulated AVX2 CPU {there}")
    assert abs(there["product"] - here) < 0.01


# --- the model on real speech --------------------------------------------------------------


@pytest.fixture(scope="module")
async def models() -> AsyncIterator[tuple[SileroVad, SmartTurn]]:
    require_cpu_extra()
    _model_or_skip()
    try:
        async with SileroVad() as vad, SmartTurn() as turn:
            await turn.warmup()
            yield vad, turn
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


@dataclass
class Replay:
    """What a session made of one recording: its turns (audio_end_ms) and the verdicts."""

    stops: list[int] = field(default_factory=list)
    verdicts: list[float] = field(default_factory=list)
    #: the audio ms at which each verdict was asked (the session's clock is the audio's)
    verdict_ms: list[int] = field(default_factory=list)
    #: for each stop, whether it came with a verdict (not with a frame or the clock)
    by_verdict: list[bool] = field(default_factory=list)
    #: Silero's probability of each 32 ms frame, by the ms its frame ends at
    probabilities: dict[int, float] = field(default_factory=dict)

    def highest_between(self, start_ms: float, end_ms: float) -> float:
        """Silero's highest probability over the frames ending in [start_ms, end_ms]."""
        return max(p for ms, p in self.probabilities.items() if start_ms <= ms <= end_ms)


def replay(vad: SileroVad, turn: SmartTurn, audio: npt.NDArray[np.float32], td: dict) -> Replay:
    """Feed `audio` to a session in 20 ms appends, scoring and judging as the runtime does,
    with every verdict arriving at once."""
    config = validate_session({"turn_detection": {**td, "create_response": False}})
    session = SessionProtocol(session_id="s", config=config)
    state = vad.new_state()
    pcm16 = np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")
    result = Replay()
    scored = 0
    now = 0

    def drain(by_verdict: bool) -> list[Any]:
        out = session.next_outputs()
        stops = [o for o in out if isinstance(o, ev.InputAudioBufferSpeechStopped)]
        result.stops += [s.audio_end_ms for s in stops]
        result.by_verdict += [by_verdict] * len(stops)
        return out

    for start in range(0, len(pcm16), 320):
        now += 20
        session.receive(ev.InputAudioBufferAppend(audio=pcm16[start : start + 320].tobytes()), now)
        drain(False)
        while scored + 512 <= min(start + 320, len(pcm16)):
            frame = pcm16[scored : scored + 512].astype(np.float32) / 32768.0
            scored += 512
            probability = float(vad.score_sync([state], frame[None])[0])
            result.probabilities[scored * 1000 // RATE] = probability
            session.backend_event(VadScores((probability,)), now)
            for request in [o for o in drain(False) if isinstance(o, SubmitTurnEnd)]:
                pcm = np.frombuffer(request.pcm16, dtype="<i2").astype(np.float32) / 32768.0
                verdict = turn.predict_sync(pcm)
                result.verdicts.append(verdict)
                result.verdict_ms.append(scored * 1000 // RATE)
                session.backend_event(TurnEndVerdict(request.request_id, verdict), now)
                drain(True)
    return result


def _paused(text: str, prefix: str) -> tuple[npt.NDArray[np.float32], float]:
    """`text` with 1 s of low noise right after `prefix` (`paused_after`), 0.5 s before it
    and 5 s after it (longer than medium's maximum wait); and where the second half starts
    (ms)."""
    sentence, _, resumed_s = paused_after(text, prefix)
    audio = np.concatenate(
        [quiet_noise(0.5, rms=0.0005, seed=1), sentence, quiet_noise(5.0, rms=0.0005, seed=3)]
    )
    return audio, (0.5 + resumed_s) * 1000


def _mid_sentence_pause() -> tuple[npt.NDArray[np.float32], float]:
    """ "I want to know ... what colour this is.", paused after "know"."""
    return _paused("I want to know what colour this is.", "I want to know")


SERVER_VAD = {"type": "server_vad"}
SEMANTIC_MEDIUM = {"type": "semantic_vad", "eagerness": "medium"}
MEDIUM = EAGERNESS["medium"].threshold
COMPLETE = (
    "Is this red or blue?",
    "What is on the table?",
    "Describe what you see.",
    "How many fingers am I holding up?",
)


def _expect_quiet_pause(run: Replay, pause_start_ms: float, resumed_ms: float, what: str) -> None:
    """Silero heard the pause as quiet: every frame from 200 ms into it (its recurrent state
    has let go of the word by then) under the stop's threshold."""
    expect_below(run.highest_between(pause_start_ms + 200, resumed_ms), VAD_END_THRESHOLD, what)


@pytest.mark.slow
@pytest.mark.model_output
async def test_b32_a_mid_sentence_pause_ends_the_turn_under_server_vad_but_not_semantic_vad(
    models: tuple[SileroVad, SmartTurn],
) -> None:
    vad, turn = models
    audio, resumed_ms = _mid_sentence_pause()
    server = replay(vad, turn, audio, SERVER_VAD)
    semantic = replay(vad, turn, audio, SEMANTIC_MEDIUM)
    print(
        f"server_vad stops {server.stops}; semantic_vad stops {semantic.stops}, "
        f"verdicts {[round(v, 3) for v in semantic.verdicts]}"
    )
    _expect_quiet_pause(server, resumed_ms - 1000, resumed_ms, "Silero in the pause after 'know'")
    assert len(server.stops) == 2  # the pause split the sentence
    assert server.stops[0] < resumed_ms
    # one turn: the model held the pause (its first verdict); the turn ended after the
    # second half (by a later verdict or, failing one, medium's maximum wait)
    expect_below(semantic.verdicts[0], MEDIUM, "Smart Turn at 'I want to know ...'")
    assert len(semantic.stops) == 1
    assert semantic.stops[0] > resumed_ms


@pytest.mark.slow
@pytest.mark.model_output
@pytest.mark.parametrize("text", COMPLETE)
async def test_b32_the_end_of_a_complete_sentence_ends_the_turn_under_semantic_vad(
    models: tuple[SileroVad, SmartTurn], text: str
) -> None:
    vad, turn = models
    voice = speech(text)
    audio = np.concatenate(
        [quiet_noise(0.5, rms=0.0005, seed=4), voice, quiet_noise(2.0, rms=0.0005, seed=5)]
    )
    semantic = replay(vad, turn, audio, SEMANTIC_MEDIUM)
    end_ms = (0.5 + speech_bounds(voice)[1]) * 1000
    print(
        f"{text!r}: verdicts {[round(v, 3) for v in semantic.verdicts]}, "
        f"stopped at {semantic.stops} ms, speech ended at {end_ms:.0f} ms"
    )
    assert len(semantic.verdicts) == 1
    expect_above(semantic.verdicts[0], MEDIUM, f"Smart Turn after {text!r}")
    assert semantic.by_verdict == [True]


async def test_b32_predict_runs_off_the_loop_and_answers_a_probability(
    models: tuple[SileroVad, SmartTurn],
) -> None:
    _, turn = models
    probability = await turn.predict(TurnEndRequest("r1", speech("Is this red or blue?")))
    assert 0.0 <= probability <= 1.0


def _stops_through_the_server(
    audio: npt.NDArray[np.float32], detector: dict, turns: int
) -> list[ev.InputAudioBufferSpeechStopped]:
    """Stream `audio` in real time to the shared CPU server (uvicorn on 127.0.0.1, 20 ms
    appends); the speech_stopped events once `turns` came and the session closed."""
    require_cpu_extra()
    _model_or_skip()
    server = shared_cpu_server()

    async def run() -> list[ev.InputAudioBufferSpeechStopped]:
        async with DuplexClient.connect(server.ws_url) as client:
            await client.update_session(turn_detection={**detector, "create_response": False})
            await client.stream_audio(to_pcm16(audio), realtime=True)
            for _ in range(turns):
                await client.wait_for("input_audio_buffer.speech_stopped", timeout=30)
            await client.close_session()
            await client.wait_for("session.closed", timeout=10)
            return [e for e in client.history if isinstance(e, ev.InputAudioBufferSpeechStopped)]

    stopped = asyncio.run(run())
    print(f"{detector['type']}: speech_stopped at {[e.audio_end_ms for e in stopped]} ms")
    return stopped


@pytest.mark.slow
@pytest.mark.parametrize(("detector", "turns"), [(SERVER_VAD, 2), (SEMANTIC_MEDIUM, 1)])
def test_b32_through_the_real_server_a_mid_sentence_pause_splits_only_a_server_vad_turn(
    detector: dict, turns: int
) -> None:
    """The same case live. A verdict that came too late to hold the pause would be
    dropped, not applied, so the count does not depend on the machine's speed."""
    audio, _ = _mid_sentence_pause()
    assert len(_stops_through_the_server(audio, detector, turns)) == turns


#: a pause the end-of-turn model calls finished, after words that cannot end a sentence
TRAILING_TEXT = "Tell me if this banana is ripe."
TRAILING_PREFIX = "Tell me if"


def _trailing_pause() -> npt.NDArray[np.float32]:
    return _paused(TRAILING_TEXT, TRAILING_PREFIX)[0]


@pytest.mark.slow
@pytest.mark.model_output
async def test_b32_smart_turn_alone_ends_the_turn_in_a_pause_after_tell_me_if(
    models: tuple[SileroVad, SmartTurn],
) -> None:
    """Without the words (no live transcripts here) the model's verdict ends the turn in
    the pause: what holds it in the next test is the pause partial's text."""
    vad, turn = models
    semantic = replay(vad, turn, _trailing_pause(), SEMANTIC_MEDIUM)
    print(f"verdicts {[round(v, 3) for v in semantic.verdicts]}, stops {semantic.stops}")
    expect_above(semantic.verdicts[0], MEDIUM, "Smart Turn at 'Tell me if ...'")
    assert len(semantic.stops) == 2


async def _transcribe(audio: npt.NDArray[np.float32]) -> str:
    from backends.base import AsrRequest
    from backends.cpu.asr import WhisperAsr

    async with WhisperAsr() as asr:
        return (await asr.transcribe(AsrRequest("t", audio))).text


@pytest.mark.slow
@pytest.mark.model_output
def test_b32_whisper_hears_the_words_before_the_pause_trail_off_after_if() -> None:
    """What the next test's pause partial hears: the audio up to the pause ends on "if",
    a word no sentence ends on (the live transcript's cue, B33)."""
    require_cpu_extra()
    sentence, pause_s, _ = paused_after(TRAILING_TEXT, TRAILING_PREFIX)
    before = np.concatenate([sentence[: round(pause_s * RATE)], quiet_noise(0.3)])
    text = asyncio.run(_transcribe(before))
    print(f"Whisper hears {text!r}")
    # any case (the margin's token classes ignore case; so does the trailing-word rule)
    assert text.rstrip(".").lower().split() == ["tell", "me", "if"]
    expect_sure_words(before, text, "'Tell me if' before the pause")


@pytest.mark.slow
@pytest.mark.parametrize(("detector", "turns"), [(SERVER_VAD, 2), (SEMANTIC_MEDIUM, 1)])
def test_b32_through_the_real_server_a_pause_after_words_that_trail_off_holds_semantic_vad(
    detector: dict, turns: int
) -> None:
    """Whisper hears the audio up to the pause as "Tell me if...": a sentence that cannot
    end there, so semantic_vad holds the pause the model called finished (the partial is
    asked with the verdict and, on a loaded machine, still well inside the verdict's 2 s
    budget)."""
    assert len(_stops_through_the_server(_trailing_pause(), detector, turns)) == turns


@pytest.mark.slow
@pytest.mark.parametrize("detector", [SERVER_VAD, SEMANTIC_MEDIUM], ids=["server_vad", "medium"])
def test_b32_a_real_speakers_pauses_inside_his_sentence_split_only_server_vad_turns(
    detector: dict,
) -> None:
    """Real human speech: Kennedy pauses inside one sentence for 1 s after "ask not" and
    0.5 s after "can do for you,". server_vad ends a turn in both; semantic_vad at medium
    in neither, and ends the turn after the sentence. (His 1.15 s pause after "my fellow
    Americans," is not asserted: Smart Turn calls it finished, 0.91, and Whisper hears
    "And so my fellow Americans." there; docs/performance.md section 3
    reports it.)"""
    voice = human_speech()
    lead_s = 0.5
    audio = np.concatenate(
        [quiet_noise(lead_s, rms=0.0005, seed=1), voice, quiet_noise(5.0, rms=0.0005, seed=2)]
    )
    # the turn after the sentence: the first to end past its last pause
    after_ms = (lead_s + HUMAN_SPEECH_PAUSES[-1][1]) * 1000 + 300
    require_cpu_extra()
    _model_or_skip()
    server = shared_cpu_server()

    async def run() -> list[int]:
        async with DuplexClient.connect(server.ws_url) as client:
            await client.update_session(turn_detection={**detector, "create_response": False})
            await client.stream_audio(to_pcm16(audio), realtime=True)
            stops: list[int] = []
            while not stops or stops[-1] <= after_ms:
                stopped = await client.wait_for("input_audio_buffer.speech_stopped", timeout=30)
                stops.append(stopped.audio_end_ms)
            await client.close_session()
            await client.wait_for("session.closed", timeout=10)
            return stops

    stops = asyncio.run(run())
    print(f"{detector['type']}: speech_stopped at {stops} ms")
    inside = [
        any((lead_s + start) * 1000 < stop <= (lead_s + end) * 1000 + 300 for stop in stops)
        for start, end in HUMAN_SPEECH_PAUSES[1:]
    ]
    assert inside == ([True, True] if detector is SERVER_VAD else [False, False])


@pytest.mark.slow
@pytest.mark.model_output
async def test_b32_smart_turn_holds_the_real_speakers_last_two_pauses_and_ends_his_sentence(
    models: tuple[SileroVad, SmartTurn],
) -> None:
    """The verdicts behind the previous test's semantic_vad case, replayed: held at "ask
    not" and at "can do for you,", finished after "your country.". (At "my fellow
    Americans," the model hears a finished phrase, about 0.91: reported, not asserted.)"""
    vad, turn = models
    lead_s = 0.5
    audio = np.concatenate(
        [
            quiet_noise(lead_s, rms=0.0005, seed=1),
            human_speech(),
            quiet_noise(5.0, rms=0.0005, seed=2),
        ]
    )
    semantic = replay(vad, turn, audio, SEMANTIC_MEDIUM)
    timed = list(zip(semantic.verdict_ms, semantic.verdicts, strict=True))
    print(f"verdicts (ms, score) {[(ms, round(v, 3)) for ms, v in timed]}")
    pauses = [((lead_s + s) * 1000, (lead_s + e) * 1000 + 300) for s, e in HUMAN_SPEECH_PAUSES]
    for (start, end), words in zip(pauses[1:], ("ask not", "can do for you,"), strict=True):
        inside = [v for ms, v in timed if start < ms <= end]
        assert inside, f"no verdict in the pause after {words!r}"
        for verdict in inside:
            expect_below(verdict, MEDIUM, f"Smart Turn in JFK's pause after {words!r}")
    after = [v for ms, v in timed if ms > pauses[-1][1]]
    assert len(after) == 1
    expect_above(after[0], MEDIUM, "Smart Turn after JFK's '... for your country.'")
