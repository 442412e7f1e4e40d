"""Submission compensation (B18): undo a submission that failed half-way.

`submit()` may fail (or be cancelled) after the engine already accepted the request;
left alone, that request would keep running with nobody reading it. So on any failure
of `submit()`:

1. the request is aborted on that engine, shielded from cancellation and bounded by a
   deadline, so a cancelled caller (or a second cancellation, e.g. shutdown) cannot
   skip it;
2. the ORIGINAL error is re-raised (a `CancelledError` stays a `CancelledError`); what
   happened during the abort is attached as a note, never in its place;
3. if the original error or the abort says the engine is dead, the replica is evicted
   at once through `evict` (exactly once per call), instead of waiting for a health
   poll; the request itself fails exactly once, by the one exception raised here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio

from backends.gpu.errors import is_engine_dead

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["Abortable", "submit_with_compensation"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ABORT_TIMEOUT_S = 5.0


class Abortable(Protocol):
    """An engine replica that can abort a request by id."""

    async def abort(self, request_id: str) -> None: ...


async def submit_with_compensation(
    engine: Abortable,
    request_id: str,
    submit: Callable[[], Awaitable[T]],
    *,
    evict: Callable[[BaseException], None],
    abort_timeout_s: float = DEFAULT_ABORT_TIMEOUT_S,
) -> T:
    """Run `submit()`; on failure abort `request_id` on `engine` and re-raise the original.

    Args:
        engine: the replica the request was submitted to.
        request_id: the id the engine knows the request by.
        submit: does the submission (e.g. `add_request`); its result is returned.
        evict: removes a dead replica from service; called at most once per call, with
            the error that showed the engine is dead.
        abort_timeout_s: deadline of the shielded abort.
    """
    try:
        return await submit()
    except BaseException as original:
        evicted = False
        if is_engine_dead(original):
            evict(original)
            evicted = True
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + abort_timeout_s):
            try:
                await engine.abort(request_id)
            except BaseException as abort_error:
                # a second cancellation, a timeout or a dead engine: the original error
                # is what the caller must see; the abort's fate is attached to it
                original.add_note(
                    f"compensating abort of {request_id!r} failed:"
                    f" {type(abort_error).__name__}: {abort_error}"
                )
                if not evicted and is_engine_dead(abort_error):
                    evict(abort_error)
                    evicted = True
                logger.warning(
                    "compensating abort of %s failed: %r (original error: %r)",
                    request_id,
                    abort_error,
                    original,
                )
        raise
