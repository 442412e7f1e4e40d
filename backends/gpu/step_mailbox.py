"""`StepMailbox`: what the callers of a batched engine hand its loop thread.

The batched VLM engine (`batched_engine`) and the batched TTS (`batched_tts`) each run one
loop thread that steps every active request together. Callers on other threads post new
requests and aborts here; the loop takes all of them at once before each step, sleeps
while it has nothing posted and nothing in the batch, and ends when the box is closed.
The lock is held only to hand over, never through a step.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["StepMailbox"]

T = TypeVar("T")


class StepMailbox(Generic[T]):
    """Requests and aborts posted by callers, taken by one loop thread."""

    def __init__(self) -> None:
        self._posted = threading.Condition()
        self._inbox: list[T] = []
        self._aborts: list[str] = []
        self._closing = False

    def open(self) -> None:
        """Accept work again (a loop thread is about to start)."""
        with self._posted:
            self._closing = False

    def post(self, item: T) -> None:
        with self._posted:
            self._inbox.append(item)
            self._posted.notify()

    def abort(self, request_id: str) -> None:
        with self._posted:
            self._aborts.append(request_id)
            self._posted.notify()

    def close(self) -> None:
        """Wake the loop to end."""
        with self._posted:
            self._closing = True
            self._posted.notify()

    def take(self, busy: Callable[[], bool]) -> tuple[list[T], list[str]] | None:
        """Wait until something was posted or `busy()` (the batch has requests to step),
        then take every post and abort; None once the box is closed."""
        with self._posted:
            while not (self._closing or self._inbox or self._aborts or busy()):
                self._posted.wait()
            if self._closing:
                return None
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
            return inbox, aborts

    def left(self) -> list[T]:
        """What was posted after the loop's last `take` (the loop ends them as it stops)."""
        with self._posted:
            left, self._inbox = self._inbox, []
            return left
