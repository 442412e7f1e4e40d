"""B26 in a served process: `joyduplex serve` never writes a key to its log, whatever
carried it, and logs no accepted connection for a refused one (one worker and several:
each worker process gets the same logging)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
import websockets

from tests.served_process import Served, serve

pytestmark = pytest.mark.slow

KEY = "k-3f9a-never-logged"
WRONG = "w-77c1-never-logged"


async def _attempts(served: Served) -> list[int | str]:
    """A refused and an accepted handshake per key carrier, then probes with the key."""
    results: list[int | str] = []
    for kw in (
        {"uri": f"{served.ws_url}?token={WRONG}"},
        {"uri": f"{served.ws_url}?model=m&token={KEY}"},
        {"uri": served.ws_url, "additional_headers": {"Authorization": f"Bearer {WRONG}"}},
        {"uri": served.ws_url, "additional_headers": {"Authorization": f"Bearer {KEY}"}},
        {"uri": served.ws_url, "subprotocols": ["realtime", f"openai-insecure-api-key.{KEY}"]},
    ):
        uri = str(kw.pop("uri"))
        try:
            async with websockets.connect(uri, **kw) as ws:  # type: ignore[arg-type]
                results.append(json.loads(await ws.recv())["type"])
                await ws.send('{"type": "session.close"}')
                while json.loads(await ws.recv())["type"] != "session.closed":
                    pass
        except websockets.InvalidStatus as exc:
            results.append(exc.response.status_code)
    return results


def _wait_for_log(log: Path, pattern: str, count: int) -> str:
    """The log once `pattern` occurs `count` times (the server writes it asynchronously)."""
    deadline = time.monotonic() + 30
    while True:
        text = log.read_text()
        if len(re.findall(pattern, text)) >= count or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


@pytest.mark.parametrize("workers", [1, 2])
def test_b26_the_log_of_a_served_process_never_holds_the_key(tmp_path: Path, workers: int) -> None:
    log = tmp_path / "server.log"
    with serve(
        ["--backend", "scripted", "--api-key", KEY, "--log-level", "debug"], log, workers=workers
    ) as served:
        results = asyncio.run(_attempts(served))
        auth = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{served.base}/metrics?token={KEY}&api_key={KEY}").status_code == 200
        assert httpx.get(f"{served.base}/readyz", headers=auth).status_code == 200
        text = _wait_for_log(log, r"session sess_\w+ closed", 3)
    assert results == [401, "session.created", 401, "session.created", "session.created"]
    assert KEY not in text
    assert WRONG not in text
    # what was logged, masked: the query (uvicorn), the headers (websockets, debug level)
    assert '"WebSocket /v1/realtime?token=[redacted]" 401' in text
    assert "/v1/realtime?model=m&token=[redacted]" in text
    assert "/metrics?token=[redacted]&api_key=[redacted]" in text
    assert "Bearer [redacted]" in text
    assert "openai-insecure-api-key.[redacted]" in text
    # the refused handshakes were never accepted: one `[accepted]` per session
    assert text.count("[accepted]") == 3
    assert text.count("refused a session before the upgrade") == 2
    assert "without completing handshake" not in text
