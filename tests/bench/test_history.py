"""`response.create` cost against history size: a session with SMALL and with LARGE
user items queued, each answered by one `response.create` (prompt assembly included).
Linear work shows a ratio near LARGE / SMALL (10); the quadratic membership test this
replaces showed about 100. Reported (`extra_info`, printed), never asserted: the
deterministic guard is tests/core/test_bounded_work.py."""

from __future__ import annotations

import statistics
import time

import pytest

from core.session import SessionProtocol
from spec import events as ev
from spec.limits import Limits

SMALL, LARGE = 1_000, 10_000


def _session_with_items(n: int) -> SessionProtocol:
    limits = Limits(max_pending_input_bytes=1 << 30, max_items=n + 16)
    p = SessionProtocol(session_id="bench", limits=limits)
    for i in range(n):
        part = ev.ContentPart(type="input_text", text=f"word{i}")
        p.receive(ev.ConversationItemCreate(item=ev.ConversationItem(content=[part])), i)
    p.next_outputs()
    return p


def _create(p: SessionProtocol) -> None:
    p.receive(ev.ResponseCreate(), 0)
    p.next_outputs()


def _median_s(n: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        p = _session_with_items(n)
        started = time.perf_counter()
        _create(p)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@pytest.mark.benchmark(group="core-response-create-history")
def test_bench_response_create_cost_against_history_size(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark.pedantic(
        _create, setup=lambda: ((_session_with_items(LARGE),), {}), rounds=3, iterations=1
    )
    large = benchmark.stats.stats.median if benchmark.stats else _median_s(LARGE, 1)
    small = _median_s(SMALL, 3)
    benchmark.extra_info.update(
        small_items=SMALL,
        large_items=LARGE,
        small_s=small,
        large_s=large,
        ratio=large / small,
        linear_ratio=LARGE / SMALL,
    )
    print({k: round(v, 4) for k, v in benchmark.extra_info.items()})
