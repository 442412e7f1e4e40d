"""Liveness of one engine replica: evicted at most once, refused afterwards.

Each stage serves through one replica (one engine per stage and device). When any
path finds the engine dead (a compensating abort, a stream, a health check) it calls
`evict()`; the first call records the cause and runs the `on_evict` hooks, later calls
are no-ops. A request arriving at an evicted replica fails at once with `EngineDead`
instead of hanging on a dead engine core.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from backends.base import EngineDead

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ReplicaHealth"]

logger = logging.getLogger(__name__)


class ReplicaHealth:
    """Tracks whether a replica is in service."""

    __slots__ = ("_cause", "_hooks", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._cause: BaseException | None = None
        self._hooks: list[Callable[[BaseException], None]] = []

    @property
    def evicted(self) -> bool:
        return self._cause is not None

    def on_evict(self, hook: Callable[[BaseException], None]) -> None:
        self._hooks.append(hook)

    def evict(self, cause: BaseException) -> None:
        """Take the replica out of service (idempotent)."""
        if self._cause is not None:
            return
        self._cause = cause
        logger.error("engine replica %s evicted: %r", self.name, cause)
        for hook in self._hooks:
            hook(cause)

    def check(self) -> None:
        """Raise `EngineDead` when the replica was evicted."""
        if self._cause is not None:
            raise EngineDead(f"{self.name}: engine replica is dead and evicted", stage=self.name)
