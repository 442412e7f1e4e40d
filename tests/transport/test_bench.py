"""`joyduplex bench` (clients/loadgen): the load tool, in-process against a real
`joyduplex serve --backend scripted` subprocess on loopback.

Only structural facts are asserted (what was counted, which fields are filled in), never
how fast anything was: the machine running the tests may be loaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import wave
from pathlib import Path

import numpy as np
import pytest

from clients.loadgen import (
    RATE_HZ,
    BenchOptions,
    BenchReport,
    BenchUsageError,
    parse_cpu_seconds,
    run_bench,
)
from clients.loadgen.payloads import speech_payloads
from tests.served_process import serve
from transport.cli import main

REPORT_KEYS = {
    "tool",
    "version",
    "command",
    "url",
    "options",
    "machine",
    "window_s",
    "sessions",
    "appends_sent",
    "appends_per_s",
    "frames_sent",
    "heartbeat_rtt_ms",
    "heartbeat_unsupported",
    "server",
    "probes",
    "unexpected_speech_started",
    "errors_total",
    "errors_by_code",
    "bench",
    "baseline",
    "comparison",
}
COMPARED = {
    "sessions_held",
    "server_cores_used",
    "sessions_per_core",
    "heartbeat_rtt_p50_ms",
    "end_of_speech_to_first_audio_p50_ms",
    "bench_cpu_fraction_of_core",
    "bottleneck",
}
SESSION_KEYS = {
    "offered",
    "connected",
    "held",
    "refused",
    "refused_by_close_code",
    "refused_by_error_code",
    "connect_failed",
    "connect_failed_by_reason",
    "dropped",
    "dropped_by_close_code",
}
STATS_KEYS = {"count", "p50", "p95", "p99", "max"}


def _tone_wav(path: Path) -> Path:
    """0.3 s of silence, 1.2 s of a loud warbling tone (speech to the energy VAD), 0.3 s."""
    t = np.arange(int(1.2 * RATE_HZ)) / RATE_HZ
    tone = 0.25 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    silence = np.zeros(int(0.3 * RATE_HZ))
    pcm = np.round(np.concatenate([silence, tone, silence]) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE_HZ)
        w.writeframes(pcm.tobytes())
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _assert_stats(stats: dict[str, object], *, filled: bool) -> None:
    assert set(stats) == STATS_KEYS
    if filled:
        assert isinstance(stats["count"], int) and stats["count"] > 0
        assert all(isinstance(stats[key], float) for key in ("p50", "p95", "p99", "max"))
    else:
        assert stats == {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}


# --- the command line --------------------------------------------------------------------


def test_bench_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--sessions", "--ramp", "--append-ms", "--duration", "--speech", "--probes"):
        assert option in out
    for option in ("--frames", "--no-vad", "--api-key", "--json", "--quiet", "--server-pid"):
        assert option in out
    for option in ("--transport", "--no-baseline"):
        assert option in out


@pytest.mark.parametrize(
    "args",
    [
        ["--sessions", "0"],
        ["--append-ms", "5"],
        ["--duration", "0"],
        ["--probes", "1"],  # no speech to speak
        ["--sessions", "2", "--probes", "3", "--speech", "x.wav"],
        ["http://127.0.0.1:1/v1/realtime"],
        ["--transport", "webrtc", "--frames", "500"],
        ["--transport", "webrtc", "--append-ms", "100"],  # a call's frames are 20 ms
    ],
)
def test_bench_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *args, "--quiet"]) == 2
    assert "joyduplex bench:" in capsys.readouterr().err


def test_bench_an_unreadable_wav_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.wav"
    url = f"ws://127.0.0.1:{_closed_port()}/v1/realtime"
    assert main(["bench", url, "--speech", str(missing), "--quiet"]) == 2
    assert "missing.wav" in capsys.readouterr().err


def test_bench_that_cannot_connect_exits_1_with_a_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"ws://127.0.0.1:{_closed_port()}/v1/realtime"
    assert main(["bench", url, "--sessions", "3", "--duration", "0.2", "--quiet"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert set(report) == REPORT_KEYS
    assert report["sessions"]["connected"] == 0
    assert report["sessions"]["connect_failed"] == 3
    assert sum(report["sessions"]["connect_failed_by_reason"].values()) == 3
    assert "could not connect" in captured.err


# --- pure helpers ------------------------------------------------------------------------


def test_cpu_counter_sums_every_series_and_ignores_look_alikes() -> None:
    text = "\n".join(
        [
            "# HELP process_cpu_seconds_total Total user and system CPU time.",
            "# TYPE process_cpu_seconds_total counter",
            'process_cpu_seconds_total{worker="0"} 1.5',
            'process_cpu_seconds_total{worker="1"} 2.25 1700000000000',
            "process_cpu_seconds_total_extra 100",
            "other_metric 7",
        ]
    )
    assert parse_cpu_seconds(text) == pytest.approx(3.75)
    assert parse_cpu_seconds("process_cpu_seconds_total 4\n") == 4.0
    assert parse_cpu_seconds("joyduplex_sessions_active 3\n") is None


def test_speech_is_cut_into_whole_appends_and_its_voice_is_located(tmp_path: Path) -> None:
    with wave.open(str(_tone_wav(tmp_path / "tone.wav"))) as w:
        pcm = w.readframes(w.getnframes())
    speech = speech_payloads(pcm, 100, "tone")
    assert len(speech.chunks) == 18  # 1.8 s in 100 ms appends
    assert (speech.voiced_first, speech.voiced_last) == (3, 14)  # 0.3 s .. 1.5 s
    first = json.loads(speech.chunks[0])
    assert first["type"] == "input_audio_buffer.append"
    assert len(first["audio"]) == len(json.loads(speech.chunks[-1])["audio"])
    with pytest.raises(BenchUsageError):
        speech_payloads(b"", 100, "empty")


# --- against a served scripted backend ---------------------------------------------------


@pytest.mark.slow
def test_bench_holds_twenty_sessions_and_reports_every_field(tmp_path: Path) -> None:
    with serve(["--backend", "scripted"], tmp_path / "server.log") as served:
        options = BenchOptions(
            served.ws_url,
            sessions=20,
            ramp_s=0.5,
            append_ms=20,
            duration_s=3,
            frames_ms=500,
            server_pid=served.process.pid,
        )
        report = asyncio.run(run_bench(options))
    assert isinstance(report, BenchReport)
    data = json.loads(json.dumps(report.to_json()))
    assert set(data) == REPORT_KEYS
    assert set(data["sessions"]) == SESSION_KEYS
    sessions = data["sessions"]
    assert sessions["offered"] == sessions["connected"] == sessions["held"] == 20
    assert sessions["refused"] == sessions["connect_failed"] == sessions["dropped"] == 0
    assert data["appends_sent"] > 0 and data["appends_per_s"] > 0
    assert data["frames_sent"] > 0
    _assert_stats(data["heartbeat_rtt_ms"], filled=True)
    assert data["heartbeat_unsupported"] == 0
    assert data["errors_by_code"] == {} and data["errors_total"] == 0
    server = data["server"]
    assert server["source"] in ("metrics", "proc")  # /proc when /metrics has no CPU counter
    assert server["cpu_seconds"] is not None and server["cores_used"] is not None
    _assert_stats(data["probes"]["speech_started_delay_ms"], filled=False)
    bench = data["bench"]
    _assert_stats(bench["loop_lag_ms"], filled=True)
    _assert_stats(bench["send_lag_ms"], filled=True)
    assert isinstance(bench["bottleneck"], bool)
    assert bench["bottleneck"] == bool(bench["bottleneck_reasons"])
    assert data["machine"]["cpu_count"] >= 1
    assert data["options"]["turn_detection"]["type"] == "server_vad"


@pytest.mark.slow
def test_bench_probe_speech_is_heard_and_answered(tmp_path: Path) -> None:
    wav = _tone_wav(tmp_path / "tone.wav")
    with serve(["--backend", "scripted"], tmp_path / "server.log") as served:
        options = BenchOptions(served.ws_url, sessions=2, duration_s=8, speech=str(wav))
        report = asyncio.run(run_bench(options))
    probes = report.probes
    assert probes.sessions == 1
    assert probes.end_of_speech_reference == "wav_envelope"
    assert probes.utterances >= 1
    assert probes.speech_started_delay_ms.count >= 1
    assert probes.end_of_speech_to_first_audio_ms.count >= 1
    assert report.unexpected_speech_started == 0  # the noise stays below the VAD
    assert report.sessions.held == 2


@pytest.mark.slow
def test_bench_counts_refusals_past_max_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "limits.toml"
    config.write_text("[limits]\nmax_sessions = 5\n")
    out = tmp_path / "report.json"
    with serve(["--backend", "scripted", "--config", str(config)], tmp_path / "s.log") as served:
        args = ["bench", served.ws_url, "--sessions", "8", "--duration", "1", "--quiet"]
        assert main([*args, "--json", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    sessions = printed["sessions"]
    assert (sessions["offered"], sessions["held"], sessions["refused"]) == (8, 5, 3)
    assert sessions["refused_by_close_code"] == {"1013": 3}
    assert sessions["refused_by_error_code"] == {"resource_exhausted": 3}
    assert printed["errors_by_code"] == {"resource_exhausted": 3}
    assert printed["command"].startswith("joyduplex bench ws://127.0.0.1:")
    if printed["server"]["source"] is None:  # no CPU counter in /metrics, no --server-pid
        assert "process_cpu_seconds_total" in printed["server"]["note"]
        assert printed["server"]["cores_used"] is None


# --- over WebRTC calls (the webrtc extra) -------------------------------------------------


@pytest.mark.slow
def test_bench_over_webrtc_holds_calls_and_reports_them_beside_the_websocket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra (aiortc) is not installed")
    with serve(["--backend", "scripted"], tmp_path / "server.log") as served:
        args = ["bench", served.ws_url, "--transport", "webrtc", "--sessions", "3"]
        pid = ["--server-pid", str(served.process.pid)]
        assert main([*args, "--duration", "2", "--quiet", *pid]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == REPORT_KEYS
    assert report["options"]["transport"] == "webrtc"
    assert report["options"]["append_ms"] == 20
    baseline = report["baseline"]
    assert set(baseline) == REPORT_KEYS and baseline["baseline"] is None
    assert baseline["options"]["transport"] == "websocket"
    for run in (baseline, report):
        sessions = run["sessions"]
        assert sessions["offered"] == sessions["connected"] == sessions["held"] == 3
        assert sessions["refused"] == sessions["connect_failed"] == sessions["dropped"] == 0
        assert run["appends_per_s"] > 0
        _assert_stats(run["heartbeat_rtt_ms"], filled=True)
        assert run["errors_total"] == 0, run["errors_by_code"]
        assert run["server"]["cores_used"] is not None  # --server-pid: /proc at least
    compared = report["comparison"]
    assert set(compared) == COMPARED
    assert compared["sessions_held"] == {"websocket": 3, "webrtc": 3, "ratio": 1.0}
    per_core = compared["sessions_per_core"]
    assert per_core["websocket"] == baseline["server"]["sessions_per_core"]
    assert per_core["webrtc"] == report["server"]["sessions_per_core"]


@pytest.mark.slow
def test_bench_webrtc_probe_hears_its_reply_on_the_audio_track(tmp_path: Path) -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra (aiortc) is not installed")
    wav = _tone_wav(tmp_path / "tone.wav")
    with serve(["--backend", "scripted"], tmp_path / "server.log") as served:
        options = BenchOptions(
            served.ws_url,
            sessions=2,
            append_ms=20,
            duration_s=8,
            speech=str(wav),
            transport="webrtc",
            baseline=False,
        )
        report = asyncio.run(run_bench(options))
    assert report.baseline is None and report.comparison is None
    probes = report.probes
    assert probes.utterances >= 1
    assert probes.speech_started_delay_ms.count >= 1
    # no audio deltas on a call: the first reply audio is what the track played
    assert probes.end_of_speech_to_first_audio_ms.count >= 1
    assert report.unexpected_speech_started == 0
    assert report.sessions.held == 2


@pytest.mark.slow
def test_bench_webrtc_counts_calls_refused_past_max_sessions(tmp_path: Path) -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra (aiortc) is not installed")
    config = tmp_path / "limits.toml"
    config.write_text("[limits]\nmax_sessions = 2\n")
    with serve(["--backend", "scripted", "--config", str(config)], tmp_path / "s.log") as served:
        options = BenchOptions(
            served.ws_url, sessions=3, append_ms=20, duration_s=1, transport="webrtc"
        )
        options = dataclasses.replace(options, baseline=False)
        report = asyncio.run(run_bench(options))
    sessions = report.sessions
    assert (sessions.offered, sessions.held, sessions.refused) == (3, 2, 1), sessions
    assert sessions.refused_by_close_code == {"http_503": 1}
    assert sessions.refused_by_error_code == {"resource_exhausted": 1}
    assert report.errors_by_code == {"resource_exhausted": 1}
