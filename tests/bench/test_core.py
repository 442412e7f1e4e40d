"""Core cost beside a same-run baseline (msgspec decode of the same events).

- one 20 ms append through `SessionProtocol.receive` + `next_outputs`, vs decoding it;
- a full turn (speech start, 50 appends, stop, commit, transcript, 20 audio deltas, done)
  through the session, vs decoding its 51 client frames.
Target: one append costs under 3x its own decode. Reported, not asserted.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from core.session import SessionProtocol
from spec import events as ev
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm
from spec.session_config import validate_session
from spec.stage_results import (
    AsrTranscript,
    TtsAudio,
    TtsDone,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)
from transport import codec

_PCM = (np.sin(np.arange(320) / 5.0) * 8000).astype("<i2").tobytes()  # 20 ms, 16 kHz
_FRAME = json.dumps(
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(_PCM).decode()}
).encode()
_COMMIT = b'{"type":"input_audio_buffer.commit","create_response":true}'
_APPEND = codec.decode_client_event(_FRAME)
_VAD = validate_session({"turn_detection": {"type": "server_vad"}})


def _append_once(state: dict[str, object]) -> None:
    p: SessionProtocol = state["p"]  # type: ignore[assignment]
    p.receive(_APPEND, 0)
    p.next_outputs()
    if p.pending_bytes > 8_000_000:  # keep the buffer bounded across rounds
        p.receive(ev.InputAudioBufferClear(), 0)
        p.next_outputs()


@pytest.mark.benchmark(group="core-append-20ms")
def test_bench_append_through_session(benchmark) -> None:  # type: ignore[no-untyped-def]
    p = SessionProtocol(session_id="bench")
    p.receive(ev.InputAudioBufferAppend(audio=_PCM, is_speech=True), 0)  # capturing
    benchmark(_append_once, {"p": p})


@pytest.mark.benchmark(group="core-append-20ms")
def test_bench_append_decode_baseline(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark(codec.decode_client_event, _FRAME)


def _full_turn() -> int:
    p = SessionProtocol(session_id="bench", config=_VAD)
    emitted = 0
    p.backend_event(VadScores((0.9, 0.9, 0.9)), 0)
    for _ in range(50):
        p.receive(_APPEND, 0)
    p.backend_event(VadScores((0.1,) * 16), 0)  # stop -> commit -> response
    out = p.next_outputs()
    asr = next(o for o in out if isinstance(o, SubmitAsr))
    p.backend_event(AsrTranscript(asr.request_id, "what colour is this"), 0)
    out = p.next_outputs()
    vlm = next(o for o in out if isinstance(o, SubmitVlm))
    p.backend_event(VlmDelta(vlm.request_id, "It is red."), 0)
    p.backend_event(VlmDecisionResult(vlm.request_id, "speak"), 0)
    out += p.next_outputs()
    tts = next(o for o in out if isinstance(o, SubmitTts))
    chunk = bytes(960)  # 20 ms at 24 kHz
    for _ in range(20):
        p.backend_event(TtsAudio(tts.request_id, chunk, "red"), 0)
    p.backend_event(TtsDone(tts.request_id), 0)
    emitted += len(p.next_outputs())
    return emitted


def _decode_turn() -> None:
    for _ in range(50):
        codec.decode_client_event(_FRAME)
    codec.decode_client_event(_COMMIT)


@pytest.mark.benchmark(group="core-full-turn")
def test_bench_full_turn_through_session(benchmark) -> None:  # type: ignore[no-untyped-def]
    assert benchmark(_full_turn) > 0


@pytest.mark.benchmark(group="core-full-turn")
def test_bench_full_turn_decode_baseline(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark(_decode_turn)


# --- the listening path: what one GA client's append costs the server ---------------------

_PCM_24K = (np.sin(np.arange(480) / 7.5) * 300).astype("<i2").tobytes()  # 20 ms, 24 kHz, quiet
_FRAME_24K = json.dumps(
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(_PCM_24K).decode()}
).encode()
_LISTENING = validate_session(
    {
        "type": "realtime",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24_000},
                "turn_detection": {"type": "server_vad"},
            }
        },
    }
)


def _listening_append(p: SessionProtocol) -> None:
    """Decode, apply (24 kHz -> 16 kHz, idle retention, the ScoreVad effect), drain."""
    p.receive(codec.decode_client_event(_FRAME_24K), 0)
    p.next_outputs()


@pytest.mark.benchmark(group="listening-append-24khz-20ms")
def test_bench_listening_append_through_decode_and_session(benchmark) -> None:  # type: ignore[no-untyped-def]
    p = SessionProtocol(session_id="bench", config=_LISTENING)
    p.next_outputs()
    benchmark(_listening_append, p)


@pytest.mark.benchmark(group="listening-append-24khz-20ms")
def test_bench_listening_append_decode_baseline(benchmark) -> None:  # type: ignore[no-untyped-def]
    benchmark(codec.decode_client_event, _FRAME_24K)
