"""Resume inside the runtime, over in-memory channels (B27): a detached session keeps
running and journals what it emits; acks trim the journal; shutdown and the session's own
close end a detached session and free its slot."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.channel import memory_channel_pair
from runtime.host import HostSettings, SessionHost
from runtime.workers import WorkerBoard, session_host, session_id, session_owner
from spec import events as ev
from spec.errors import ErrorCode, UnknownSession
from spec.limits import Limits
from spec.session_config import validate_session
from spec.tables import AttachmentState
from tests.runtime.conftest import Client, Harness, eventually, hosted, tone

pytestmark = pytest.mark.anyio


def _resumption(runner: Any) -> Any:
    """The resumable session's journal and attachment (`core.resume`)."""
    assert runner.protocol.resume is not None
    return runner.protocol.resume


async def _open(h: Harness) -> Client:
    channel, send, receive = memory_channel_pair()
    config = validate_session({"turn_detection": None})
    h.tg.start_soon(lambda: h.host.serve(channel, config=config, resumable=True))
    client = Client(send, receive, channel)
    h.clients.append(client)
    await client.until("session.created")
    return client


async def _resume(h: Harness, created: Any, after: int, token: str) -> Client:
    channel, send, receive = memory_channel_pair()
    resume = ev.SessionResume(
        session_id=created.session.id, resume_token=token, last_received_server_event_seq=after
    )
    h.tg.start_soon(lambda: h.host.resume(channel, resume))
    client = Client(send, receive, channel)
    h.clients.append(client)
    return client


async def test_b27_a_detached_session_finishes_its_reply_into_the_journal() -> None:
    async with hosted(Limits(slow_consumer_s=0, resume_grace_s=60)) as h:
        h.script.park("tts")
        client = await _open(h)
        created = client.seen[0]
        await client.send(ev.InputAudioBufferAppend(audio=tone(300), is_speech=True))
        await client.send(ev.InputAudioBufferCommit(create_response=True))
        await h.script.wait_parked("tts")
        await client.close()  # the peer is gone without a goodbye
        runner = h.host.session(created.session.id)
        assert runner is not None
        await eventually(
            "detached", lambda: _resumption(runner).attachment.state is AttachmentState.DETACHED
        )
        h.script.release("tts")
        await eventually(
            "the reply journaled",
            lambda: any(isinstance(e, ev.ResponseDone) for e in _resumption(runner).journal.kept()),
        )
        assert len(runner.outbound) == 0  # nothing queued for a connection that is gone
        assert h.host.sessions == 1  # the slot is kept through the grace period
        last_seen = max(e.server_event_seq for e in client.seen)
        again = await _resume(h, created, last_seen, created.resume_token)
        resumed = await again.next()
        assert isinstance(resumed, ev.SessionResumed)
        done = await again.until("response.done")
        assert done.response.status == "completed"
        seqs = [e.server_event_seq for e in again.seen[1:]]
        assert seqs == list(range(last_seen + 1, last_seen + 1 + len(seqs)))


async def test_b27_an_event_ack_trims_the_journal() -> None:
    async with hosted(Limits(slow_consumer_s=0)) as h:
        client = await _open(h)
        runner = h.host.session(client.seen[0].session.id)
        assert runner is not None
        await client.send(ev.SessionHeartbeat())
        ack = await client.until("session.heartbeat_ack")
        assert len(_resumption(runner).journal) == 2
        await client.send(ev.SessionEventAck(server_event_seq=ack.server_event_seq))
        await client.send(ev.SessionHeartbeat())
        await client.until("session.heartbeat_ack")
        assert [e.server_event_seq for e in _resumption(runner).journal.kept()] == [3]


async def test_b27_shutdown_ends_a_detached_session_and_frees_its_slot() -> None:
    async with hosted(Limits(slow_consumer_s=0, resume_grace_s=3600)) as h:
        client = await _open(h)
        runner = h.host.session(client.seen[0].session.id)
        assert runner is not None
        await client.close()
        await eventually(
            "detached", lambda: _resumption(runner).attachment.state is AttachmentState.DETACHED
        )
        await h.host.close_sessions()
        await eventually("the slot freed", lambda: h.host.sessions == 0)
        assert _resumption(runner).attachment.state is AttachmentState.CLOSED
        assert isinstance(_resumption(runner).journal.kept()[-1], ev.SessionClosed)


async def test_b27_a_resume_of_a_session_whose_worker_exited_is_unknown_session_saying_so() -> None:
    board = WorkerBoard(2)
    board.set_owner(0, 0xDEAD0001)
    board.exited(0)  # worker 0 held sessions, then exited; this host is its neighbour
    host = SessionHost(HostSettings(backend="scripted"), board=board, worker=1)
    gone = session_id(0xDEAD0001, 7)
    assert host.owner_elsewhere(gone) is None  # nobody to relay to
    channel, send, receive = memory_channel_pair()
    with pytest.raises(UnknownSession) as info:
        await host.resume(channel, ev.SessionResume(session_id=gone, resume_token="t"))
    with pytest.raises(UnknownSession) as elsewhere:
        await host.resume(channel, ev.SessionResume(session_id="sess_other", resume_token="t"))
    await channel.close(1000)
    await send.aclose()
    await receive.aclose()
    assert info.value.code is ErrorCode.UNKNOWN_SESSION
    assert "(worker 0) exited" in info.value.message
    assert "another server" in elsewhere.value.message
    assert host.metrics.value("joyduplex_session_resume_total", event="refused") == 2


def test_b27_a_session_of_another_live_worker_is_relayed_to_that_worker() -> None:
    board = WorkerBoard(3)
    host = SessionHost(HostSettings(backend="scripted"), board=board, worker=1)
    board.set_owner(2, 0x0000BEEF)
    assert session_owner(host.new_session_id()) == host.owner
    assert host.owner_elsewhere(session_id(0x0000BEEF, 12)) == 2
    assert host.owner_elsewhere(session_id(host.owner, 99)) is None  # its own (ended)
    assert host.owner_elsewhere("sess_not_ours") is None


def test_b27_a_host_id_names_the_server_in_its_ids_and_only_its_own_ids_are_relayed() -> None:
    board = WorkerBoard(2)
    host = SessionHost(HostSettings(backend="scripted", host_id="host-a"), board=board, worker=1)
    board.set_owner(0, 0x0000BEEF)
    issued = host.new_session_id()
    assert issued == f"sess_host-a.{host.owner:08x}0001"
    assert (session_host(issued), session_owner(issued)) == ("host-a", host.owner)
    plain = session_id(0x0000BEEF, 12)  # a server without a host id issues these
    assert (session_host(plain), session_owner(plain)) == (None, 0x0000BEEF)
    assert host.owner_elsewhere(session_id(0x0000BEEF, 12, "host-a")) == 0
    # another server's ids: the owner id they carry says nothing about this server
    assert host.owner_elsewhere(session_id(0x0000BEEF, 12, "host-b")) is None
    assert host.owner_elsewhere(plain) is None
    for odd in ("sess_.0000beef0012", "sess_Host.0000beef0012", "sess_a.b.0000beef0012"):
        assert (session_host(odd), session_owner(odd)) == (None, None), odd


async def test_b27_a_resume_of_another_hosts_session_is_unknown_session_naming_that_host() -> None:
    host = SessionHost(HostSettings(backend="scripted", host_id="host-a"), board=WorkerBoard(1))
    channel, send, receive = memory_channel_pair()
    with pytest.raises(UnknownSession) as info:
        await host.resume(
            channel, ev.SessionResume(session_id=session_id(7, 1, "host-b"), resume_token="t")
        )
    await channel.close(1000)
    await send.aclose()
    await receive.aclose()
    assert info.value.code is ErrorCode.UNKNOWN_SESSION
    assert "another server, host_id `host-b`" in info.value.message
