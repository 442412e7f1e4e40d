"""Resume across the worker processes of one server (D39): `joyduplex serve --workers 4`,
where the kernel hands a reconnecting client to any worker. A resume that lands on a
worker that does not hold its session is relayed to the one that does; a resume whose
worker exited is refused, saying so."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from runtime.workers import session_owner
from tests.served_process import Served, serve
from tests.transport.test_duplex_dialect import (
    REPLY,
    _Recorded,
    _upstream_duplex,
    _upstream_turn,
    assert_resumed_whole,
)
from tests.transport.test_workers import _samples

pytestmark = pytest.mark.slow

#: a hang guard only (a loaded 2-core machine), never a speed bound
HANG_GUARD_S = 60.0
WORKERS = 4


def _args(tmp_path: Path, backend: str = "") -> list[str]:
    config = tmp_path / "server.toml"
    config.write_text(f"[limits]\nresume_grace_s = 120\n{backend}")
    return ["--backend", "scripted", "--config", str(config)]


async def _json(ws: Any) -> dict[str, Any]:
    async with asyncio.timeout(HANG_GUARD_S):
        data = json.loads(await ws.recv())
    assert isinstance(data, dict)
    return data


async def _until(ws: Any, kind: str) -> list[dict[str, Any]]:
    seen = []
    while True:
        event = await _json(ws)
        seen.append(event)
        if event["type"] == kind:
            return seen


class _Session:
    """A resumable session as a client keeps it: id, token, cursor, socket."""

    def __init__(self, ws: Any, created: dict[str, Any]) -> None:
        self.ws = ws
        self.id: str = created["session"]["id"]
        self.token: str = created["resume_token"]
        self.seq: int = created["server_event_seq"]

    async def resume(self, served: Served) -> dict[str, Any]:
        """Drop the socket (no close frame) and resume on a new connection."""
        self.ws.transport.abort()
        url = f"{served.ws_url}?duplex=1&resume=1&session_id={self.id}"
        self.ws = await websockets.connect(url, max_size=None)
        await self.ws.send(
            json.dumps(
                {
                    "type": "session.resume",
                    "session_id": self.id,
                    "resume_token": self.token,
                    "last_received_server_event_seq": self.seq,
                }
            )
        )
        event = await _json(self.ws)
        if event["type"] == "session.resumed":
            self.token = event["resume_token"]
            self.seq = event["last_server_event_seq"]
        return event


async def _open(served: Served) -> _Session:
    ws = await websockets.connect(served.ws_url + "?duplex=1", max_size=None)
    created = await _json(ws)
    assert created["type"] == "session.created", created
    return _Session(ws, created)


async def _sessions_on_several_workers(served: Served) -> list[_Session]:
    """Sessions until at least two workers hold some (the kernel picks the worker)."""
    sessions: list[_Session] = []
    while len({session_owner(s.id) for s in sessions}) < 2:
        assert len(sessions) < 200, "the kernel never handed a connection to a second worker"
        sessions.append(await _open(served))
    while len(sessions) < 8:
        sessions.append(await _open(served))
    return sessions


def _metric(served: Served, name: str, **labels: str) -> float:
    samples = _samples(httpx.get(served.base + "/metrics").text)
    return sum(
        v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items())
    )


def _tone(ms: int) -> str:
    import base64

    pcm = (np.sin(np.arange(ms * 24) / 5.0) * 8000).astype("<i2").tobytes()
    return base64.b64encode(pcm).decode()


def test_b27_a_hundred_resumes_against_four_workers_all_resume(tmp_path: Path) -> None:
    with serve(_args(tmp_path), tmp_path / "server.log", workers=WORKERS) as served:

        async def scenario() -> None:
            sessions = await _sessions_on_several_workers(served)
            for n in range(100):
                session = sessions[n % len(sessions)]
                event = await session.resume(served)
                assert event["type"] == "session.resumed", (n, event)
                assert event["session_id"] == session.id
            # a turn over each resumed connection: frames cross a relay both ways
            for session in sessions:
                await session.ws.send(
                    json.dumps({"type": "input_audio_buffer.append", "audio": _tone(300)})
                )
                await session.ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                await session.ws.send(json.dumps({"type": "response.create"}))
                seen = await _until(session.ws, "response.done")
                assert any(e["type"] == "response.output_audio.delta" for e in seen)
                assert not [e for e in seen if e["type"] == "error"]
                seqs = [e["server_event_seq"] for e in seen]
                assert seqs == list(range(session.seq + 1, session.seq + 1 + len(seqs)))
            for session in sessions:
                await session.ws.close()

        asyncio.run(scenario())
        # "replaced" where the owner had not yet seen the dropped socket go
        resumed = _metric(served, "joyduplex_session_resume_total", event="resumed")
        assert resumed + _metric(served, "joyduplex_session_resume_total", event="replaced") == 100
        assert _metric(served, "joyduplex_session_resume_total", event="refused") == 0
        # sessions of two workers, resumed through whichever worker the kernel chose:
        # some resumes reached a worker that did not hold the session
        assert _metric(served, "joyduplex_session_resume_total", event="relayed") >= 1


def test_b27_a_second_resume_through_another_worker_replaces_the_first(
    tmp_path: Path,
) -> None:
    with serve(_args(tmp_path), tmp_path / "server.log", workers=WORKERS) as served:

        async def scenario() -> None:
            sessions = await _sessions_on_several_workers(served)
            for session in sessions:
                old = session.ws
                url = f"{served.ws_url}?resume=1&session_id={session.id}"
                new = await websockets.connect(url, max_size=None)
                await new.send(
                    json.dumps(
                        {
                            "type": "session.resume",
                            "session_id": session.id,
                            "resume_token": session.token,
                            "last_received_server_event_seq": session.seq,
                        }
                    )
                )
                resumed = await _json(new)
                assert resumed["type"] == "session.resumed", resumed
                replaced = await _json(old)
                assert replaced["type"] == "session.replaced"
                with pytest.raises(websockets.ConnectionClosed):
                    await old.recv()
                session.ws, session.token = new, resumed["resume_token"]
                session.seq = resumed["last_server_event_seq"]
            for session in sessions:
                await session.ws.close()

        asyncio.run(scenario())


def test_b27_a_resume_whose_worker_exited_is_unknown_session_saying_so(tmp_path: Path) -> None:
    with serve(_args(tmp_path), tmp_path / "server.log", workers=WORKERS) as served:

        async def scenario() -> None:
            sessions = await _sessions_on_several_workers(served)
            pid = next(
                w["pid"]
                for w in httpx.get(served.base + "/readyz").json()["workers"]["processes"]
                if w["sessions"] > 0
            )
            # which worker holds which session is known to the server only: kill one that
            # holds sessions, then resume every session of the exited worker's
            os.kill(pid, signal.SIGKILL)
            for _ in range(600):
                body = httpx.get(served.base + "/readyz").json()
                if body.get("status") == "ready" and pid not in {
                    w["pid"] for w in body["workers"]["processes"]
                }:
                    break
                await asyncio.sleep(0.1)
            answers = [await s.resume(served) for s in sessions]
            refused = [a for a in answers if a["type"] == "error"]
            assert refused, "no session of the killed worker was found"
            for event in refused:
                assert event["error"]["code"] == "unknown_session"
                assert "exited" in event["error"]["message"]
            assert all(a["type"] in ("error", "session.resumed") for a in answers)
            for session in sessions:
                await session.ws.close()

        asyncio.run(scenario())


@pytest.mark.parametrize("workers", [1, WORKERS])
def test_b27_vllm_omni_duplex_client_unchanged_resumes_against_a_served_process(
    tmp_path: Path, workers: int
) -> None:
    """`joyduplex serve --workers 1` and `--workers 4`: with four, the drops repeat until
    a resume reached a worker that did not hold the session (it was relayed)."""
    upstream = _upstream_duplex()
    # a reply long and slow enough that the drop lands inside it
    backend = f'\n[backend]\ndefault_transcript = "{REPLY}"\n[backend.latency_s]\ntts = 0.05\n'
    with serve(_args(tmp_path, backend), tmp_path / "server.log", workers=workers) as served:

        async def scenario() -> None:
            control = await _upstream_turn(upstream, served.ws_url, _Recorded(), drop=False)
            assert control
            relayed = 0.0
            for _ in range(20 if workers > 1 else 1):
                recorded = _Recorded()
                audio = await _upstream_turn(upstream, served.ws_url, recorded, drop=True)
                assert_resumed_whole(recorded, audio, control)
                relayed = _metric(served, "joyduplex_session_resume_total", event="relayed")
                if relayed:
                    break
            assert relayed >= 1 if workers > 1 else relayed == 0

        asyncio.run(scenario())
