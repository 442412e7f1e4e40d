"""`joyduplex serve` and `joyduplex client` as subprocesses, the way a user runs them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from tests.load_shedding import config_args_without_shedding

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Served", "free_port", "joyduplex", "run_client", "serve"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def joyduplex() -> list[str]:
    """The `joyduplex` command of this interpreter's environment."""
    exe = shutil.which("joyduplex", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "transport.cli"]


@dataclass
class Served:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"


@contextlib.contextmanager
def serve(
    args: list[str],
    log: Path,
    *,
    ready_s: float = 120,
    env: dict[str, str] | None = None,
    workers: int = 1,
    stop_signal: int = signal.SIGINT,
    shedding: bool = False,
) -> Iterator[Served]:
    """Start `joyduplex serve ARGS --workers WORKERS` on a free loopback port, wait for
    /readyz, and on exit stop it with `stop_signal`; the server must then exit with 0.

    One worker unless asked: the server's default (one per core) would multiply the
    suite's processes and backends by the cores of the machine."""
    port = free_port()
    if not shedding:
        args = config_args_without_shedding(args, log.parent)
    with log.open("w") as out:
        process = subprocess.Popen(
            [*joyduplex(), "serve", *args, "--port", str(port), "--workers", str(workers)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        served = Served(port, process, log)
        try:
            deadline = time.monotonic() + ready_s
            while True:
                try:
                    if httpx.get(served.base + "/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server did not become ready"
                assert process.poll() is None, log.read_text()
                time.sleep(0.1)
            yield served
        finally:
            process.send_signal(stop_signal)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, log.read_text()[-5000:]


def run_client(
    served: Served, wav: Path, out: Path, *, image: Path | None = None, timeout_s: int = 30
) -> subprocess.CompletedProcess[str]:
    """`joyduplex client` for one spoken turn (plus a camera frame, if given)."""
    extra = ["--image", str(image)] if image is not None else []
    return subprocess.run(
        [
            *joyduplex(),
            "client",
            "--url",
            served.ws_url,
            "--wav",
            str(wav),
            "--out",
            str(out),
            "--timeout",
            str(timeout_s),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s * 2,
        check=False,
    )
