"""When the last session of a process leaves, the C heap's free pages go back to the
system (the peak's buffers were kept by malloc: 200 MB over idle after 1000 sessions)."""

from __future__ import annotations

import platform

import pytest

from runtime import heap, host
from spec.limits import Limits
from tests.runtime.conftest import eventually, hosted

pytestmark = pytest.mark.anyio


async def test_the_heap_is_trimmed_when_the_last_session_closes_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(host, "return_free_heap", lambda: trims.append(1) or True)
    async with hosted(Limits(max_sessions=4)) as h:
        first = await h.connect()
        second = await h.connect()
        await first.close()
        await eventually("the first session closed", lambda: h.host.sessions == 1)
        assert trims == []
        await second.close()
        await eventually("the last session closed", lambda: h.host.sessions == 0)
        assert trims == [1]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_return_free_heap_finds_malloc_trim_on_glibc() -> None:
    """On glibc (this project's Linux images) the trim is really there; elsewhere
    `return_free_heap` is a no-op that answers False."""
    heap._trim.cache_clear()
    assert heap._trim() is not None
