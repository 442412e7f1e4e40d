"""One request's life on an engine: submit (compensated), stream (translated), clean up.

`stream_request()` is what the ASR and VLM stages use for every request:

- a replica already evicted refuses at once (`EngineDead`);
- the submission runs under `submit_with_compensation` (B18) inside the error
  boundary, so a half-done submission is aborted and surfaces as `SubmissionFailed`
  (or `EngineDead`, with the replica evicted);
- deltas are pulled one `await` at a time inside the error boundary (never across a
  `yield`), and an engine death seen while streaming evicts the replica;
- if the consumer stops early (cancellation, `aclose()`, an error), the request is
  aborted on the engine, shielded and bounded, so nothing keeps generating unread.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import anyio

from backends.base import EngineDead
from backends.gpu.compensation import DEFAULT_ABORT_TIMEOUT_S, submit_with_compensation
from backends.gpu.errors import map_engine_errors

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from backends.gpu.engine_api import EnginePrompt, GenerationEngine, Sampling
    from backends.gpu.replica import ReplicaHealth

__all__ = ["stream_request"]

logger = logging.getLogger(__name__)


async def stream_request(
    engine: GenerationEngine,
    health: ReplicaHealth,
    request_id: str,
    prompt: EnginePrompt,
    sampling: Sampling,
    *,
    stage: str,
    abort_timeout_s: float = DEFAULT_ABORT_TIMEOUT_S,
) -> AsyncGenerator[str, None]:
    """Submit `prompt` and yield its text deltas until the engine finishes it."""
    health.check()
    with map_engine_errors(stage, submitting=True):
        stream = await submit_with_compensation(
            engine,
            request_id,
            lambda: engine.submit(request_id, prompt, sampling),
            evict=health.evict,
            abort_timeout_s=abort_timeout_s,
        )
    finished = False
    deltas = stream.__aiter__()
    try:
        while True:
            try:
                with map_engine_errors(stage):
                    try:
                        piece = await deltas.__anext__()
                    except StopAsyncIteration:
                        break
            except EngineDead as dead:
                health.evict(dead)
                raise
            yield piece
        finished = True
    finally:
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + abort_timeout_s):
            if not finished and not health.evicted:
                try:
                    await engine.abort(request_id)
                except Exception as exc:
                    logger.warning(
                        "abort of abandoned %s request %s failed: %r", stage, request_id, exc
                    )
            aclose = getattr(deltas, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
