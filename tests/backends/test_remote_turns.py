"""The remote backend end to end through the runtime, against real HTTP servers on loopback.

The stage servers are `FakeReplica`s (`remote_fleet.py`): Starlette apps in threads that
speak the documented API shapes of vLLM (transcriptions, streamed chat completions) and
vLLM-Omni (streamed `/v1/audio/speech`, raw PCM16 at 24 kHz). A `SessionHost` builds the
backend from a `[remote]` table exactly as `joyduplex serve --backend remote` does and
serves one session over an in-memory channel; a last test runs the real command.
The same turns against real `vllm serve` processes are in test_remote_vllm_cpu.py (slow).
"""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from runtime.channel import memory_channel_pair
from runtime.host import HostSettings, SessionHost
from spec import events as ev
from spec.session_config import validate_session
from tests.backends.remote_fleet import FakeReplica, TurnOverhead, measure_turns, speech_pcm
from tests.openai_sdk import sdk_client

PIL = pytest.importorskip("PIL")

TURN_TIMEOUT_S = 10.0
TRANSCRIBED = "conversation.item.input_audio_transcription.completed"


def _jpeg(color: tuple[int, int, int] = (30, 200, 30)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, format="JPEG")
    return out.getvalue()


def _speech_like(seconds: float = 0.5) -> bytes:
    t = np.arange(int(16_000 * seconds)) / 16_000
    return (np.sin(2 * np.pi * 140 * t) * 6000).astype("<i2").tobytes()


def _tags(events: list[Any]) -> list[str]:
    return [str(e.__struct_config__.tag) for e in events]


@pytest.fixture
def fleet() -> Any:
    replicas = {
        "asr": FakeReplica("asr-0").start(),
        "vlm0": FakeReplica("vlm-0").start(),
        "vlm1": FakeReplica("vlm-1").start(),
        "tts": FakeReplica("tts-0").start(),
    }
    yield replicas
    for replica in replicas.values():
        replica.stop()


def remote_table(fleet: dict[str, FakeReplica], **vlm: Any) -> dict[str, Any]:
    return {
        "probe_interval_s": 0.05,
        "connect_timeout_s": 1.0,
        "asr": {"urls": [fleet["asr"].url], "model": "qwen3-asr", "timeout_s": 5.0},
        "vlm": {
            "urls": [fleet["vlm0"].url, fleet["vlm1"].url],
            "model": "joyai",
            "api_key": "vlm-secret",
            "timeout_s": 5.0,
            "max_model_len": 4096,
            "max_tokens": 64,
            **vlm,
        },
        "tts": {"urls": [fleet["tts"].url], "model": "qwen3-tts", "voice": "vivian"},
    }


#: a typed question that a camera-only turn takes along: JoyAI's stages answer nothing
#: before the first question (B30), and these tests are about the stage plumbing
QUESTION = ev.ConversationItemCreate(
    item=ev.ConversationItem(content=[ev.ContentPart(type="input_text", text="What is here?")])
)


class Client:
    def __init__(self, send: Any, receive: Any) -> None:
        self.send = send.send
        self.receive = receive

    async def until(self, tag: str, events: list[Any] | None = None) -> list[Any]:
        events = [] if events is None else events
        with anyio.fail_after(TURN_TIMEOUT_S):
            while True:
                event = await self.receive.receive()
                events.append(event)
                if str(event.__struct_config__.tag) == tag:
                    return events

    async def turn(self, *appends: ev.InputAudioBufferAppend) -> list[Any]:
        for append in appends:
            await self.send(append)
        await self.send(ev.InputAudioBufferCommit(create_response=True))
        return await self.until("response.done")


async def serve_one(host: SessionHost, run: Any, config: dict[str, Any] | None = None) -> Any:
    channel, send, receive = memory_channel_pair()
    session = validate_session(config or {})
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: host.serve(channel, config=session))
        created = await receive.receive()
        assert isinstance(created, ev.SessionCreated)
        result = await run(Client(send, receive))
        await send.aclose()
        await receive.aclose()
    return result


async def with_host(remote: dict[str, Any], run: Any, *, profile: str = "speech") -> Any:
    host = SessionHost(
        HostSettings(backend="remote", profile=profile, backend_options={"remote": remote})
    )
    await host.start()
    try:
        return await run(host)
    finally:
        await host.stop()


def _audio(events: list[Any]) -> bytes:
    return b"".join(e.delta for e in events if isinstance(e, ev.ResponseOutputAudioDelta))


def test_spoken_turn_with_a_frame_then_camera_turn(fleet: dict[str, FakeReplica]) -> None:
    async def run(host: SessionHost) -> Any:
        assert host.ready and host.backend is not None
        assert "vlm x2 (joyai)" in host.backend.description

        async def session(client: Client) -> tuple[list[Any], list[Any]]:
            spoken = await client.turn(
                ev.InputAudioBufferAppend(audio=_speech_like(), video_frames=[_jpeg()])
            )
            camera = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg((9, 9, 9))]))
            return spoken, camera

        return await serve_one(host, session)

    spoken, camera = anyio.run(with_host, remote_table(fleet), run)

    tags = _tags(spoken)
    assert "error" not in tags, spoken
    [transcribed] = [e for e in spoken if isinstance(e, ev.InputAudioTranscriptionCompleted)]
    assert transcribed.transcript == "what do you see"
    assert tags.index(TRANSCRIBED) < tags.index("response.output_audio.delta")
    assert spoken[-1].response.status == "completed"
    [said] = [e for e in spoken if isinstance(e, ev.ResponseOutputAudioTranscriptDone)]
    assert said.transcript == "Hello there. I see a cat."
    # the 24 kHz PCM16 stream, chunks split mid-sample, reaches the 24 kHz session whole
    assert _audio(spoken) == speech_pcm(0.5) * 2  # two sentences, 0.5 s each

    # ASR: one WAV upload on the transcription API, no language: Qwen3-ASR detects it
    [asr] = fleet["asr"].requests("/v1/audio/transcriptions")
    assert asr.body["model"] == "qwen3-asr" and "language" not in asr.body
    assert asr.body["file_head"] == "RIFF" and asr.body["file_bytes"] == 44 + len(_speech_like())
    # VLM: streamed chat completions with JoyAI's prompt, the frame as a data URL, the key
    chats = [s for r in ("vlm0", "vlm1") for s in fleet[r].requests("/v1/chat/completions")]
    assert len(chats) == 2
    first = min(chats, key=lambda s: s.started)
    body = first.body
    assert first.auth == "Bearer vlm-secret"
    assert body["stream"] is True and body["skip_special_tokens"] is False
    assert body["temperature"] == 0.8 and body["max_tokens"] == 64
    system, user = body["messages"][0], body["messages"][-1]
    assert system["role"] == "system"
    text, image = user["content"]
    assert text["type"] == "text" and "what do you see" in text["text"]
    assert text["text"].startswith("[User Query (IMPORTANT")
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    # two turns of one session, two idle replicas: both on one (session affinity), where
    # the second prompt's prefix is cached
    served = [len(fleet[r].requests("/v1/chat/completions")) for r in ("vlm0", "vlm1")]
    assert sorted(served) == [0, 2]
    # TTS: vLLM-Omni's speech API, streamed raw PCM
    speech = fleet["tts"].requests("/v1/audio/speech")
    assert [s.body["input"] for s in speech[:2]] == ["Hello there.", "I see a cat."]
    assert speech[0].body["stream"] is True and speech[0].body["response_format"] == "pcm"
    assert speech[0].body["voice"] == "vivian"

    tags = _tags(camera)
    assert TRANSCRIBED not in tags and "error" not in tags
    assert camera[-1].response.status == "completed"
    assert len(fleet["asr"].requests("/v1/audio/transcriptions")) == 1  # no ASR for a frame


def test_the_session_max_output_tokens_reaches_the_chat_request_within_the_stage_cap(
    fleet: dict[str, FakeReplica],
) -> None:
    async def run(host: SessionHost) -> Any:
        async def session(client: Client) -> list[Any]:
            events: list[Any] = []
            for cap in (16, 4096, "inf"):
                # instructions are a standing question: camera ticks reach the model (B30)
                patch = ev.SessionPatch(max_output_tokens=cap, instructions="Say what you see.")
                await client.send(ev.SessionUpdate(session=patch))
                events = await client.until("session.updated", events)
                assert events[-1].session.max_output_tokens == cap
                events += await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
            return events

        return await serve_one(host, session)

    events = anyio.run(with_host, remote_table(fleet, extra_body={"ignore_eos": True}), run)
    assert "error" not in _tags(events), events
    chats = [s for r in ("vlm0", "vlm1") for s in fleet[r].requests("/v1/chat/completions")]
    # the session's cap, then the stage's 64 for a larger one and for "inf"
    assert [s.body["max_tokens"] for s in sorted(chats, key=lambda s: s.started)] == [16, 64, 64]
    assert all(s.body["ignore_eos"] is True for s in chats)


def test_barge_in_closes_the_vlm_stream(fleet: dict[str, FakeReplica]) -> None:
    """response.cancel while the VLM streams: the server sees its client go away."""
    for name in ("vlm0", "vlm1"):
        fleet[name].vlm_pieces = ("</response>", *([" word"] * 400))
        fleet[name].piece_delay_s = 0.02

    async def run(host: SessionHost) -> Any:
        async def session(client: Client) -> list[Any]:
            await client.send(QUESTION)
            await client.send(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
            await client.send(ev.InputAudioBufferCommit(create_response=True))
            events = await client.until("response.created")
            with anyio.fail_after(5):
                while not any(s.pieces_sent >= 3 for r in ("vlm0", "vlm1") for s in fleet[r].seen):
                    await anyio.sleep(0.01)
            await client.send(ev.ResponseCancel())
            events = await client.until("response.done", events)
            with anyio.fail_after(5):
                while not any(s.disconnected for r in ("vlm0", "vlm1") for s in fleet[r].seen):
                    await anyio.sleep(0.01)
            return events

        return await serve_one(host, session)

    events = anyio.run(with_host, remote_table(fleet), run)
    assert events[-1].response.status == "cancelled"
    [seen] = [s for r in ("vlm0", "vlm1") for s in fleet[r].seen]
    assert seen.disconnected and not seen.finished
    assert seen.pieces_sent < 100  # stopped long before the end


def test_replica_killed_mid_stream_fails_one_response_then_the_other_serves(
    fleet: dict[str, FakeReplica],
) -> None:
    fleet["vlm0"].die_after = 3  # "</response> Hello there." reached the session

    async def run(host: SessionHost) -> Any:
        backend = host.backend
        assert backend is not None

        async def session(client: Client) -> tuple[list[Any], list[Any], list[Any]]:
            await client.send(QUESTION)
            failed = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
            assert host.ready  # one replica left: still in service
            served = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
            fleet["vlm0"].die_after = None
            fleet["vlm0"].start()  # the prober readmits it
            with anyio.fail_after(5):
                while not backend.vlm.pool.replicas[0].healthy:  # type: ignore[attr-defined]
                    await anyio.sleep(0.02)
            again = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
            return failed, served, again

        return await serve_one(host, session)

    failed, served, again = anyio.run(with_host, remote_table(fleet), run)
    [error] = [e for e in failed if isinstance(e, ev.Error)]
    assert error.error.code == "runtime_data_plane_stream_failed"  # ErrorCode.STAGE_FAILED
    assert "lost the connection mid-response" in error.error.message
    assert failed[-1].response.status == "failed"
    assert served[-1].response.status == "completed" and "error" not in _tags(served)
    assert again[-1].response.status == "completed"
    assert len(fleet["vlm0"].requests("/v1/chat/completions")) == 1  # the killed one
    # served, then again: the session moved with the failure and stays, vlm0 back or not
    assert len(fleet["vlm1"].requests("/v1/chat/completions")) == 2


def test_refused_connection_is_retried_on_the_other_replica_before_any_byte(
    fleet: dict[str, FakeReplica],
) -> None:
    async def run(host: SessionHost) -> Any:
        backend = host.backend
        assert backend is not None
        pool = backend.vlm.pool  # type: ignore[attr-defined]
        assert all(r.healthy for r in pool.replicas)
        fleet["vlm0"].stop()  # refuses connections; in rotation until a request finds out

        async def session(client: Client) -> list[Any]:
            await client.send(QUESTION)
            return await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))

        events = await serve_one(host, session)
        return events, pool.replicas[0].healthy, host.ready

    events, vlm0_healthy, ready = anyio.run(with_host, remote_table(fleet), run)
    assert events[-1].response.status == "completed" and "error" not in _tags(events)
    assert not vlm0_healthy and ready  # ejected by the refused connection; vlm1 serves
    assert len(fleet["vlm1"].requests("/v1/chat/completions")) == 1


def test_stage_without_healthy_replica_takes_the_backend_out_of_service_and_back(
    fleet: dict[str, FakeReplica],
) -> None:
    fleet["tts"].healthy = False

    async def run(host: SessionHost) -> None:
        readiness = host.readiness()
        assert not readiness.ready
        assert readiness.reason is not None and "stage tts out of service" in readiness.reason
        assert host.refusal() is not None  # new sessions are refused
        fleet["tts"].healthy = True
        with anyio.fail_after(5):
            while not host.ready:
                await anyio.sleep(0.02)
        assert host.readiness().ready and host.refusal() is None
        # and out again when the last replica fails a request
        fleet["tts"].status = 503

        async def session(client: Client) -> list[Any]:
            await client.send(QUESTION)
            return await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))

        events = await serve_one(host, session)
        assert events[-1].response.status == "failed"
        assert not host.ready and "stage tts" in (host.readiness().reason or "")

    anyio.run(with_host, remote_table(fleet), run)


def test_tts_against_documented_vllm_omni_speech_stream_shape(
    fleet: dict[str, FakeReplica],
) -> None:
    """Stand-in for vLLM-Omni (no vLLM-Omni server runs on this machine's CPU): the TTS
    client against a server speaking vLLM-Omni's documented streamed speech API,
    `POST /v1/audio/speech` with `stream: true` and `response_format: "pcm"`, answering a
    chunked body of raw PCM16 mono at 24 kHz, chunks cut mid-sample; resampled once to a
    16 kHz session."""
    from backends.base import TtsRequest
    from backends.remote.backend import create_backend

    async def main() -> list[bytes]:
        backend = create_backend(remote=remote_table(fleet), profile="camera")
        async with backend.tts:
            request = TtsRequest("t1", "Hello there.", 16_000)
            return [c.pcm16 async for c in backend.tts.synthesize(request)]

    chunks = anyio.run(main)
    audio = b"".join(chunks)
    source = np.frombuffer(speech_pcm(0.5), dtype="<i2").astype(np.float64)
    out = np.frombuffer(audio, dtype="<i2").astype(np.float64)
    assert abs(len(out) - len(source) * 2 / 3) <= 1
    expected = np.interp(np.arange(len(out)) * 1.5, np.arange(len(source)), source)
    assert np.max(np.abs(out - expected)) <= 1.0  # one signal, no seams at chunk cuts
    assert len(chunks) > 1


def test_joyduplex_serve_backend_remote(fleet: dict[str, FakeReplica], tmp_path: Path) -> None:
    """`joyduplex serve --backend remote --config` and `joyduplex client`: one spoken turn
    with a frame through the websocket."""
    from tests.served_process import run_client, serve

    remote = remote_table(fleet)
    lines = ['[server]\nbackend = "remote"\n', "[remote]\nprobe_interval_s = 0.05\n"]
    for stage in ("asr", "vlm", "tts"):
        urls = ", ".join(f'"{u}"' for u in remote[stage]["urls"])
        lines.append(f'[remote.{stage}]\nurls = [{urls}]\nmodel = "{stage}-model"\n')
    config = tmp_path / "joyduplex.toml"
    config.write_text("\n".join(lines))
    wav = tmp_path / "in.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(_speech_like())
    image = tmp_path / "frame.jpg"
    image.write_bytes(_jpeg())
    with serve(["--config", str(config)], tmp_path / "serve.log") as served:
        done = run_client(served, wav, tmp_path / "out.wav", image=image)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Hello there. I see a cat." in done.stdout
    assert fleet["asr"].requests("/v1/audio/transcriptions")


def test_server_overhead_of_a_remote_turn(fleet: dict[str, FakeReplica]) -> None:
    """End of commit to first audio, minus the stage servers' own time (measured from
    their responses): what the session tier adds. The stand-in servers take about as
    long as small real ones (ASR 150 ms, 25 ms per VLM token, TTS 60 ms to first audio)."""
    fleet["asr"].asr_delay_s = 0.15
    for name in ("vlm0", "vlm1"):
        fleet[name].piece_delay_s = 0.025
    fleet["tts"].tts_delay_s = 0.06
    turns: list[TurnOverhead] = []

    async def run(host: SessionHost) -> None:
        backend = host.backend
        assert backend is not None

        async def session(client: Client) -> None:
            turns.extend(await measure_turns(client, backend, _speech_like(), _jpeg()))

        await serve_one(host, session)

    anyio.run(with_host, remote_table(fleet), run)
    best = min(turns, key=lambda t: t.overhead_s)
    median = sorted(turns, key=lambda t: t.overhead_s)[len(turns) // 2]
    print(
        f"\nremote turn (stand-in servers): commit->first audio {median.total_s * 1000:.1f} ms,"
        f" servers {median.servers_s * 1000:.1f} ms (asr {median.asr_s * 1000:.1f},"
        f" vlm {median.vlm_s * 1000:.1f}, tts {median.tts_s * 1000:.1f}),"
        f" overhead median {median.overhead_s * 1000:.1f} ms ({median.overhead_share:.1%}),"
        f" best {best.overhead_s * 1000:.1f} ms"
    )
    assert all(t.overhead_s >= 0 for t in turns)
    # a loose bound: this machine's cores are shared; the figures are in the note
    assert median.overhead_share < 0.25


def test_b40_joyai_delegation_over_the_remote_backend_becomes_the_sessions_function_call(
    fleet: dict[str, FakeReplica],
) -> None:
    """--backend remote against an OpenAI-compatible server answering in JoyAI's
    delegation grammar: with a `delegate` tool declared, the question becomes its call,
    the note is spoken, and the client's output is spoken by the follow-up."""
    grammar = ("</response>", " Let me", " check.", " <delegation>", " How far", " is the moon?")
    for name in ("vlm0", "vlm1"):
        fleet[name].vlm_pieces = grammar
    delegate = {
        "type": "function",
        "name": "delegate",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
    }

    async def run(host: SessionHost) -> Any:
        async def session(client: Client) -> tuple[list[Any], list[Any]]:
            await client.send(ev.SessionUpdate(session=ev.SessionPatch(tools=[delegate])))
            first = await client.until("session.updated")
            await client.send(QUESTION)
            await client.send(ev.ResponseCreate())
            first = await client.until("response.done", first)
            [call] = [
                e.item
                for e in first
                if isinstance(e, ev.ResponseOutputItemDone) and e.item.type == "function_call"
            ]
            for name in ("vlm0", "vlm1"):
                fleet[name].vlm_pieces = ("</response>", " The moon", " is far.")
            await client.send(
                ev.ConversationItemCreate(
                    item=ev.ConversationItem(
                        type="function_call_output", call_id=call.call_id, output="384,400 km"
                    )
                )
            )
            await client.send(ev.ResponseCreate())
            return first, await client.until("response.done")

        return await serve_one(host, session)

    first, second = anyio.run(with_host, remote_table(fleet), run)
    assert "error" not in _tags(first + second), first + second
    [args] = [e for e in first if isinstance(e, ev.ResponseFunctionCallArgumentsDone)]
    assert (args.name, json.loads(args.arguments)) == (
        "delegate",
        {"question": "How far is the moon?"},
    )
    [spoken] = [e for e in first if isinstance(e, ev.ResponseOutputAudioTranscriptDone)]
    assert spoken.transcript == "Let me check."  # the note only: the question is never spoken
    assert _audio(second)
    [reply] = [e for e in second if isinstance(e, ev.ResponseOutputAudioTranscriptDone)]
    assert reply.transcript == "The moon is far."
    chats = [s for r in ("vlm0", "vlm1") for s in fleet[r].requests("/v1/chat/completions")]
    follow_up = max(chats, key=lambda s: s.started).body
    assert "384,400 km" in json.dumps(follow_up["messages"])


def test_b40_the_openai_sdk_gets_joyai_delegation_as_a_call_over_serve_backend_remote(
    fleet: dict[str, FakeReplica], tmp_path: Path
) -> None:
    """Function calling end to end with `joyduplex serve --backend remote`: the official
    `openai` SDK, unchanged, declares a `delegate` function tool; the fake
    OpenAI-compatible VLM answers in JoyAI's delegation grammar; the SDK receives the call
    with its arguments, sends the output and hears the follow-up spoken from it."""
    pytest.importorskip("openai")
    from tests.served_process import serve

    for name in ("vlm0", "vlm1"):
        fleet[name].vlm_pieces = (
            "</response>",
            " One moment.",
            " <delegation>",
            " How far is the moon?",
        )
    remote = remote_table(fleet)
    lines = ['[server]\nbackend = "remote"\n', "[remote]\nprobe_interval_s = 0.05\n"]
    for stage in ("asr", "vlm", "tts"):
        urls = ", ".join(f'"{u}"' for u in remote[stage]["urls"])
        lines.append(f'[remote.{stage}]\nurls = [{urls}]\nmodel = "{stage}-model"\n')
    config = tmp_path / "joyduplex.toml"
    config.write_text("\n".join(lines))
    delegate = {
        "type": "function",
        "name": "delegate",
        "description": "Ask a stronger model.",
        "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
    }

    async def until(conn: Any, kind: str, seen: list[Any]) -> Any:
        async for event in conn:
            seen.append(event)
            if event.type == "error":
                raise AssertionError(event.error)
            if event.type == kind:
                return event
        raise AssertionError(f"the connection ended before {kind}")

    async def run(base: str) -> tuple[list[Any], list[Any]]:
        client = sdk_client(base)
        first: list[Any] = []
        second: list[Any] = []
        async with client.realtime.connect(model="joyai") as conn:
            await conn.session.update(
                session={
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": None}},
                    "tools": [delegate],
                }
            )
            await until(conn, "session.updated", first)
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "How far is the moon?"}],
                }
            )
            await conn.response.create()
            done = await until(conn, "response.done", first)
            [call] = [i for i in done.response.output if i.type == "function_call"]
            for name in ("vlm0", "vlm1"):
                fleet[name].vlm_pieces = ("</response>", " About 384,400", " kilometres.")
            await conn.conversation.item.create(
                item={
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": "384,400 km",
                }
            )
            await conn.response.create()
            await until(conn, "response.done", second)
        await client.close()
        return first, second

    with serve(["--config", str(config)], tmp_path / "serve.log") as served:
        first, second = anyio.run(run, served.base)
    deltas = [e for e in first if e.type == "response.function_call_arguments.delta"]
    assert json.loads("".join(e.delta for e in deltas)) == {"question": "How far is the moon?"}
    notes = [e.transcript for e in first if e.type == "response.output_audio_transcript.done"]
    assert notes == ["One moment."]
    replies = [e.transcript for e in second if e.type == "response.output_audio_transcript.done"]
    assert replies == ["About 384,400 kilometres."]
    assert any(e.type == "response.output_audio.delta" for e in second)
