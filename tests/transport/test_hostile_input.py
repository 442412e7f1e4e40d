"""B28: hostile input stays inside its session, against a served process.

`joyduplex serve --backend scripted` runs as a subprocess on 127.0.0.1 (shedding off, as
for every test server; `max_event_bytes` lowered to 1 MiB so that over-limit frames cost
a megabyte, not fifteen; the per-connection rate limits off, D38: this fuzz floods as fast
as it can to test how frames are handled, not how many a second are let through, which
tests/transport/test_rate_limits.py and tools/flood_fairness.py do). Clients in this process:

- the wire fuzz: 8 connections send 100,000 seeded hostile frames (tests/wire_mutations.py)
  without waiting for each answer, a heartbeat after every 100 frames
  and never more than two such batches unanswered (so the server's outbound queue never
  fills and its slow-consumer rule has no reason to fire); the answers are drained and
  each is decoded as a typed server event. The seed is printed;
  `JOYDUPLEX_FUZZ_SEED=<n>` replays a run. When a session breaks, the frames since its
  last answered heartbeat are replayed one at a time, each on a fresh session, and the
  one that breaks a session is printed.
- a hostile session among 8 clean ones: the hostile one floods malformed, oversized and
  deeply nested events and rapid `response.create` / `response.cancel`, while 8 clean
  sessions run turns and heartbeats; the worst heartbeat round trip of a clean session
  is printed (a figure, not a pass criterion).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec
import numpy as np
import pytest
import websockets

from clients.duplex_client import DuplexClient
from spec.errors import ERROR_TYPE, ErrorCode
from spec.events import (
    ConversationItemAdded,
    Error,
    ResponseCreated,
    SessionClosed,
    SessionHeartbeatAck,
)
from tests.served_process import Served, serve
from tests.wire_mutations import KINDS, NEVER_VALID, Frame, WireMutator
from transport.codec import CLIENT_EVENT_TYPES, decode_server_event

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

SEED = int(os.environ.get("JOYDUPLEX_FUZZ_SEED", "20261130"))
CONNECTIONS = 8
FRAMES_PER_CONNECTION = 12_500  # 100,000 in all, plus the coverage and pacing events
BATCH = 100  # a heartbeat after every BATCH frames
MAX_EVENT_BYTES = 1024 * 1024
#: a hang guard per wait (a loaded 2-core machine is slow, never this slow)
GUARD_S = 120.0
#: RSS the server may gain over the flood: the flood itself holds no state once its
#: sessions closed; this only catches a leak of the frames (80 MB were sent)
RSS_GROWTH_LIMIT = 128 * 1024 * 1024
#: the `[limits]` lines that switch the per-connection budgets off (D38)
RATE_LIMITS_OFF = "max_events_per_s = 0\nmax_bytes_per_s = 0\n"
CRASH_LINES = re.compile(r"crashed|Traceback")
#: uvicorn logs its refusal of a non-UTF-8 text frame (close 1007) at ERROR with the
#: traceback of its own decode: not a session crash
UVICORN_UTF8_TRACEBACK = re.compile(
    r"ERROR: +Invalid UTF-8 sequence received from client\.\n"
    r"Traceback.*?\nUnicodeDecodeError[^\n]*\n",
    re.DOTALL,
)


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


def _rss(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.fixture
def fuzz_server(tmp_path: Path) -> Any:
    config = tmp_path / "fuzz.toml"
    # max_records: the scripted backend's records of requests would count as server memory
    config.write_text(
        f"[limits]\nmax_event_bytes = {MAX_EVENT_BYTES}\n{RATE_LIMITS_OFF}\n"
        "[backend]\nmax_records = 100\n"
    )
    log = tmp_path / "server.log"
    with serve(["--backend", "scripted", "--config", str(config)], log) as served:
        yield served
    text = UVICORN_UTF8_TRACEBACK.sub("", log.read_text(errors="replace"))
    assert not CRASH_LINES.search(text), text[-5000:]


# --- one hostile connection ------------------------------------------------------------


@dataclass
class ConnectionReport:
    index: int
    frames: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    events_in: int = 0
    close_code: int | None = None
    closed_event: bool = False
    problems: list[str] = field(default_factory=list)
    #: the frames since the last answered heartbeat when a problem was seen
    suspects: list[Frame] = field(default_factory=list)


class _Reader:
    """Drains one connection: decodes every event as a typed server event and checks
    every error is a documented code of its documented type."""

    def __init__(self, ws: Any, report: ConnectionReport, mutator: WireMutator | None) -> None:
        self.ws = ws
        self.report = report
        self.mutator = mutator
        self.acks = 0
        self.acked = asyncio.Event()
        self.problem = asyncio.Event()

    async def run(self) -> None:
        try:
            async for message in self.ws:
                self.report.events_in += 1
                self._check(message)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.acked.set()

    def _fail(self, why: str) -> None:
        self.report.problems.append(why)
        self.problem.set()
        self.acked.set()

    def _check(self, message: str | bytes) -> None:
        try:
            event = decode_server_event(message)
        except msgspec.DecodeError as exc:
            self._fail(f"an untyped server event ({exc}): {str(message)[:300]}")
            return
        if isinstance(event, SessionHeartbeatAck):
            self.acks += 1
            self.acked.set()
        elif isinstance(event, Error):
            detail = event.error
            self.report.errors[detail.code] += 1
            try:
                code = ErrorCode(detail.code)
            except ValueError:
                self._fail(f"an undocumented error code: {detail}")
                return
            if ERROR_TYPE[code] != detail.type:
                self._fail(f"error code {code} with type {detail.type}: {detail}")
            if code is ErrorCode.INTERNAL_ERROR:
                self._fail(f"the session crashed: {detail}")
        elif isinstance(event, SessionClosed):
            self.report.closed_event = True
        elif self.mutator is not None:
            if isinstance(event, ConversationItemAdded) and event.item.id:
                self.mutator.item_ids.append(event.item.id)
            elif isinstance(event, ResponseCreated):
                self.mutator.response_ids.append(event.response.id)

    async def wait_acks(self, count: int) -> None:
        async with asyncio.timeout(GUARD_S):
            while self.acks < count and not self.problem.is_set():
                self.acked.clear()
                if self.ws.close_code is not None:
                    return
                await self.acked.wait()


HEARTBEAT = '{"type":"session.heartbeat"}'


async def _flood(
    url: str, index: int, frames: Iterable[Frame], mutator: WireMutator
) -> ConnectionReport:
    """Send `frames` pipelined (at most two batches unanswered), then close the session."""
    report = ConnectionReport(index)
    async with websockets.connect(url, max_size=None, compression=None, open_timeout=30) as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created", created
        reader = _Reader(ws, report, mutator)
        reading = asyncio.create_task(reader.run())
        batch: deque[Frame] = deque()
        previous: list[Frame] = []
        syncs = 0
        try:
            for frame in frames:
                await ws.send(frame.data)
                report.frames += 1
                report.kinds[frame.kind] += 1
                batch.append(frame)
                if len(batch) == BATCH:
                    await ws.send(HEARTBEAT)
                    syncs += 1
                    await reader.wait_acks(syncs - 1)  # the batch before this one answered
                    if reader.problem.is_set() or ws.close_code is not None:
                        break
                    previous, batch = list(batch), deque()
            await ws.send(HEARTBEAT)
            syncs += 1
            await reader.wait_acks(syncs)
            await ws.send('{"type":"session.close"}')
            async with asyncio.timeout(GUARD_S):
                await reading
        except websockets.ConnectionClosed as exc:
            report.problems.append(f"the connection closed mid-flood: {exc}")
        finally:
            reading.cancel()
        report.close_code = ws.close_code
        if report.problems or report.close_code != 1000:
            report.suspects = [*previous, *batch]
    return report


async def _breaks_a_session(url: str, frame: Frame) -> str | None:
    """Send `frame` alone on a fresh session, then a heartbeat: why the session broke, or
    None when it answered."""
    report = ConnectionReport(-1)
    async with websockets.connect(url, max_size=None, compression=None) as ws:
        await ws.recv()
        reader = _Reader(ws, report, None)
        reading = asyncio.create_task(reader.run())
        try:
            await ws.send(frame.data)
            await ws.send(HEARTBEAT)
            await reader.wait_acks(1)
        except (websockets.ConnectionClosed, TimeoutError) as exc:
            report.problems.append(repr(exc))
        reading.cancel()
    if report.problems:
        return "; ".join(report.problems)
    return None if reader.acks else f"no heartbeat answer (close {ws.close_code})"


async def _pinpoint(url: str, suspects: list[Frame]) -> str:
    for frame in suspects:
        why = await _breaks_a_session(url, frame)
        if why is not None:
            return f"the event that killed the session: {frame.describe()}\n  -> {why}"
    return "no single frame of the last batches breaks a session alone"


# --- around the flood ------------------------------------------------------------------


async def _healthz_while(served: Served, done: asyncio.Event) -> list[tuple[int, float]]:
    """/healthz polled until `done`: (status, seconds) per answer."""
    answers: list[tuple[int, float]] = []
    async with httpx.AsyncClient(timeout=GUARD_S) as http:
        while not done.is_set():
            start = time.monotonic()
            reply = await http.get(served.base + "/healthz")
            answers.append((reply.status_code, time.monotonic() - start))
            with_timeout = asyncio.create_task(done.wait())
            await asyncio.wait({with_timeout}, timeout=0.05)
            with_timeout.cancel()
    return answers


async def _bystander(url: str, done: asyncio.Event) -> tuple[int, float, list[Any]]:
    """An unrelated session that heartbeats until `done`: (round trips, the worst one in
    seconds, its errors)."""
    worst, count = 0.0, 0
    async with DuplexClient.connect(url) as client:
        while not done.is_set():
            sent = time.monotonic()
            await client.send_raw(HEARTBEAT)
            await client.wait_for("session.heartbeat_ack", timeout=GUARD_S)
            worst, count = max(worst, time.monotonic() - sent), count + 1
            waiting = asyncio.create_task(done.wait())
            await asyncio.wait({waiting}, timeout=0.05)
            waiting.cancel()
        return count, worst, [e for e in client.history if isinstance(e, Error)]


async def _clean_turn(url: str) -> tuple[str, list[Any], int]:
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection=None)
        await client.stream_audio(_tone(300))
        await client.commit(create_response=True)
        result = await client.collect_response(timeout=GUARD_S)
        errors = [e for e in client.history if isinstance(e, Error)]
        return result.status, [*result.errors, *errors], len(result.audio)


def _frames(mutator: WireMutator, count: int, *, coverage: bool) -> list[Frame]:
    """`count` hostile frames; with `coverage`, every client event type valid first."""
    first = [mutator.valid(t) for t in sorted(CLIENT_EVENT_TYPES - NEVER_VALID)] if coverage else []
    return first + [mutator.next() for _ in range(count)]


@pytest.mark.slow  # 13 s here: `make test` runs it, `make check` does not
def test_b28_a_seeded_flood_of_100k_hostile_frames_gets_only_typed_errors_and_crashes_nothing(
    fuzz_server: Served,
) -> None:
    served = fuzz_server
    print(f"\nwire fuzz seed {SEED} (JOYDUPLEX_FUZZ_SEED={SEED} replays it)")

    async def run() -> tuple[list[ConnectionReport], list[tuple[int, float]], dict[str, Any]]:
        warm = await _clean_turn(served.ws_url)
        assert warm[0] == "completed", warm
        rss_before = _rss(served.process.pid)
        mutators = [WireMutator(SEED * 100 + i, MAX_EVENT_BYTES) for i in range(CONNECTIONS)]
        frames = [_frames(m, FRAMES_PER_CONNECTION, coverage=True) for m in mutators]
        done = asyncio.Event()
        polling = asyncio.create_task(_healthz_while(served, done))
        bystanding = asyncio.create_task(_bystander(served.ws_url, done))
        start = time.monotonic()
        reports = await asyncio.gather(
            *(_flood(served.ws_url, i, frames[i], mutators[i]) for i in range(CONNECTIONS))
        )
        flood_s = time.monotonic() - start
        done.set()
        health = await polling
        figures: dict[str, Any] = {"flood_s": flood_s, "rss_before": rss_before}
        figures["bystander"] = await bystanding
        broken = [r for r in reports if r.problems or r.close_code != 1000 or not r.closed_event]
        if broken:
            figures["pinpointed"] = await _pinpoint(served.ws_url, broken[0].suspects)
            return reports, health, figures
        status, errors, audio = await _clean_turn(served.ws_url)
        figures.update(after=(status, errors, audio), rss_after=_rss(served.process.pid))
        after = httpx.get(served.base + "/healthz", timeout=GUARD_S)
        figures["healthz_after"] = after.status_code
        return reports, health, figures

    reports, health, figures = asyncio.run(run())
    frames = sum(r.frames for r in reports)
    kinds = sum((r.kinds for r in reports), Counter())
    errors = sum((r.errors for r in reports), Counter())
    print(
        f"wire fuzz: {frames} frames on {CONNECTIONS} connections in {figures['flood_s']:.1f} s "
        f"({frames / figures['flood_s']:.0f}/s); {sum(r.events_in for r in reports)} events "
        f"back; errors by code {dict(errors.most_common())}; frames by kind {dict(kinds)}"
    )
    broken = [r for r in reports if r.problems or r.close_code != 1000 or not r.closed_event]
    assert not broken, (
        f"seed {SEED}: "
        + "; ".join(
            f"connection {r.index}: close {r.close_code}, closed event {r.closed_event}, "
            f"{r.problems[:3]}"
            for r in broken
        )
        + "\n"
        + figures.get("pinpointed", "")
    )
    assert frames >= 100_000
    assert set(kinds) == set(KINDS)
    assert health and all(status == 200 for status, _ in health), health
    worst_health = max(seconds for _, seconds in health)
    print(f"/healthz during the flood: {len(health)} answers, worst {worst_health * 1000:.0f} ms")
    beats, worst_beat, bystander_errors = figures["bystander"]
    print(
        f"an unrelated session during the flood: {beats} heartbeats, worst round trip "
        f"{worst_beat * 1000:.0f} ms"
    )
    assert beats > 0 and bystander_errors == []
    status, after_errors, audio = figures["after"]
    assert (status, after_errors) == ("completed", []) and audio > 0
    assert figures["healthz_after"] == 200
    growth = figures["rss_after"] - figures["rss_before"]
    print(
        f"server RSS {figures['rss_before'] / 2**20:.1f} MiB before the flood, "
        f"{figures['rss_after'] / 2**20:.1f} MiB after (+{growth / 2**20:.1f} MiB)"
    )
    assert growth < RSS_GROWTH_LIMIT


def test_b28_invalid_utf8_in_a_text_frame_closes_only_its_connection_with_1007(
    fuzz_server: Served,
) -> None:
    """The websocket layer refuses a text frame that is not UTF-8 (RFC 6455 8.1: close
    1007) before the session sees it; the server and other sessions go on. (Inside a
    binary frame the same bytes reach the decoder: `invalid_json`, the fuzz sends those.)"""

    async def run() -> tuple[int | None, str, list[Any]]:
        async with websockets.connect(fuzz_server.ws_url) as ws:
            await ws.recv()
            await ws.send(b'{"type":"session.heartbeat","x":"\xff\xfe"}', text=True)
            with pytest.raises(websockets.ConnectionClosed):
                async with asyncio.timeout(GUARD_S):
                    while True:
                        await ws.recv()
            code = ws.close_code
        status, errors, _ = await _clean_turn(fuzz_server.ws_url)
        return code, status, errors

    code, status, errors = asyncio.run(run())
    assert code == 1007
    assert (status, errors) == ("completed", [])


# --- a hostile session among clean ones -------------------------------------------------

CLEAN_SESSIONS = 8
CLEAN_TURNS = 4
HOSTILE_FRAMES = 2_000


async def _clean_session(url: str, started: asyncio.Event) -> tuple[list[str], list[Any], float]:
    """Turns with heartbeats in between: statuses, errors, worst heartbeat round trip."""
    statuses: list[str] = []
    worst = 0.0
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection=None)
        await started.wait()
        for _ in range(CLEAN_TURNS):
            for _ in range(3):
                sent = time.monotonic()
                await client.send_raw(HEARTBEAT)
                await client.wait_for("session.heartbeat_ack", timeout=GUARD_S)
                worst = max(worst, time.monotonic() - sent)
            await client.stream_audio(_tone(300))
            await client.commit(create_response=True)
            result = await client.collect_response(timeout=GUARD_S)
            statuses.append(result.status)
        errors = [e for e in client.history if isinstance(e, Error)]
    return statuses, errors, worst


def _hostile_frames(
    mutator: WireMutator, minimum: int, clean_done: asyncio.Event
) -> Iterator[Frame]:
    """The fuzz's frames with a fifth replaced by rapid create/cancel pairs, 1,200-deep
    nestings and near-limit strings, until the clean sessions are done (at least
    `minimum`)."""
    rng = mutator.rng
    sent = 0
    while sent < minimum or not clean_done.is_set():
        roll = rng.random()
        if roll < 0.1:
            yield Frame("create", '{"type":"response.create"}', "response.create")
            yield Frame("cancel", '{"type":"response.cancel"}', "response.cancel")
            sent += 1
        elif roll < 0.15:
            nested = "[" * 1200 + "]" * 1200
            yield Frame("deep_nesting", '{"type":"response.create","x":' + nested + "}", None)
        elif roll < 0.16:
            big = {
                "type": "session.update",
                "session": {"instructions": "x" * (MAX_EVENT_BYTES - 200)},
            }
            yield Frame("oversized", json.dumps(big), "session.update")
        else:
            yield mutator.next()
        sent += 1


def test_b28_a_hostile_session_among_eight_clean_ones_leaves_them_untouched(
    fuzz_server: Served,
) -> None:
    url = fuzz_server.ws_url

    async def run() -> tuple[ConnectionReport, list[tuple[list[str], list[Any], float]]]:
        started, clean_done = asyncio.Event(), asyncio.Event()
        mutator = WireMutator(SEED + 7, MAX_EVENT_BYTES)
        frames = _hostile_frames(mutator, HOSTILE_FRAMES, clean_done)
        hostile = asyncio.create_task(_flood(url, 0, frames, mutator))
        started.set()  # the clean sessions' turns begin once the flood has
        results = await asyncio.gather(
            *(_clean_session(url, started) for _ in range(CLEAN_SESSIONS))
        )
        clean_done.set()
        return await hostile, results

    report, results = asyncio.run(run())
    worst = max(w for _, _, w in results)
    print(
        f"\nhostile session: {report.frames} frames, errors {dict(report.errors.most_common())}; "
        f"{CLEAN_SESSIONS} clean sessions x {CLEAN_TURNS} turns; worst clean heartbeat round "
        f"trip during the flood {worst * 1000:.0f} ms"
    )
    assert report.problems == [] and report.close_code == 1000, report.problems
    for statuses, errors, _ in results:
        assert statuses == ["completed"] * CLEAN_TURNS
        assert errors == []
