"""The state each worker process of one server shares with the others: its pid, whether it
is ready, and how many sessions it holds.

The supervisor (`transport.workers`) creates the board before it starts the workers and
hands it to each of them with its slot index; a worker writes only its own slot (the
supervisor writes a slot when its worker starts or exits), and any worker reads all of
them to answer /readyz for the whole server.

Each worker also names itself on the board with its owner id, the random part of every
session id it issues (`runtime.host`), so that a worker a resume reaches can find the
worker that holds the session. When a worker exits, its owner id moves to the slot's
former owner, so that a resume of one of its sessions is told the owner is gone.

The arrays are plain shared memory without a lock: each slot has one writer at a time
and every field is one machine word.
"""

from __future__ import annotations

import enum
import multiprocessing
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

__all__ = [
    "HOST_ID",
    "WorkerBoard",
    "WorkerState",
    "WorkerStatus",
    "session_host",
    "session_id",
    "session_owner",
]

#: a host id (the `host_id` server setting): no `.`, so that it ends where the id says
HOST_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
#: `sess_[<host id>.]<owner id, 8 hex digits><serial>`: the host id names the server (for
#: a balancer, docs/deploy.md), the owner id the process of that server that holds it
_SESSION_ID = re.compile(rf"sess_(?:({HOST_ID.pattern})\.)?([0-9a-f]{{8}})[0-9]+")


def session_id(owner: int, serial: int, host: str | None = None) -> str:
    """The id of a process's `serial`th session, naming the process by its owner id and,
    with `host`, the server by its host id."""
    prefix = f"{host}." if host else ""
    return f"sess_{prefix}{owner:08x}{serial:04d}"


def session_owner(session_id: str) -> int | None:
    """The owner id a session id names (None: not an id this server issues)."""
    match = _SESSION_ID.fullmatch(session_id)
    return int(match.group(2), 16) if match else None


def session_host(session_id: str) -> str | None:
    """The host id a session id names (None: none, or not an id a server issues)."""
    match = _SESSION_ID.fullmatch(session_id)
    return match.group(1) if match else None


class WorkerState(enum.IntEnum):
    STARTING = 0  # spawned, loading and warming up its backend
    READY = 1
    OUT_OF_SERVICE = 2  # a backend stage died (B18)
    SHUTTING_DOWN = 3
    EXITED = 4  # the process ended; the supervisor replaces it unless the server stops

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


@dataclass(frozen=True)
class WorkerStatus:
    index: int
    pid: int
    state: WorkerState
    sessions: int


class WorkerBoard:
    """One slot per worker process, in shared memory created by the supervisor."""

    def __init__(self, workers: int, context: BaseContext | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        ctx: Any = context or multiprocessing.get_context("spawn")
        self._pids: Any = ctx.RawArray("q", workers)
        self._states: Any = ctx.RawArray("i", workers)
        self._sessions: Any = ctx.RawArray("i", workers)
        self._owners: Any = ctx.RawArray("q", workers)  # 0: none yet
        self._former: Any = ctx.RawArray("q", workers)  # the last exited worker's owner id

    @property
    def size(self) -> int:
        return len(self._states)

    def starting(self, index: int) -> None:
        """The supervisor is about to start a worker in slot `index`."""
        self._pids[index] = 0
        self._states[index] = WorkerState.STARTING
        self._sessions[index] = 0

    def set_pid(self, index: int, pid: int) -> None:
        self._pids[index] = pid

    def exited(self, index: int) -> None:
        """The worker in slot `index` ended."""
        self._states[index] = WorkerState.EXITED
        self._sessions[index] = 0
        if self._owners[index]:
            self._former[index] = self._owners[index]
        self._owners[index] = 0

    def set_owner(self, index: int, owner: int) -> None:
        """The owner id of the worker in slot `index` (written by that worker)."""
        self._owners[index] = owner

    def owner_slot(self, owner: int) -> int | None:
        """The slot whose live worker has owner id `owner`, if any."""
        for index in range(self.size):
            if self._owners[index] == owner and self._states[index] != WorkerState.EXITED:
                return index
        return None

    def former_slot(self, owner: int) -> int | None:
        """The slot whose worker had owner id `owner` and exited, if that is known."""
        for index in range(self.size):
            if self._former[index] == owner:
                return index
        return None

    def publish(self, index: int, state: WorkerState, sessions: int) -> None:
        """A worker's own state, written by the worker."""
        self._states[index] = state
        self._sessions[index] = sessions

    def status(self, index: int) -> WorkerStatus:
        return WorkerStatus(
            index, int(self._pids[index]), WorkerState(self._states[index]), self._sessions[index]
        )

    def snapshot(self) -> list[WorkerStatus]:
        return [self.status(i) for i in range(self.size)]
