"""Decoding a 20 ms pcm16 append: msgspec tagged union vs json.loads + base64 (same run)."""

from __future__ import annotations

import base64
import json

import pytest

from spec.events import InputAudioBufferAppend
from transport import codec

# 20 ms of 16 kHz mono pcm16 = 640 bytes
_PCM = bytes(range(256)) * 2 + bytes(128)
_FRAME = json.dumps(
    {
        "type": "input_audio_buffer.append",
        "event_id": "evt_1",
        "audio": base64.b64encode(_PCM).decode(),
    }
).encode()


def _stdlib(frame: bytes) -> bytes:
    obj = json.loads(frame)
    return base64.b64decode(obj["audio"])


@pytest.mark.benchmark(group="codec-append-20ms")
def test_bench_append_decode_msgspec(benchmark) -> None:  # type: ignore[no-untyped-def]
    event = benchmark(codec.decode_client_event, _FRAME)
    assert isinstance(event, InputAudioBufferAppend) and event.audio == _PCM


@pytest.mark.benchmark(group="codec-append-20ms")
def test_bench_append_decode_json_loads_base64_baseline(benchmark) -> None:  # type: ignore[no-untyped-def]
    assert benchmark(_stdlib, _FRAME) == _PCM
