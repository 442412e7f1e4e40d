"""`joyduplex client` (`run_client`) against a fake server on 127.0.0.1."""

from __future__ import annotations

import argparse
import base64
import socket
import wave
from pathlib import Path

import numpy as np
import pytest

from clients.cli import add_client_arguments, read_wav_16k_mono, run_client
from tests.transport.test_client_fake_server import (
    REPLY_AUDIO,
    REPLY_WORDS,
    USER_TRANSCRIPT,
    FakeRealtimeServer,
    error,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _write_wav(path: Path, samples: np.ndarray, rate: int, width: int = 2) -> Path:
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(samples.astype("<i2").tobytes() if width == 2 else bytes(samples.size))
    return path


def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return np.round(8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


@pytest.mark.anyio
async def test_one_spoken_turn_writes_the_reply_as_a_24khz_mono_wav(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tone = _tone(0.5, 44_100)
    wav = _write_wav(tmp_path / "in.wav", np.stack([tone, tone], axis=1), 44_100)
    image = tmp_path / "frame.png"
    image.write_bytes(PNG)
    out = tmp_path / "reply.wav"
    server = FakeRealtimeServer(required_token="sk-1")
    async with server.running():
        status = await run_client(server.url, wav, image, out, "sk-1", timeout=30)

    assert status == 0
    with wave.open(str(out), "rb") as reply:
        assert (reply.getnchannels(), reply.getsampwidth(), reply.getframerate()) == (1, 2, 24_000)
        assert reply.readframes(reply.getnframes()) == b"".join(REPLY_AUDIO)
    printed = capsys.readouterr().out
    assert f"user: {USER_TRANSCRIPT}" in printed
    assert f"assistant: {''.join(REPLY_WORDS)}" in printed
    # the turn as sent: manual turns, 20 ms appends of 16 kHz audio, image on the first
    update = server.received_of("session.update")[0]["session"]
    assert update["turn_detection"] is None
    appends = server.received_of("input_audio_buffer.append")
    assert len(appends) == 25
    assert {a["sample_rate_hz"] for a in appends} == {16_000}
    assert [base64.b64decode(f) for f in appends[0]["video_frames"]] == [PNG]
    assert sum(len(base64.b64decode(a["audio"])) for a in appends) == 2 * 8000
    assert server.received_of("input_audio_buffer.commit")[0]["create_response"] is True
    assert server.headers[0]["Authorization"] == "Bearer sk-1"


@pytest.mark.anyio
async def test_server_error_exits_non_zero_with_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = _write_wav(tmp_path / "in.wav", _tone(0.1, 16_000), 16_000)
    server = FakeRealtimeServer()
    server.answers["input_audio_buffer.commit"] = lambda event: [
        error("input_backpressure", "too much input", event_id=event["event_id"])
    ]
    async with server.running():
        status = await run_client(server.url, wav, None, tmp_path / "out.wav", None, timeout=30)
    assert status == 1
    assert "input_backpressure: too much input" in capsys.readouterr().err
    assert not (tmp_path / "out.wav").exists()


@pytest.mark.anyio
async def test_no_reply_in_time_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = _write_wav(tmp_path / "in.wav", _tone(0.1, 16_000), 16_000)
    server = FakeRealtimeServer()
    del server.answers["input_audio_buffer.commit"]
    async with server.running():
        status = await run_client(server.url, wav, None, tmp_path / "out.wav", None, timeout=0.1)
    assert status == 1
    assert "no reply within 0.1 s" in capsys.readouterr().err


@pytest.mark.anyio
async def test_unreachable_server_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = _write_wav(tmp_path / "in.wav", _tone(0.1, 16_000), 16_000)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    assert await run_client(url, wav, None, tmp_path / "o.wav", None, timeout=1) == 1
    assert "cannot connect" in capsys.readouterr().err


@pytest.mark.anyio
async def test_unusable_inputs_exit_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eight_bit = _write_wav(tmp_path / "u8.wav", np.zeros(800), 8_000, width=1)
    fast = _write_wav(tmp_path / "fast.wav", np.zeros(960), 96_000)
    good = _write_wav(tmp_path / "good.wav", np.zeros(160), 16_000)
    text = tmp_path / "note.txt"
    text.write_text("not an image")
    url = "ws://127.0.0.1:9/v1/realtime"  # never contacted
    out = tmp_path / "o.wav"
    assert await run_client(url, eight_bit, None, out, None) == 2
    assert await run_client(url, fast, None, out, None) == 2
    assert await run_client(url, tmp_path / "missing.wav", None, out, None) == 2
    assert await run_client(url, good, text, out, None) == 2
    err = capsys.readouterr().err
    assert "8-bit" in err
    assert "96000 Hz" in err
    assert "neither JPEG nor PNG" in err


def test_stereo_8khz_becomes_16khz_mono_by_interpolation(tmp_path: Path) -> None:
    left = np.array([0, 100, 200, 300], dtype=np.int16)
    right = np.array([0, 300, 600, 900], dtype=np.int16)
    wav = _write_wav(tmp_path / "st.wav", np.stack([left, right], axis=1), 8_000)
    pcm = np.frombuffer(read_wav_16k_mono(wav), dtype="<i2")
    assert pcm.tolist() == [0, 100, 200, 300, 400, 500, 600, 600]


def test_client_arguments_register_on_a_sub_parser() -> None:
    parser = argparse.ArgumentParser()
    add_client_arguments(parser.add_subparsers(dest="command").add_parser("client"))
    args = parser.parse_args(["client", "--wav", "a.wav", "--token", "k", "--timeout", "3"])
    assert (args.wav, args.token, args.timeout, args.image) == (Path("a.wav"), "k", 3.0, None)
    assert args.url.startswith("ws://127.0.0.1")
    assert args.out == Path("reply.wav")
