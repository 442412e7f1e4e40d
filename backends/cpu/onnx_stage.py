"""`PinnedOnnxStage`: the lifecycle Silero VAD and Smart Turn share.

One onnxruntime session per process of a model file pinned by SHA-256 (`PinnedModel`),
loaded off the event loop, with one intra-op and one inter-op thread; its calls run one at
a time in a worker thread (`limiter`). An explicitly configured file is used as given and
never falls back to the packaged one.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import anyio.to_thread

from backends.base import StageLifecycle
from backends.cpu.failures import single_thread_onnx

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from backends.cpu.assets import PinnedModel

__all__ = ["PinnedOnnxStage"]

log = logging.getLogger("joyduplex.backends.cpu")


class PinnedOnnxStage(StageLifecycle):
    """Args:
    model_path: an explicit ONNX file; it never falls back to the packaged one.
    expected_sha256: the digest the model bytes must have (default: the pinned one).
    """

    #: the file, where it ships and its digest
    model: ClassVar[PinnedModel]
    #: its name in logs ("Silero VAD")
    title: ClassVar[str]
    #: onnxruntime session configuration entries
    session_config: ClassVar[Mapping[str, str]] = {}
    name: str

    def __init__(
        self, model_path: str | Path | None = None, *, expected_sha256: str | None = None
    ) -> None:
        self._configured = model_path
        self._expected_sha256 = expected_sha256 or self.model.sha256
        self._session: Any = None
        self._limiter: anyio.CapacityLimiter | None = None

    async def load(self) -> None:
        path = self.model.path(self._configured)
        log.info("%s: loading %s from %s", self.name, self.title, path)
        started = time.perf_counter()
        self._session = await anyio.to_thread.run_sync(self._load, path)
        self._limiter = anyio.CapacityLimiter(1)
        log.info("%s: loaded in %.2f s", self.name, time.perf_counter() - started)

    def _load(self, path: Path) -> Any:
        data = self.model.read(path, self._expected_sha256)
        what = f"the {self.title} model `{path}`"
        return single_thread_onnx(
            data, stage=self.name, what=what, config=dict(self.session_config)
        )

    async def release(self) -> None:
        self._session = None
        self._limiter = None
