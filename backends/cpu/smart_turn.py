"""`SmartTurn`: the end-of-turn model of `semantic_vad` (B32), Smart Turn v3.2 on onnxruntime.

One onnxruntime session per process (CPU provider, one intra-op and one inter-op thread)
serves every session, one prediction at a time (a `CapacityLimiter(1)`, as the VAD). A
prediction takes the utterance so far, computes Whisper log-mel features of its last 8 s
(`backends.cpu.log_mel`) and runs the model: input `input_features` [1, 80, 800], output
the probability that the turn is complete (the export ends in a sigmoid). Both run off the
event loop in a worker thread; `predict_sync` is the same work, synchronous (benchmarks).

The model is int8 with QuantizeLinear/DequantizeLinear pairs (QDQ). onnxruntime's default
fuses them into int8 kernels whose results depend on the CPU: without AVX-512 VNNI, the
AVX2 kernel multiplies u8 by s8 into saturating int16 sums, and one complete sentence's
features scored 0.35 there against 0.84 on a VNNI CPU. With the fusion off
(`session.disable_quant_qdq`) the graph runs as written, in float between the quantize
steps: 0.765 on both, to four digits (tools/model_margins.py measures it on an emulated
AVX2 CPU). It costs about 40 ms a verdict on a 2-core EPYC (45 -> 85 ms); a verdict runs
once per pause, beside the pause's transcript, not per audio frame.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import numpy as np

from backends.base import BackendUnavailable, TurnEndRequest
from backends.cpu.assets import SMART_TURN
from backends.cpu.failures import serving_failures
from backends.cpu.log_mel import log_mel
from backends.cpu.onnx_stage import PinnedOnnxStage

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["SmartTurn"]

log = logging.getLogger("joyduplex.backends.cpu")

#: run the QDQ graph as written, not through int8 kernels that differ by CPU (docstring)
CPU_NEUTRAL = {"session.disable_quant_qdq": "1"}


class SmartTurn(PinnedOnnxStage):
    """Has the speaker finished? One shared Smart Turn v3.2 model.

    Args:
        model_path: an explicit Smart Turn ONNX file; it never falls back to the packaged
            one. Default: the pipecat-ai wheel's `smart-turn-v3.2-cpu.onnx`.
        expected_sha256: the digest the model bytes must have (default: the pinned v3.2).
    """

    name = "turn_end"
    model = SMART_TURN
    title = "Smart Turn"
    session_config = CPU_NEUTRAL

    async def warmup(self) -> None:
        """One prediction on silence (the first run allocates onnxruntime's buffers)."""
        await self.predict(TurnEndRequest("warmup", np.zeros(16_000, dtype=np.float32)))

    async def abort(self, request_id: str) -> None:
        """Nothing to abort: a prediction is short; a late verdict is dropped by the core."""

    async def predict(self, request: TurnEndRequest) -> float:
        """The probability that `request.pcm` ends a finished turn.

        Raises:
            BackendUnavailable: the stage is not entered.
            StageFailed: an onnxruntime failure.
        """
        if self._limiter is None:
            raise BackendUnavailable(
                "turn_end: the Smart Turn stage is not loaded", stage="turn_end"
            )
        return await anyio.to_thread.run_sync(
            self.predict_sync, request.pcm, request.request_id, limiter=self._limiter
        )

    def predict_sync(self, pcm: npt.NDArray[np.floating], request_id: str | None = None) -> float:
        """`predict`, synchronous: features, then one onnxruntime call."""
        session = self._session
        if session is None:
            raise BackendUnavailable(
                "turn_end: the Smart Turn stage is not loaded", stage="turn_end"
            )
        with serving_failures("turn_end", request_id):
            features = log_mel(pcm)[None]
            (probabilities,) = session.run(None, {"input_features": features})
        return float(np.clip(np.asarray(probabilities).reshape(-1)[0], 0.0, 1.0))
