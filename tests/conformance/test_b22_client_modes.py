"""B22 Client modes: in VAD mode frames ride along with speech appends; in PTT mode the
camera keeps its cadence (1 fps) outside recording. Both modes' session payloads pass the
public validator (B9)."""

from __future__ import annotations

import pytest

from spec.session_config import validate_session
from spec.tables.client_constants import CAMERA_INTERVAL_MS, session_payload
from tests.web.client_driver import JPEG, Driver


def test_b22_vad_mode_frames_ride_with_speech_appends() -> None:
    d = Driver("vad", camera=True).ready()
    d.step("frame", jpeg=JPEG)
    assert d.sent("input_audio_buffer.append") == []
    d.step("frame", jpeg=JPEG + "B")  # only the newest waits
    d.step("mic", audio="BBBB", samples=640)
    [append] = d.sent("input_audio_buffer.append")
    assert append["audio"] == "BBBB"
    assert append["video_frames"] == [JPEG + "B"]
    d.step("mic", audio="BBBB", samples=640)
    assert "video_frames" not in d.sent("input_audio_buffer.append")[-1]


def test_b22_vad_mode_muted_frames_go_alone() -> None:
    d = Driver("vad", camera=True).ready()
    d.step("frame", jpeg=JPEG)
    out = d.step("mute", muted=True)  # leaving `riding` sends the waiting frame
    assert [e.get("video_frames") for e in d.sent("input_audio_buffer.append")] == [[JPEG]]
    assert d.of("send", out)
    assert d.snapshot()["camera"] == "standalone"


def test_b22_ptt_mode_camera_keeps_its_cadence_outside_recording() -> None:
    d = Driver("ptt", camera=True).ready()
    enabled_at = d.now
    assert CAMERA_INTERVAL_MS == 1000
    captures = []
    for second in range(1, 4):
        out = d.step("timeout", now_ms=enabled_at + second * CAMERA_INTERVAL_MS)
        captures.append(len(d.of("capture_frame", out)))
        d.step("frame", jpeg=JPEG)
    assert captures == [1, 1, 1]
    alone = [e for e in d.sent("input_audio_buffer.append") if "audio" not in e]
    assert len(alone) == 3
    # a pending hold does not stop them
    d.hold()
    d.step("timeout", now_ms=enabled_at + 4 * CAMERA_INTERVAL_MS)
    d.step("frame", jpeg=JPEG)
    assert len([e for e in d.sent("input_audio_buffer.append") if "audio" not in e]) == 4
    assert d.snapshot()["camera"] == "standalone"


def test_b22_ptt_mode_frames_ride_while_recording() -> None:
    d = Driver("ptt", camera=True).ready()
    d.step("press")
    assert d.snapshot()["camera"] == "riding"
    d.step("frame", jpeg=JPEG)
    d.step("mic", audio="BBBB", samples=640)
    assert d.sent("input_audio_buffer.append")[-1]["video_frames"] == [JPEG]
    d.step("release")
    assert d.snapshot()["camera"] == "standalone"


@pytest.mark.parametrize("mode", ["ptt", "vad"])
def test_b22_mode_session_payload_passes_the_public_validator(mode: str) -> None:
    d = Driver(mode)
    [update] = [o["event"] for o in d.step("connected")]
    assert update["session"] == session_payload(mode)
    config = validate_session(update["session"])
    assert (config.turn_detection is not None) == (mode == "vad")
