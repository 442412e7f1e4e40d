"""`joyduplex serve --workers N`: N worker processes serving one listening socket.

The parent binds the socket once, points `PROMETHEUS_MULTIPROC_DIR` at a fresh directory
(every worker keeps its metrics there, so any worker answers /metrics for all of them),
creates the `WorkerBoard` (pid, state and sessions of each worker, in shared memory) and
spawns the workers. Each worker builds its own app and loads its own backend, then runs
`RealtimeServer` on the inherited socket; the kernel hands each new connection to one of
the workers that wait on it. Each worker admits `ceil(max_sessions / N)` sessions, and
/readyz answers 200 only when every worker is ready.

Resume (D39): each worker also serves its own Unix socket in a private run directory
(created here, mode 0700, removed at the end), where the other workers relay the resumes
of its sessions that the kernel handed to them (`transport.worker_relay`).

Stopping: SIGINT or SIGTERM to the parent sends SIGTERM to every worker, which closes its
sessions the protocol's way (`session.closed` reason `shutdown`, close 1001) and exits;
the parent then removes the metrics directory and exits 0. A second signal forces the
workers (SIGINT: uvicorn stops waiting for connections), a third kills them.

A worker that exits after it was ready is replaced (its gauges are dropped from /metrics,
its counters stay). One that exits before it was ready stops the server with status 1:
a backend that cannot load would fail the same way in every replacement. Workers stop on
their own when the parent dies.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.multiprocess import mark_process_dead

from runtime.metrics import MULTIPROC_ENV
from runtime.workers import WorkerBoard, WorkerState

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from types import FrameType

    from transport.server import RealtimeServer
    from transport.settings import ServerSettings

__all__ = ["WorkerSpec", "bind_socket", "serve_workers"]

log = logging.getLogger("joyduplex.workers")

_SPAWN = multiprocessing.get_context("spawn")
# What the parent sends its workers at its first, second and further stop signals.
_ESCALATION = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker needs to build its server (pickled to the worker)."""

    settings: ServerSettings
    uvicorn_options: dict[str, Any]  # uvicorn.Config keywords besides the app
    log_level: str


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket every worker serves (bound here, listened on by uvicorn).

    Raises:
        OSError: the address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve_workers(spec: WorkerSpec, workers: int) -> int:
    """Run `workers` worker processes on one socket until SIGINT or SIGTERM; the exit
    status (0 after a clean stop, 1 when a worker failed to start or did not stop cleanly).

    Raises:
        OSError: the address cannot be bound.
    """
    settings = spec.settings
    sock = bind_socket(settings.host, settings.port)
    metrics_dir = tempfile.mkdtemp(prefix="joyduplex-metrics-")
    run_dir = tempfile.mkdtemp(prefix="joyduplex-run-")  # mode 0700: the relay sockets
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = metrics_dir  # the spawned workers inherit it
    try:
        return _Supervisor(spec, sock, workers, metrics_dir, run_dir).run()
    finally:
        sock.close()
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(metrics_dir, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)


class _Supervisor:
    def __init__(
        self, spec: WorkerSpec, sock: socket.socket, workers: int, metrics_dir: str, run_dir: str
    ):
        self.spec = spec
        self.sock = sock
        self.metrics_dir = metrics_dir
        self.run_dir = run_dir
        self.board = WorkerBoard(workers, _SPAWN)
        self.processes: list[BaseProcess | None] = [None] * workers
        self.exit_codes: dict[int, int | None] = {}  # the last status of each slot's worker
        self._signals: list[int] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def run(self) -> int:
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            log.info(
                "serving http://%s:%d with %d worker processes (parent pid %d)",
                self.spec.settings.host,
                self.spec.settings.port,
                self.board.size,
                os.getpid(),
            )
            for index in range(self.board.size):
                self._spawn(index)
            status = self._supervise()
            return self._stop() or status
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _spawn(self, index: int) -> None:
        self.board.starting(index)
        process = _SPAWN.Process(
            target=_worker_main,
            args=(self.spec, self.sock, self.board, index, self.run_dir),
            name=f"joyduplex-worker-{index}",
        )
        process.start()
        assert process.pid is not None
        self.board.set_pid(index, process.pid)
        self.processes[index] = process
        log.info("worker %d started (pid %d)", index, process.pid)

    def _wait(self) -> None:
        """Until a worker exits or a signal arrives."""
        waitables: list[Any] = [p.sentinel for p in self.processes if p is not None]
        multiprocessing.connection.wait([*waitables, self._wake_r])
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 1024)

    def _reap(self) -> list[tuple[int, WorkerState]]:
        """Join the workers that exited: their slots, and the state each was last in."""
        ended = []
        for index, process in enumerate(self.processes):
            if process is None or process.is_alive():
                continue
            process.join()
            state = self.board.status(index).state
            assert process.pid is not None
            mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
            self.board.exited(index)
            self.processes[index] = None
            self.exit_codes[index] = process.exitcode
            ended.append((index, state))
        return ended

    def _supervise(self) -> int:
        """Replace the workers that exit until a stop signal; 1 when one never started."""
        while not self._signals:
            self._wait()
            if self._signals:
                break
            for index, state in self._reap():
                code = self.exit_codes[index]
                if state is WorkerState.STARTING:
                    log.error(
                        "worker %d exited with status %s before it was ready; stopping",
                        index,
                        code,
                    )
                    return 1
                log.warning("worker %d exited with status %s; starting another", index, code)
                self._spawn(index)
        return 0

    def _stop(self) -> int:
        """Stop every worker (escalating at each further signal); 0 when all exit 0."""
        self.sock.close()  # the workers hold their own copies until they stop serving
        self.exit_codes.clear()  # from here on, the statuses of the workers being stopped
        handled, level = len(self._signals), 0
        self._send(_ESCALATION[level])
        while any(p is not None for p in self.processes):
            self._wait()
            self._reap()
            if len(self._signals) > handled and level + 1 < len(_ESCALATION):
                handled, level = len(self._signals), level + 1
                self._send(_ESCALATION[level])
        failed = {i: c for i, c in self.exit_codes.items() if c != 0}
        for index, code in failed.items():
            log.error("worker %d exited with status %s", index, code)
        log.info("every worker stopped")
        return 1 if failed else 0

    def _send(self, sig: int) -> None:
        for process in self.processes:
            if process is not None and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)
                log.info("sent %s to pid %d", signal.Signals(sig).name, process.pid)


def _worker_main(
    spec: WorkerSpec, sock: socket.socket, board: WorkerBoard, index: int, run_dir: str
) -> None:
    """One worker process: its own app and backend, served on the inherited socket and on
    its own relay socket (resumes relayed from the other workers)."""
    # uvicorn shuts down gracefully on either signal, then raises it again with the
    # handler found here: an interrupt that ends the process quietly with status 0.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        board.set_pid(index, os.getpid())
        import uvicorn

        from transport.app import create_app
        from transport.server import RealtimeServer, configure_logging
        from transport.worker_relay import bind_relay_socket

        configure_logging(spec.log_level, worker=index)
        relay = bind_relay_socket(run_dir, index)
        app = create_app(spec.settings, board=board, worker=index, run_dir=run_dir)
        server = RealtimeServer(uvicorn.Config(app, **spec.uvicorn_options))
        threading.Thread(
            target=_stop_with_parent, args=(server,), name="parent-watch", daemon=True
        ).start()
        server.run(sockets=[sock, relay])  # exits with status 3 when the app fails to start
    except KeyboardInterrupt:
        pass


def _stop_with_parent(server: RealtimeServer) -> None:
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    multiprocessing.connection.wait([parent.sentinel])
    log.warning("the parent process is gone; stopping")
    server.should_exit = True
