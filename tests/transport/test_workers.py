"""`joyduplex serve --workers 2`: two processes on one port, with admission, /readyz and
/metrics for the whole server, and a graceful stop of every worker on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.served_process import Served, free_port, joyduplex, serve

pytestmark = pytest.mark.slow

_SAMPLE = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? (\S+)$")


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a Prometheus text exposition."""
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels or ""))
        found.append((name, pairs, float(value)))
    return found


def _value(samples: list[tuple[str, dict[str, str], float]], name: str) -> float:
    (value,) = [v for n, labels, v in samples if n == name and not labels]
    return value


def _children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _open_on_every_worker(served: Served, workers: int) -> tuple[list[Any], int]:
    """Sessions until every worker holds one (each admits one: max_sessions 2 over 2
    workers); a connection the kernel gives to a full worker is refused. Returns the
    open sessions and the number of refusals."""
    sessions: list[Any] = []
    refused = 0
    for _ in range(200):
        if len(sessions) == workers:
            break
        ws = await websockets.connect(served.ws_url)
        first = json.loads(await ws.recv())
        if first["type"] == "session.created":
            sessions.append(ws)
            continue
        assert first["type"] == "error" and first["error"]["code"] == "resource_exhausted"
        assert "this worker is at its limit of 1 sessions" in first["error"]["message"]
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1013
        refused += 1
    assert len(sessions) == workers, "the kernel never handed a connection to a free worker"
    return sessions, refused


async def _closed(ws: Any) -> tuple[str, int | None]:
    event = json.loads(await asyncio.wait_for(ws.recv(), 30))
    assert event["type"] == "session.closed"
    with pytest.raises(websockets.ConnectionClosed):
        await ws.recv()
    return event["reason"], ws.close_code


def test_two_workers_share_the_port_the_limits_the_metrics_and_stop_on_sigterm(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.toml"
    config.write_text("[limits]\nmax_sessions = 2\n")
    log = tmp_path / "server.log"
    args = ["--backend", "scripted", "--config", str(config)]
    with serve(args, log, workers=2, stop_signal=signal.SIGTERM) as served:
        ready = httpx.get(served.base + "/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["workers"]["ready"] == body["workers"]["total"] == 2
        assert body["worker"]["max_sessions"] == 1  # ceil(2 / 2)
        pids = {w["pid"] for w in body["workers"]["processes"]}
        assert body["worker"]["pid"] in pids
        assert pids <= _children(served.process.pid) and len(pids) == 2

        async def scenario() -> list[tuple[str, int | None]]:
            sessions, refused = await _open_on_every_worker(served, 2)
            with httpx.Client(base_url=served.base) as http:
                body = http.get("/readyz").json()
                assert body["workers"]["sessions"] == 2
                assert all(w["sessions"] == 1 for w in body["workers"]["processes"])

                samples = _samples(http.get("/metrics").text)
                per_worker = {
                    int(labels["pid"]): v
                    for n, labels, v in samples
                    if n == "joyduplex_worker_sessions"
                }
                assert per_worker == {pid: 1.0 for pid in pids}  # both workers served one
                assert _value(samples, "joyduplex_sessions_total") == sum(per_worker.values())
                assert _value(samples, "joyduplex_sessions_active") == 2
                assert _value(samples, "joyduplex_sessions_refused_total") == refused
                assert _value(samples, "joyduplex_workers") == 2
                lag = {
                    int(labels["pid"])
                    for n, labels, _ in samples
                    if n == "joyduplex_worker_event_loop_lag_seconds"
                }
                assert lag == pids
                busy = {
                    (int(labels["pid"]), labels["resource"])
                    for n, labels, _ in samples
                    if n == "joyduplex_worker_busy_ratio"
                }
                assert busy == {(p, r) for p in pids for r in ("event_loop", "vad")}

                # The CPU counter adds up every worker: it reaches the sum of both
                # workers' CPU as the kernel counted it a moment ago (each worker adds
                # its own at every event-loop tick; /proc counts whole clock ticks).
                floor = sum(_cpu_seconds(pid) for pid in pids) - 2 * 0.01
                for _ in range(200):
                    samples = _samples((await asyncio.to_thread(http.get, "/metrics")).text)
                    cpu = _value(samples, "process_cpu_seconds_total")
                    ticks = _value(samples, "joyduplex_event_loop_lag_seconds_count")
                    if cpu >= floor and ticks >= 2:
                        break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail(f"process_cpu_seconds_total {cpu} never reached {floor}")

            served.process.send_signal(signal.SIGTERM)
            return await asyncio.gather(*(_closed(ws) for ws in sessions))

        assert asyncio.run(scenario()) == [("shutdown", 1001)] * 2
        assert served.process.wait(timeout=30) == 0, log.read_text()[-5000:]
    for pid in pids:  # the parent joined its workers before it exited
        assert not Path(f"/proc/{pid}").exists(), f"worker {pid} outlived the server"
    assert "every worker stopped" in log.read_text()


def test_a_worker_that_dies_is_replaced_and_readyz_names_it_meanwhile(tmp_path: Path) -> None:
    """A worker killed after it was ready: /readyz answers 503 naming its slot until the
    replacement is ready; then its gauges are gone from /metrics, its counters stay."""
    log = tmp_path / "server.log"
    with serve(["--backend", "scripted"], log, workers=2) as served:

        async def one_session() -> Any:
            ws = await websockets.connect(served.ws_url)
            assert json.loads(await ws.recv())["type"] == "session.created"
            return ws

        async def scenario() -> int:
            ws = await one_session()
            with httpx.Client(base_url=served.base) as http:
                before = {w["pid"] for w in http.get("/readyz").json()["workers"]["processes"]}
                samples = _samples(http.get("/metrics").text)
                (victim,) = [
                    int(labels["pid"])
                    for n, labels, v in samples
                    if n == "joyduplex_worker_sessions" and v == 1
                ]
                slot = next(
                    w["index"]
                    for w in http.get("/readyz").json()["workers"]["processes"]
                    if w["pid"] == victim
                )
                os.kill(victim, signal.SIGKILL)
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()

                for _ in range(1000):  # the supervisor notices, then starts another
                    ready = await asyncio.to_thread(http.get, "/readyz")
                    if ready.status_code == 503:
                        break
                else:
                    pytest.fail("/readyz never reported the missing worker")
                reason = ready.json()["reason"]
                assert reason.startswith(f"worker {slot} (pid "), reason
                assert reason.endswith(("starting", "exited")), reason
                assert ready.json()["workers"]["ready"] == 1

                for _ in range(1000):
                    ready = await asyncio.to_thread(http.get, "/readyz")
                    if ready.status_code == 200:
                        break
                    await asyncio.sleep(0.05)
                else:
                    pytest.fail("the replacement worker never became ready")
                after = {w["pid"] for w in ready.json()["workers"]["processes"]}
                assert victim not in after and len(after) == 2 and after & before

                samples = _samples(http.get("/metrics").text)
                assert _value(samples, "joyduplex_workers") == 2
                assert _value(samples, "joyduplex_sessions_total") == 1  # counters stay
                assert _value(samples, "joyduplex_sessions_active") == 0  # gauges go
                gauge_pids = {
                    int(labels["pid"])
                    for n, labels, _ in samples
                    if n == "joyduplex_worker_sessions"
                }
                assert gauge_pids == after
            return int(slot)

        slot = asyncio.run(scenario())
    assert f"worker {slot} exited with status -9; starting another" in log.read_text()


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for whoever adopted it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """A scratch directory of a short path: the workers' relay sockets live in their run
    directory under TMPDIR, and a Unix socket's path may not pass 107 bytes (the tmp_path
    of a pytest-xdist worker is longer)."""
    with tempfile.TemporaryDirectory(prefix="jd-") as path:
        yield path


def test_workers_stop_when_the_parent_is_killed(tmp_path: Path, short_tmp: str) -> None:
    """No orphans even when the supervisor cannot stop its workers: each worker watches
    its parent and shuts down when it is gone."""
    log = tmp_path / "server.log"
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                *joyduplex(),
                "serve",
                *("--backend", "scripted", "--workers", "2", "--port", str(port)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            # the metrics and run directories, which the killed parent leaves, go here
            env={**os.environ, "TMPDIR": short_tmp},
        )
        try:
            for _ in range(600):
                with contextlib.suppress(httpx.TransportError):
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz")
                    if ready.status_code == 200:
                        break
                assert process.poll() is None, log.read_text()
                time.sleep(0.05)
            pids = {w["pid"] for w in ready.json()["workers"]["processes"]}
            process.kill()
            process.wait()
            for _ in range(600):
                if all(_gone(pid) for pid in pids):
                    break
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert all(_gone(pid) for pid in pids), log.read_text()[-3000:]
    assert log.read_text().count("the parent process is gone; stopping") == 2
