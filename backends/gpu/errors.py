"""The one boundary where vLLM, torch and transformers exceptions become `BackendError`s.

Every call into a foreign engine runs inside `map_engine_errors(stage)`. The mapping is
data (`RULES`): a rule names the library a class comes from and the class name, so this
module never imports torch or vllm to recognise their exceptions. For a raised exception
the most specific rule wins: its class's MRO is walked from the class itself upwards and
the first class that a rule names decides. Anything unnamed becomes `StageFailed` (or
`SubmissionFailed` while a request is being submitted). `BackendError`s pass unchanged;
`CancelledError` and other `BaseException`s are never touched.

The original exception is always kept as `__cause__` (`raise ... from exc`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final

from backends.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    EngineDead,
    StageFailed,
    SubmissionFailed,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["RULES", "is_engine_dead", "map_engine_errors", "translate_error"]

#: (top-level package of the class's module, class name) -> BackendError subclass
RULES: Final[dict[tuple[str, str], type[BackendError]]] = {
    # vLLM v1: the engine core process died; every request on it fails (vllm.v1.engine.exceptions)
    ("vllm", "EngineDeadError"): EngineDead,
    # vLLM v0 spelling, still raised by some wrappers
    ("vllm", "AsyncEngineDeadError"): EngineDead,
    # vLLM v1: one request failed inside the engine; the engine lives on
    ("vllm", "EngineGenerateError"): StageFailed,
    # torch: CUDA allocator exhausted (torch.OutOfMemoryError is torch.cuda.OutOfMemoryError)
    ("torch", "OutOfMemoryError"): BackendUnavailable,
    ("builtins", "TimeoutError"): BackendTimeout,
    ("builtins", "MemoryError"): BackendUnavailable,
    # the gpu extra is not installed (or a wheel does not import on this machine)
    ("builtins", "ImportError"): BackendUnavailable,
}


def _rule_for(exc: BaseException) -> type[BackendError] | None:
    for cls in type(exc).__mro__:
        root = cls.__module__.partition(".")[0]
        found = RULES.get((root, cls.__name__))
        if found is not None:
            return found
    return None


def translate_error(exc: BaseException, *, stage: str, submitting: bool = False) -> BackendError:
    """The `BackendError` that stands for `exc` (itself when it already is one)."""
    if isinstance(exc, BackendError):
        return exc
    target = _rule_for(exc)
    detail = str(exc) or type(exc).__name__
    if target is None:
        target = SubmissionFailed if submitting else StageFailed
        verb = "submitting to" if submitting else "serving in"
        return target(
            f"{stage}: {type(exc).__name__} while {verb} the engine: {detail}", stage=stage
        )
    return target(f"{stage}: {type(exc).__name__}: {detail}", stage=stage)


def is_engine_dead(exc: BaseException) -> bool:
    """True when `exc` says the engine replica is gone (translated or still foreign)."""
    return isinstance(exc, EngineDead) or _rule_for(exc) is EngineDead


@contextlib.contextmanager
def map_engine_errors(stage: str, *, submitting: bool = False) -> Iterator[None]:
    """Translate any foreign `Exception` raised inside into the `BackendError` tree.

    Works around sync code and around awaits in async code alike (it never swallows,
    only relabels). `submitting=True` marks the window in which the engine may already
    have accepted the request: unnamed failures there are `SubmissionFailed` (B18).
    """
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:
        raise translate_error(exc, stage=stage, submitting=submitting) from exc
