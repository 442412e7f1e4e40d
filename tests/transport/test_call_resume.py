"""B42 over WebRTC: a call placed with `?resumable=1` outlives its peer going away (the
network changed under it), and a new call placed with `?resume=1` resumes the session:
the reply the drop interrupted finishes in its replay, and the next turn is in the same
session. aiortc (the server's WebRTC stack) has no ICE restart, so a new call is how a
call survives a network change (docs/session-semantics.md 10.3)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets

from clients.errors import ServerError
from clients.webrtc_call import open_call
from spec.events import SessionClose, SessionResume
from tests.served_process import serve
from tests.transport.conftest import LiveServer

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")


def _tone(ms: int) -> bytes:
    return (np.sin(np.arange(ms * 16) / 5.0) * 8000).astype("<i2").tobytes()


def test_b42_a_resumable_call_resumes_its_session_through_a_new_call(
    live_server: LiveServer,
) -> None:
    async def test() -> None:
        live_server.script.latency["tts"] = 0.05  # the drop lands inside the reply
        async with open_call(live_server.url, query="resumable=1") as first:
            await first.wait_for("session.created", timeout=30)
            state = first.resume_state
            assert state is not None
            await first.update_session(turn_detection=None)
            await first.speak(_tone(400))
            await first.commit(create_response=True)
            created = await first.wait_for("response.created", timeout=30)
            await first.peer.close()  # the network goes away under the call
        query = f"resume=1&session_id={state.session_id}"
        async with open_call(live_server.url, query=query) as second:
            await second._resume(state)  # session.resume, then session.resumed
            done = await second.wait_for("response.done", timeout=30)
            assert done.response.id == created.response.id  # type: ignore[attr-defined]
            assert second.resume_state is not None
            assert second.resume_state.session_id == state.session_id
            # the next turn, in the same session, over the new call's tracks
            await second.speak(_tone(400))
            await second.commit(create_response=True)
            result = await second.collect_response(timeout=30)
            assert result.status == "completed"
        seqs = [e.server_event_seq for e in first.history + second.history if e.server_event_seq]
        # every event once, in order (the audio deltas' numbers are the gaps: on a call
        # they go out on the track, never on the data channel)
        assert seqs == sorted(set(seqs)) and seqs[0] == 1

    asyncio.run(test())


def test_b42_a_resume_call_that_does_not_begin_with_session_resume_is_refused(
    live_server: LiveServer,
) -> None:
    async def test() -> None:
        async with open_call(live_server.url, query="resume=1&session_id=sess_x") as call:
            with pytest.raises(ServerError) as info:
                await call.send(SessionResume(session_id="sess_nope", resume_token="t"))
                await call.wait_for("session.resumed", timeout=30)
            assert info.value.code == "unknown_session"

    asyncio.run(test())


def test_b42_a_sideband_follows_its_session_to_the_call_that_resumes_it(
    live_server: LiveServer,
) -> None:
    """The sideband of a resumable call outlives the call: it sees the session's events
    on the call that resumes it and drives the session there, and ends with the session."""

    async def test() -> None:
        async with open_call(live_server.url, query="resumable=1") as first:
            await first.wait_for("session.created", timeout=30)
            state = first.resume_state
            assert state is not None
            url = f"{live_server.ws_url}?call_id={first.call_id}"
            async with websockets.connect(url) as side:
                channel = live_server.app.state.calls.calls[first.call_id].channel
                await _until(lambda: bool(channel.sidebands), "the sideband")
                await first.peer.close()  # the network goes away under the call
                query = f"resume=1&session_id={state.session_id}"
                async with open_call(live_server.url, query=query) as second:
                    await second._resume(state)
                    seen: list[str] = []
                    while "session.resumed" not in seen:
                        seen.append(json.loads(await side.recv())["type"])
                    update = {"instructions": "from the side, after the resume"}
                    await side.send(
                        json.dumps(
                            {"type": "session.update", "event_id": "side_1", "session": update}
                        )
                    )
                    updated = await second.wait_for("session.updated", timeout=30)
                    assert updated.session.instructions == update["instructions"]  # type: ignore[attr-defined]
                    while "session.updated" not in seen:
                        seen.append(json.loads(await side.recv())["type"])
                    await second.send(SessionClose())
                    with pytest.raises(websockets.ConnectionClosed):  # ends with the session
                        while True:
                            await asyncio.wait_for(side.recv(), 30)

    asyncio.run(test())


async def _until(check: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.slow
def test_b42_a_resume_call_that_reaches_another_worker_is_relayed_to_its_session(
    tmp_path: Path,
) -> None:
    """`--workers 4`: the kernel hands each resume call's offer to any worker; six resumes
    in a row (all but surely some on another worker than the session's) each resume it."""
    with serve(["--backend", "scripted"], tmp_path / "server.log", workers=4) as served:

        async def resumes() -> str:
            async with open_call(served.base, query="resumable=1", timeout=60) as first:
                await first.wait_for("session.created", timeout=60)
                state = first.resume_state
                assert state is not None
                await first.peer.close()
            for _ in range(6):
                query = f"resume=1&session_id={state.session_id}"
                async with open_call(served.base, query=query, timeout=60) as call:
                    await call._resume(state)
                    assert call.resume_state is not None
                    state = call.resume_state
                    await call.peer.close()
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{served.base}/metrics")).text

        metrics = asyncio.run(resumes())
        relayed = [
            line
            for line in metrics.splitlines()
            if line.startswith("joyduplex_session_resume_total") and 'event="relayed"' in line
        ]
        assert relayed and float(relayed[0].split()[-1]) >= 1, relayed
