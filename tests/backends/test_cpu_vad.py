"""Silero VAD on onnxruntime: accuracy against known boundaries, and batching.

Scores and boundaries are held to the endpointing's own thresholds, each with its margin
recorded (`tests/model_margins.py`); the batching tests compare two ways of computing the
same scores on one CPU."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import numpy.typing as npt
import pytest

from backends.base import VAD_FRAME_SAMPLES, BackendUnavailable, StageFailed, VadState
from backends.cpu.vad import SileroVad
from tests.backends.cpu_audio import VAD_END_THRESHOLD, VAD_START_THRESHOLD, silero_turns
from tests.model_margins import expect_above, expect_below, expect_within

from .conftest import Speech

pytestmark = pytest.mark.anyio

RATE = 16_000
FRAME_MS = VAD_FRAME_SAMPLES * 1000 / RATE  # 32 ms

START_THRESHOLD, END_THRESHOLD = VAD_START_THRESHOLD, VAD_END_THRESHOLD


@pytest.fixture(scope="module")
async def vad() -> AsyncIterator[SileroVad]:
    pytest.importorskip("onnxruntime")
    try:
        stage = SileroVad()
        async with stage:
            await stage.warmup()
            yield stage
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


def _frames(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    usable = len(audio) // VAD_FRAME_SAMPLES * VAD_FRAME_SAMPLES
    return audio[:usable].reshape(-1, VAD_FRAME_SAMPLES)


def _score_alone(vad: SileroVad, audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    state = vad.new_state()
    return np.array([vad.score_sync([state], frame[None])[0] for frame in _frames(audio)])


def _utterance_with_known_boundaries(
    speech: Speech, text: str
) -> tuple[npt.NDArray[np.float32], float, float]:
    """1 s of quiet noise, the utterance trimmed by amplitude, 1 s of quiet noise."""
    utterance = speech(text, RATE)
    loud = np.flatnonzero(np.abs(utterance) > 0.02)
    utterance = utterance[loud[0] : loud[-1] + 1]
    rng = np.random.default_rng(7)
    pad = RATE
    audio = np.concatenate([np.zeros(pad), utterance, np.zeros(pad)]).astype(np.float32)
    audio += rng.normal(0.0, 0.001, len(audio)).astype(np.float32)  # about -60 dBFS
    start_ms = pad * 1000 / RATE
    end_ms = (pad + len(utterance)) * 1000 / RATE
    return audio, start_ms, end_ms


@pytest.mark.model_output
@pytest.mark.parametrize(
    "text",
    # ends land 30-75 ms late (Silero's state lets go of a word slowly): a case ending
    # over 68 ms late would be one 32 ms frame from the tolerance ("Show me the red ball."
    # ends 72 ms late, "Describe what you see." 76: not cases here)
    ["What colour is this?", "Please tell me what colour this ball is.", "Is this red or blue?"],
)
async def test_vad_finds_speech_start_and_end_within_100ms_of_truth(
    vad: SileroVad, cpu_speech: Speech, text: str
) -> None:
    audio, true_start_ms, true_end_ms = _utterance_with_known_boundaries(cpu_speech, text)
    probabilities = _score_alone(vad, audio)
    [turn] = silero_turns(probabilities.tolist())
    start_offset_ms = turn.start * FRAME_MS - true_start_ms
    end_offset_ms = (turn.last_speech + 1) * FRAME_MS - true_end_ms
    print(
        f"\nVAD offsets for {text!r}: start {start_offset_ms:+.1f} ms, "
        f"end {end_offset_ms:+.1f} ms (truth {true_start_ms:.0f}-{true_end_ms:.0f} ms)"
    )
    expect_within(start_offset_ms, 100, f"Silero's start of {text!r}", deciding=turn.start_deciding)
    expect_within(end_offset_ms, 100, f"Silero's end of {text!r}", deciding=turn.end_deciding)


@pytest.mark.model_output
async def test_silence_scores_low_and_speech_scores_high(
    vad: SileroVad, cpu_speech: Speech
) -> None:
    silence = np.zeros(RATE, dtype=np.float32)
    expect_below(_score_alone(vad, silence).max(), END_THRESHOLD, "Silero on digital silence")
    speech = cpu_speech("Show me the red ball.", RATE)
    expect_above(
        _score_alone(vad, speech).max(), START_THRESHOLD, "Silero on 'Show me the red ball.'"
    )


async def test_batched_scores_equal_per_session_scores(vad: SileroVad, cpu_speech: Speech) -> None:
    rng = np.random.default_rng(3)
    length = RATE * 2
    clips = [
        cpu_speech("What colour is this?", RATE),
        cpu_speech("Show me the red ball.", RATE),
        rng.normal(0.0, 0.05, length).astype(np.float32),
        np.zeros(length, dtype=np.float32),
    ]
    clips = [np.pad(c, (0, max(0, length - len(c))))[:length] for c in clips]
    alone = np.stack([_score_alone(vad, clip) for clip in clips])  # [sessions, frames]

    states = [vad.new_state() for _ in clips]
    framed = np.stack([_frames(clip) for clip in clips])  # [sessions, frames, 512]
    batched = np.stack(
        [await vad.score(states, framed[:, t, :]) for t in range(framed.shape[1])], axis=1
    )
    assert batched.shape == alone.shape
    np.testing.assert_allclose(batched, alone, atol=1e-4)
    # the sessions really differ: speech against silence
    assert alone[0].max() >= START_THRESHOLD > END_THRESHOLD > alone[3].max()


async def test_b10_sequences_of_unequal_length_score_as_each_session_alone(
    vad: SileroVad, cpu_speech: Speech
) -> None:
    """`score_sequences` (one thread hop for every frame of every session) gives what
    scoring each session alone, frame by frame, gives; shorter sequences drop out."""
    clips = [
        cpu_speech("What colour is this?", RATE)[:RATE],
        np.zeros(RATE // 2, dtype=np.float32),
        cpu_speech("Show me the red ball.", RATE)[: RATE // 4],
    ]
    alone = [_score_alone(vad, clip) for clip in clips]
    states = [vad.new_state() for _ in clips]
    together = await vad.score_sequences(states, [_frames(clip) for clip in clips])
    assert [len(p) for p in together] == [len(p) for p in alone] == [31, 15, 7]
    for got, want in zip(together, alone, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4)
    with pytest.raises(StageFailed, match="2 frame sequences for 3 states"):
        await vad.score_sequences(states, [_frames(c) for c in clips[:2]])


def _stepped_oracle(
    vad: SileroVad, states: list[VadState], sequences: list[np.ndarray]
) -> list[np.ndarray]:
    """The scoring as it was before the gathered path, written out here as the oracle: per
    time step, one onnxruntime call over the sessions with a frame at it, each session's
    state and context gathered and written back around every call."""
    session = vad._session  # the same model
    out = [np.empty(len(sequence), dtype=np.float32) for sequence in sequences]
    for step in range(max(len(sequence) for sequence in sequences)):
        live = [i for i, sequence in enumerate(sequences) if len(sequence) > step]
        frames = np.stack([sequences[i][step] for i in live])
        model_input = np.concatenate(
            [np.stack([states[i].data["context"] for i in live]), frames], axis=1
        )
        state = np.concatenate([states[i].data["state"] for i in live], axis=1)
        probabilities, new_state = session.run(
            None, {"input": model_input, "state": state, "sr": np.array(RATE, dtype=np.int64)}
        )
        for j, i in enumerate(live):
            out[i][step] = np.asarray(probabilities).reshape(-1)[j]
            states[i].data["state"] = new_state[:, j : j + 1, :].copy()
            states[i].data["context"] = frames[j, -64:].copy()
    return out


async def test_b10_sequences_score_exactly_as_one_batched_call_per_step(
    vad: SileroVad, cpu_speech: Speech
) -> None:
    """The gathered scoring (states and audio gathered once per call) makes the very
    onnxruntime calls of one batched call per step: the same probabilities and the same
    states after, bit for bit, across two calls in a row (the context carries over) with
    sequences of unequal length (sessions drop out of later steps)."""
    speech = cpu_speech("What colour is this?", RATE)
    clips = [speech[:RATE], np.zeros(RATE // 2, dtype=np.float32), speech[RATE // 3 : RATE // 2]]
    gathered = [vad.new_state() for _ in clips]
    stepped = [vad.new_state() for _ in clips]
    for part in (slice(0, 9), slice(9, None)):
        sequences = [_frames(clip)[part] for clip in clips]
        got = vad.score_sequences_sync(gathered, sequences)
        want = _stepped_oracle(vad, stepped, sequences)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    for g, w in zip(gathered, stepped, strict=True):
        np.testing.assert_array_equal(g.data["state"], w.data["state"])
        np.testing.assert_array_equal(g.data["context"], w.data["context"])
    with pytest.raises(StageFailed, match="must have shape"):
        vad.score_sequences_sync(gathered[:1], [np.zeros((2, 300), dtype=np.float32)])


async def test_new_state_holds_silero_state_and_context(vad: SileroVad) -> None:
    state = vad.new_state()
    assert state.data["state"].shape == (2, 1, 128)
    assert state.data["context"].shape == (64,)
    frame = np.linspace(-0.5, 0.5, VAD_FRAME_SAMPLES, dtype=np.float32)
    await vad.score([state], frame[None])
    assert state.data["state"].shape == (2, 1, 128)
    np.testing.assert_array_equal(state.data["context"], frame[-64:])


async def test_score_with_no_sessions_returns_nothing(vad: SileroVad) -> None:
    result = await vad.score([], np.zeros((0, VAD_FRAME_SAMPLES), np.float32))
    assert result.shape == (0,)


async def test_frames_not_matching_states_fail_the_stage(vad: SileroVad) -> None:
    states: list[VadState] = [vad.new_state(), vad.new_state()]
    with pytest.raises(StageFailed, match=r"\(2, 512\)") as info:
        await vad.score(states, np.zeros((1, VAD_FRAME_SAMPLES), np.float32))
    assert info.value.stage == "vad"


async def test_score_before_loading_is_unavailable() -> None:
    stage = SileroVad()
    with pytest.raises(BackendUnavailable, match="not loaded"):
        await stage.score([stage.new_state()], np.zeros((1, VAD_FRAME_SAMPLES), np.float32))
    await stage.abort("anything")  # safe at any time
