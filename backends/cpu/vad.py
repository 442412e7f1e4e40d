"""`SileroVad`: the Silero v6.2 ONNX model scoring many sessions' frames in one call.

One onnxruntime session per process (CPU provider, one intra-op and one inter-op thread)
serves every session. A session's `VadState` holds the model's recurrent state (shape
[2, 1, 128]) and the last 64 samples of its previous frame (the context Silero expects
in front of each 512-sample frame). `score` stacks n sessions into one batch: input
[n, 64 + 512], state [2, n, 128], `sr` int64 16000, and writes each session's new state
and context back. Batching is what makes VAD cheap: one call per tick for all sessions
instead of one per session (docs/architecture.md section 3).

onnxruntime runs off the event loop in a worker thread; `score_sync` is the same work,
synchronous (used by `score` and by benchmarks).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import numpy as np

from backends.base import (
    VAD_FRAME_SAMPLES,
    VAD_SAMPLE_RATE_HZ,
    BackendUnavailable,
    StageFailed,
    VadState,
)
from backends.cpu.assets import SILERO_VAD
from backends.cpu.failures import serving_failures
from backends.cpu.onnx_stage import PinnedOnnxStage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from backends.base import Float32Array

__all__ = ["CONTEXT_SAMPLES", "STATE_SHAPE", "SileroVad"]

log = logging.getLogger("joyduplex.backends.cpu")

#: samples of the previous frame prepended to each frame
CONTEXT_SAMPLES = 64
#: shape of one session's recurrent state
STATE_SHAPE = (2, 1, 128)

_SAMPLE_RATE = np.array(VAD_SAMPLE_RATE_HZ, dtype=np.int64)


class SileroVad(PinnedOnnxStage):
    """Speech probability per 32 ms frame, batched over sessions, one shared model.

    Args:
        model_path: an explicit Silero ONNX file (`--vad-model`); it never falls back to
            the packaged one. Default: the silero-vad wheel's `silero_vad.onnx`.
        expected_sha256: the digest the model bytes must have (default: the pinned v6.2).
    """

    name = "vad"
    model = SILERO_VAD
    title = "Silero VAD"

    async def warmup(self) -> None:
        """Score one zero frame (the first run allocates onnxruntime's buffers)."""
        await self.score([self.new_state()], np.zeros((1, VAD_FRAME_SAMPLES), np.float32))

    async def abort(self, request_id: str) -> None:
        """Nothing to abort: a scoring call is short and has no request id."""

    # --- scoring -----------------------------------------------------------------------

    def new_state(self) -> VadState:
        """A fresh session: zero recurrent state, zero context."""
        return VadState(
            {
                "state": np.zeros(STATE_SHAPE, dtype=np.float32),
                "context": np.zeros(CONTEXT_SAMPLES, dtype=np.float32),
            }
        )

    async def score(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        """Score `frames[i]` (shape [n, 512], float32 in [-1, 1]) with `states[i]`.

        Returns n speech probabilities; each state is advanced by one frame.

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: bad shapes or an onnxruntime failure.
        """
        if self._limiter is None:
            raise BackendUnavailable("vad: the Silero VAD stage is not loaded", stage="vad")
        return await anyio.to_thread.run_sync(
            self.score_sync, states, frames, limiter=self._limiter
        )

    async def score_sequences(
        self, states: Sequence[VadState], sequences: Sequence[Float32Array]
    ) -> list[Float32Array]:
        """Each state's frames in time order, every step batched across the states, all
        in one worker-thread call (a hop per 32 ms frame costs more than the model).

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: bad shapes or an onnxruntime failure.
        """
        if self._limiter is None:
            raise BackendUnavailable("vad: the Silero VAD stage is not loaded", stage="vad")
        return await anyio.to_thread.run_sync(
            self.score_sequences_sync, states, sequences, limiter=self._limiter
        )

    def score_sequences_sync(
        self, states: Sequence[VadState], sequences: Sequence[Float32Array]
    ) -> list[Float32Array]:
        """`score_sequences`, synchronous: one batched onnxruntime call per time step over
        the sessions with a frame at that step, their states and audio gathered once and
        written back once per call, not per step (that per-session copying was 8% of the
        VAD's time at 450 sessions).

        Each session's frames lie back to back after its 64 context samples in one row,
        so the model input of step k is a window of that row: its context is the end of
        frame k - 1 (or the state's context at step 0).
        """
        session = self._session
        if session is None:
            raise BackendUnavailable("vad: the Silero VAD stage is not loaded", stage="vad")
        n = len(states)
        if len(sequences) != n:
            raise StageFailed(f"vad: {len(sequences)} frame sequences for {n} states", stage="vad")
        lengths = np.array([len(sequence) for sequence in sequences], dtype=np.intp)
        steps = int(lengths.max(initial=0))
        if steps == 0:
            return [np.zeros(0, dtype=np.float32) for _ in range(n)]
        width = CONTEXT_SAMPLES + VAD_FRAME_SAMPLES
        audio = np.zeros((n, CONTEXT_SAMPLES + steps * VAD_FRAME_SAMPLES), dtype=np.float32)
        for i, (vad_state, sequence) in enumerate(zip(states, sequences, strict=True)):
            frames = np.asarray(sequence, dtype=np.float32)
            if frames.ndim != 2 or frames.shape[1] != VAD_FRAME_SAMPLES:
                raise StageFailed(
                    f"vad: a frame sequence must have shape (k, {VAD_FRAME_SAMPLES}), "
                    f"got {frames.shape}",
                    stage="vad",
                )
            audio[i, :CONTEXT_SAMPLES] = vad_state.data["context"]
            audio[i, CONTEXT_SAMPLES : CONTEXT_SAMPLES + frames.size] = frames.reshape(-1)
        state = np.concatenate([s.data["state"] for s in states], axis=1)
        scored = np.zeros((n, steps), dtype=np.float32)
        with serving_failures("vad"):
            for step in range(steps):
                start = step * VAD_FRAME_SAMPLES
                live = np.flatnonzero(lengths > step)  # sessions with a frame at this step
                probabilities, state[:, live, :] = session.run(
                    None,
                    {
                        "input": audio[live, start : start + width],
                        "state": state[:, live, :],
                        "sr": _SAMPLE_RATE,
                    },
                )
                scored[live, step] = np.asarray(probabilities).reshape(len(live))
        out: list[Float32Array] = []
        for i, (vad_state, length) in enumerate(zip(states, lengths, strict=True)):
            out.append(scored[i, :length].copy())
            if length:
                end = CONTEXT_SAMPLES + int(length) * VAD_FRAME_SAMPLES
                vad_state.data["state"] = state[:, i : i + 1, :].copy()
                vad_state.data["context"] = audio[i, end - CONTEXT_SAMPLES : end].copy()
        return out

    def score_sync(self, states: Sequence[VadState], frames: Float32Array) -> Float32Array:
        """`score`, synchronous: one onnxruntime call for all n sessions (a one-step
        `score_sequences_sync`)."""
        n = len(states)
        batch = np.asarray(frames, dtype=np.float32)
        if batch.shape != (n, VAD_FRAME_SAMPLES):
            raise StageFailed(
                f"vad: frames must have shape ({n}, {VAD_FRAME_SAMPLES}) for {n} states, "
                f"got {batch.shape}",
                stage="vad",
            )
        scored = self.score_sequences_sync(states, list(batch[:, None, :]))
        result: Float32Array = np.concatenate(scored) if scored else np.zeros(0, dtype=np.float32)
        return result
