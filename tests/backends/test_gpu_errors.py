from __future__ import annotations

import asyncio

import pytest

from backends.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    EngineDead,
    InvalidPromptContext,
    StageFailed,
    SubmissionFailed,
)
from backends.gpu.errors import is_engine_dead, map_engine_errors, translate_error


def _foreign(module: str, name: str, base: type[Exception] = Exception) -> type[Exception]:
    """A stand-in for a vLLM / torch exception class: same module root and name."""
    return type(name, (base,), {"__module__": module})


VLLMServerError = _foreign("vllm.exceptions", "VLLMServerError")
EngineDeadError = _foreign("vllm.v1.engine.exceptions", "EngineDeadError", VLLMServerError)
EngineGenerateError = _foreign("vllm.v1.engine.exceptions", "EngineGenerateError", VLLMServerError)
OutOfMemoryError = _foreign("torch", "OutOfMemoryError", RuntimeError)


class SubclassOfDead(EngineDeadError):  # type: ignore[misc, valid-type]
    """A subclass defined elsewhere: the nearest named ancestor decides."""


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (EngineDeadError("dead"), EngineDead),
        (SubclassOfDead("dead"), EngineDead),
        (EngineGenerateError("one request"), StageFailed),
        (VLLMServerError("other"), StageFailed),
        (OutOfMemoryError("CUDA out of memory"), BackendUnavailable),
        (TimeoutError(), BackendTimeout),
        (ValueError("prompt too long"), StageFailed),
        (ModuleNotFoundError("No module named 'vllm'"), BackendUnavailable),
    ],
)
def test_mapping_picks_the_most_specific_rule(exc: Exception, expected: type[BackendError]) -> None:
    with pytest.raises(expected) as info, map_engine_errors("vlm"):
        raise exc
    assert type(info.value) is expected
    assert info.value.__cause__ is exc
    assert info.value.stage == "vlm"


def test_same_name_from_another_library_is_not_matched() -> None:
    impostor = _foreign("mylib.errors", "EngineDeadError")
    assert type(translate_error(impostor(), stage="asr")) is StageFailed


def test_submitting_window_maps_unknown_failures_to_submission_failed() -> None:
    with pytest.raises(SubmissionFailed), map_engine_errors("asr", submitting=True):
        raise RuntimeError("zmq send failed")
    with pytest.raises(EngineDead), map_engine_errors("asr", submitting=True):
        raise EngineDeadError()


def test_backend_errors_and_cancellation_pass_untouched() -> None:
    original = InvalidPromptContext("bad", stage="vlm")
    with pytest.raises(InvalidPromptContext) as info, map_engine_errors("vlm"):
        raise original
    assert info.value is original
    with pytest.raises(asyncio.CancelledError), map_engine_errors("vlm"):
        raise asyncio.CancelledError


def test_is_engine_dead_sees_translated_and_foreign() -> None:
    assert is_engine_dead(EngineDeadError())
    assert is_engine_dead(EngineDead("x"))
    assert not is_engine_dead(RuntimeError())
