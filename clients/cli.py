"""`joyduplex client`: speak one WAV turn (optionally with a camera image) to a server.

It reads a pcm16 WAV (mono or stereo, 8-48 kHz), converts it to 16 kHz mono, opens a
session with manual turns, streams the audio in 20 ms appends (the image, JPEG or PNG,
rides on the first), commits with `create_response: true`, and waits for the reply. The
reply audio is written as a 24 kHz mono pcm16 WAV; the user transcript(s) and the reply
transcript are printed. Exit status: 0 on a reply (or a quiet turn), 1 on a server error,
a timeout or a lost connection, 2 on unusable input files.
"""

from __future__ import annotations

import sys
import urllib.parse
import wave
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from clients.duplex_client import ConnectionLost, DuplexClient, HandshakeRefused, ServerError

if TYPE_CHECKING:
    import argparse

    from clients.responses import ResponseResult

__all__ = [
    "INPUT_RATE_HZ",
    "OUTPUT_RATE_HZ",
    "add_client_arguments",
    "read_wav_16k_mono",
    "read_wav_mono",
    "run_client",
    "run_client_from_args",
    "write_wav_mono",
]

INPUT_RATE_HZ = 16_000
OUTPUT_RATE_HZ = 24_000
MIN_RATE_HZ = 8_000
MAX_RATE_HZ = 48_000
CHUNK_MS = 20
DEFAULT_URL = "ws://127.0.0.1:8000/v1/realtime"


#: what to do about a refused handshake, by HTTP status
_REFUSAL_HINTS = {
    401: "; pass the server's API key with --token",
    403: "; the server refuses this client's Origin (see allowed_origins)",
}


class InputFileError(ValueError):
    """An input file this command cannot use (message says why)."""


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the `client` sub-command's options on `parser`."""
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server URL (default {DEFAULT_URL})")
    parser.add_argument("--wav", required=True, type=Path, help="pcm16 WAV to speak (8-48 kHz)")
    parser.add_argument("--image", type=Path, help="a JPEG or PNG camera frame to send along")
    parser.add_argument(
        "--out", type=Path, default=Path("reply.wav"), help="where to write the reply audio"
    )
    parser.add_argument("--token", help="API key, sent as `Authorization: Bearer <token>`")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")
    parser.add_argument(
        "--transport",
        choices=("websocket", "webrtc"),
        default="websocket",
        help="the websocket at --url, or a WebRTC call to its host (POST .../calls; the "
        "WAV goes out on the microphone track in real time, the image on a camera track, "
        "the reply is what the audio track played, 48 kHz) (websocket)",
    )


async def run_client_from_args(args: argparse.Namespace) -> int:
    """`run_client` with the options `add_client_arguments` parsed."""
    return await run_client(
        args.url,
        args.wav,
        args.image,
        args.out,
        args.token,
        timeout=args.timeout,
        transport=args.transport,
    )


async def run_client(
    url: str,
    wav_path: str | Path,
    image_path: str | Path | None,
    out_path: str | Path,
    token: str | None,
    *,
    timeout: float = 60.0,
    transport: str = "websocket",
) -> int:
    """Speak one turn to the server at `url`; write and print the reply. Returns the
    exit status (messages go to stderr)."""
    try:
        pcm16 = read_wav_16k_mono(Path(wav_path))
        frames = [_read_image(Path(image_path))] if image_path is not None else []
        picture = _picture(Path(image_path)) if image_path and transport == "webrtc" else None
    except InputFileError as exc:
        print(f"joyduplex client: {exc}", file=sys.stderr)
        return 2
    try:
        if transport == "webrtc":
            result, audio, rate = await _call_turn(url, pcm16, picture, token, timeout)
        else:
            result = await _websocket_turn(url, pcm16, frames, token, timeout)
            audio, rate = result.audio, OUTPUT_RATE_HZ
    except ImportError as exc:
        print(f"joyduplex client: a WebRTC call needs the webrtc extra: {exc}", file=sys.stderr)
        return 1
    except ServerError as exc:
        print(f"joyduplex client: the server refused: {exc}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"joyduplex client: no reply within {timeout:g} s", file=sys.stderr)
        return 1
    except HandshakeRefused as exc:
        print(f"joyduplex client: {exc}{_REFUSAL_HINTS.get(exc.status, '')}", file=sys.stderr)
        return 1
    except ConnectionLost as exc:
        print(f"joyduplex client: {exc}", file=sys.stderr)
        return 1
    for transcript in result.user_transcripts:
        print(f"user: {transcript}")
    if result.status == "listen" or result.status_reason == "listen":
        print("assistant: (stayed silent)")
    else:
        print(f"assistant: {result.transcript}")
    for error in result.errors:
        print(f"joyduplex client: error {error.code}: {error.message}", file=sys.stderr)
    write_wav_mono(Path(out_path), audio, rate)
    print(f"reply audio: {len(audio) / 2 / rate:.2f} s -> {out_path}")
    if result.status not in ("completed", "listen"):
        print(f"joyduplex client: the response ended {result.status}", file=sys.stderr)
        return 1
    return 0


_SESSION_AUDIO = {
    "input": {"format": {"type": "audio/pcm", "rate": INPUT_RATE_HZ}},
    "output": {"format": {"type": "audio/pcm", "rate": OUTPUT_RATE_HZ}},
}


async def _websocket_turn(
    url: str, pcm16: bytes, frames: list[bytes], token: str | None, timeout: float
) -> ResponseResult:
    async with DuplexClient.connect(url, token=token) as client:
        await client.update_session(turn_detection=None, audio=_SESSION_AUDIO)
        await client.stream_audio(
            pcm16, chunk_ms=CHUNK_MS, frames=frames, sample_rate_hz=INPUT_RATE_HZ
        )
        await client.commit(create_response=True)
        return await client.collect_response(timeout)


async def _call_turn(
    url: str,
    pcm16: bytes,
    picture: npt.NDArray[np.uint8] | None,
    token: str | None,
    timeout: float,
) -> tuple[ResponseResult, bytes, int]:
    """One turn over a WebRTC call to `url`'s host: (the response, the reply audio as the
    track played it from its first audible packet, its rate)."""
    from clients.webrtc_call import CALL_RATE_HZ, open_call

    async with open_call(_http_base(url), token=token, camera=picture) as call:
        await call.update_session(turn_detection=None, audio=_SESSION_AUDIO)
        await call.speak(pcm16)
        since = len(call.heard)
        await call.commit(create_response=True)
        result = await call.collect_response(timeout)
        played = any(
            getattr(e, "type", None) == "output_audio_buffer.stopped" for e in call.history
        )
        if result.status == "completed" and not played:  # it plays on in real time
            await call.wait_for("output_audio_buffer.stopped", timeout=timeout)
        return result, call.audible_since(since), CALL_RATE_HZ


def _http_base(url: str) -> str:
    """`ws://host:port/...` -> `http://host:port` (wss -> https): where calls go."""
    parts = urllib.parse.urlsplit(url)
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    return f"{scheme}://{parts.netloc}"


def _picture(path: Path) -> npt.NDArray[np.uint8]:
    """A JPEG or PNG as the RGB picture a call's camera track sends."""
    _read_image(path)  # the same checks as on the websocket
    try:
        import av

        with av.open(str(path)) as container:
            frame = next(container.decode(video=0))
            picture = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
    except (ImportError, StopIteration, OSError, ValueError) as exc:
        raise InputFileError(f"cannot decode image `{path}`: {exc}") from exc
    return picture


def read_wav_16k_mono(path: Path) -> bytes:
    """A pcm16 WAV (mono or stereo, 8-48 kHz) as 16 kHz mono pcm16 (linear interpolation).

    Raises:
        InputFileError: unreadable, not 16-bit, more than two channels, rate out of range.
    """
    return read_wav_mono(path, INPUT_RATE_HZ)


def read_wav_mono(path: Path, rate_hz: int) -> bytes:
    """A pcm16 WAV (mono or stereo, 8-48 kHz) as mono pcm16 at `rate_hz` (linear
    interpolation).

    Raises:
        InputFileError: unreadable, not 16-bit, more than two channels, rate out of range.
    """
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            data = wav.readframes(wav.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise InputFileError(f"cannot read WAV `{path}`: {exc}") from exc
    if width != 2:
        raise InputFileError(f"`{path}` is {8 * width}-bit; expected 16-bit pcm")
    if channels not in (1, 2):
        raise InputFileError(f"`{path}` has {channels} channels; expected mono or stereo")
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise InputFileError(f"`{path}` is {rate} Hz; expected {MIN_RATE_HZ}-{MAX_RATE_HZ} Hz")
    samples = np.frombuffer(data, dtype="<i2").astype(np.float64)
    mono = samples.reshape(-1, channels).mean(axis=1)
    return _resample(mono, rate, rate_hz).tobytes()


def _resample(mono: npt.NDArray[np.float64], rate: int, target: int) -> npt.NDArray[np.int16]:
    if rate != target and mono.size:
        count = round(mono.size * target / rate)
        mono = np.interp(np.arange(count) * rate / target, np.arange(mono.size), mono)
    return np.clip(np.round(mono), -32768, 32767).astype("<i2")


def write_wav_mono(path: Path, pcm16: bytes, rate: int) -> None:
    """Write mono pcm16 bytes as a WAV file."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm16)


def _read_image(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read image `{path}`: {exc}") from exc
    if not (data.startswith(b"\xff\xd8") or data.startswith(b"\x89PNG")):
        raise InputFileError(f"`{path}` is neither JPEG nor PNG")
    return data
