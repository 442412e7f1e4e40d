"""The one boundary where foreign exceptions of the CPU stages become `BackendError`s.

Every model library used here (onnxruntime, faster-whisper/CTranslate2, Piper, Pillow,
soxr) raises its own exception types. Each stage wraps its calls into those libraries in
one of the two context managers below, so callers only ever see the `backends.base`
vocabulary: `BackendUnavailable` while loading, `StageFailed` while serving a request.
`BackendError`s raised on purpose pass through untouched; cancellation (a
`BaseException`) is never caught.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from backends.base import BackendError, BackendUnavailable, StageFailed
from backends.cpu.assets import import_extra

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["loading_failures", "serving_failures"]


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextmanager
def loading_failures(stage: str, what: str) -> Iterator[None]:
    """Translate a failure while loading `what` into `BackendUnavailable`."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        raise BackendUnavailable(
            f"{stage}: cannot load {what}: {_describe(exc)}", stage=stage
        ) from exc


@contextmanager
def serving_failures(stage: str, request_id: str | None = None) -> Iterator[None]:
    """Translate a failure while serving one request into `StageFailed`."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        where = f" (request {request_id})" if request_id else ""
        raise StageFailed(f"{stage} failed{where}: {_describe(exc)}", stage=stage) from exc


def single_thread_onnx(
    data: bytes, *, stage: str, what: str, config: Mapping[str, str] | None = None
) -> Any:
    """An onnxruntime CPU session of `data` with one intra-op and one inter-op thread: the
    small ONNX models (Silero, Smart Turn) run off the event loop, one call at a time, and
    must not take the cores the loop and the other stages need. `config`: session
    configuration entries (`SessionOptions.add_session_config_entry`)."""
    ort = import_extra("onnxruntime", stage=stage)
    with loading_failures(stage, what):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        for key, value in (config or {}).items():
            options.add_session_config_entry(key, value)
        return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
