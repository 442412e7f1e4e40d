"""Measure how fast turns end with the embedded CPU backend: server_vad against
semantic_vad (B32) at high and medium eagerness. Reports figures; asserts nothing.

    PYTHONPATH=. python tools/measure_turn_end.py [--turns 20] [--pauses 6]

A real server (uvicorn on 127.0.0.1, in this process) with the CPU backend; one session
per detector, `create_response: false` (the turn end alone: no ASR or reply competes for
the CPU). Each turn is a Piper sentence streamed in real time in 20 ms appends, then
silence; the figure is the time from the end of the speech (the last voiced sample, found
in the audio) to `input_audio_buffer.speech_stopped`. Then mid-sentence pauses, 1 s of
silence cut into a sentence: at its quietest point in its middle third (which may fall
after words that make a complete question), after a phrase that cannot end a turn
("I want to know ...", `PHRASE_PAUSES`), and after a function word ("Can you read the
...", `FUNCTION_WORD_PAUSES`), each placed right after those words by Piper's own phoneme
alignment; a turn that ends inside the pause is counted, with the live text heard up to
it. Then a real speaker, when `make install-test` has fetched the
recording: John F. Kennedy's "And so, my fellow Americans, ask not what your country can
do for you, ask what you can do for your country.", with his three pauses inside it.
Last, the end-of-turn model's cost per call (features and model, on 8 s windows of these
sentences), in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.duplex_client import DuplexClient
from spec.events import (
    ConversationItemDelete,
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionDelta,
)
from tests.backends.cpu_audio import (
    HUMAN_SPEECH_PATH,
    HUMAN_SPEECH_PAUSES,
    human_speech,
    paused_after,
    quiet_noise,
    speech,
    speech_bounds,
    start_cpu_server,
    to_pcm16,
)

RATE = 16_000
SENTENCES = (
    "What colour is this?",
    "Is this red or blue?",
    "Can you tell me what is on the table?",
    "Describe what you see.",
    "How many fingers am I holding up?",
    "What is the name of this fruit?",
    "Please read the label for me.",
    "Is the light on in the kitchen?",
    "What time does the clock show?",
    "Thank you very much.",
    "Where did I leave my keys?",
    "Which of these two cups is bigger?",
    "Tell me a short joke.",
    "Is it going to rain today?",
    "What am I wearing right now?",
    "Could you describe the picture on the wall?",
    "How does this look to you?",
    "I want to know what colour this is.",
    "Is there anything written on this page?",
    "Good morning, how are you?",
    "What kind of plant is this?",
    "Can you see my face clearly?",
)
DETECTORS = {
    "server_vad": {"type": "server_vad"},
    "semantic_vad high": {"type": "semantic_vad", "eagerness": "high"},
    "semantic_vad medium": {"type": "semantic_vad", "eagerness": "medium"},
}
#: silence after each sentence: longer than the detector's maximum wait
TAIL_S = {"server_vad": 2.0, "semantic_vad high": 2.5, "semantic_vad medium": 4.5}


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


#: sentences with a hesitation after words that cannot end a turn (the prefix)
PHRASE_PAUSES = (
    ("I want to know what colour this is.", "I want to know"),
    ("Could you tell me where my keys are?", "Could you tell me"),
    ("The thing I am holding is a red cup.", "The thing I am holding is"),
    ("Can you check if the light is on?", "Can you check if"),
    ("My favourite colour is dark blue.", "My favourite colour is"),
    ("I was wondering whether you can see me.", "I was wondering whether"),
    ("Please tell me what is written on this page.", "Please tell me what is written on"),
    ("Is the cup on the left bigger than the other one?", "Is the cup on the left bigger than"),
)
#: hesitations where speakers most often make them: after a function word, before the
#: content word they are looking for (an article, a possessive, a conjunction)
FUNCTION_WORD_PAUSES = (
    ("Can you read the label on this bottle?", "Can you read the"),
    ("Is this my phone or yours?", "Is this my"),
    ("I think it is a kind of cactus.", "I think it is a"),
    ("Put it next to the red cup.", "Put it next to the"),
    ("Tell me if this banana is ripe.", "Tell me if"),
    ("I have a red pen and a blue one.", "I have a red pen and"),
    ("Which is heavier, the book or the plate?", "Which is heavier, the book or"),
    ("What colour is your shirt?", "What colour is your"),
)


def _mid_sentence(text: str) -> tuple[np.ndarray, float, float]:
    """The sentence cut at its quietest 20 ms in its middle third, 1 s of quiet in the
    cut; (audio, pause start s, pause end s)."""
    voice = speech(text)
    start, end = speech_bounds(voice)
    energy = np.convolve(voice**2, np.ones(320) / 320, mode="same")
    lo = int((start + (end - start) / 3) * RATE)
    hi = int((start + 2 * (end - start) / 3) * RATE)
    cut = lo + int(np.argmin(energy[lo:hi]))
    audio = np.concatenate([voice[:cut], quiet_noise(1.0, rms=0.0005, seed=11), voice[cut:]])
    return audio, cut / RATE, cut / RATE + 1.0


async def _forget(client: DuplexClient, stopped: Any) -> None:
    """Delete the committed turn: no response is asked for, and retained commits would
    reach `max_pending_commits`."""
    await client.wait_for("input_audio_buffer.committed", timeout=30)
    await client.send(ConversationItemDelete(item_id=stopped.item_id))
    await client.wait_for("conversation.item.deleted", timeout=30)


async def _turn_ends(url: str, detector: dict, texts: list[str], tail_s: float) -> list[float]:
    """Seconds from the end of each sentence's speech to its speech_stopped."""
    out: list[float] = []
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection={**detector, "create_response": False})
        for text in texts:
            voice = speech(text)
            _, end_s = speech_bounds(voice)
            audio = np.concatenate([quiet_noise(0.3, rms=0.0005, seed=1), voice])
            audio = np.concatenate([audio, quiet_noise(tail_s, rms=0.0005, seed=2)])
            started = time.monotonic()
            send = asyncio.create_task(client.stream_audio(to_pcm16(audio), realtime=True))
            stopped = await client.wait_for("input_audio_buffer.speech_stopped", timeout=30)
            out.append(time.monotonic() - (started + 0.3 + end_s))
            await send
            await _forget(client, stopped)
        await client.close_session()
    return out


async def _pauses(
    url: str, detector: dict, cases: list[tuple[np.ndarray, float, float]], tail_s: float
) -> tuple[int, int]:
    """(turns that ended inside the mid-sentence pause, cases); a session per case."""
    early = 0
    for audio, _, pause_end in cases:
        async with DuplexClient.connect(url) as client:
            await client.update_session(turn_detection={**detector, "create_response": False})
            audio = np.concatenate([audio, quiet_noise(tail_s, rms=0.0005, seed=3)])
            await client.stream_audio(to_pcm16(audio), realtime=True)
            await asyncio.sleep(0.5)  # the last verdicts
            stopped = [e for e in client.history if isinstance(e, InputAudioBufferSpeechStopped)]
            # audio_end_ms is on the session's audio clock: compare with the pause's end
            cut = [e for e in stopped if e.audio_end_ms < pause_end * 1000]
            if cut:
                early += 1
                heard = [
                    e.delta
                    for e in client.history
                    if isinstance(e, InputAudioTranscriptionDelta) and e.item_id == cut[0].item_id
                ]
                print(f"  {detector['type']} ended the turn after {heard}")
            await client.close_session()
    return early, len(cases)


async def _real_speaker(url: str, detector: dict, tail_s: float) -> list[str]:
    """The pauses of `HUMAN_SPEECH_PAUSES` in which the turn ended, with the live text
    heard up to each."""
    lead_s = 0.5
    audio = np.concatenate(
        [
            quiet_noise(lead_s, rms=0.0005, seed=1),
            human_speech(),
            quiet_noise(tail_s, rms=0.0005, seed=2),
        ]
    )
    async with DuplexClient.connect(url) as client:
        await client.update_session(turn_detection={**detector, "create_response": False})
        await client.stream_audio(to_pcm16(audio), realtime=True)
        await asyncio.sleep(0.5)  # the last verdicts
        history = client.history
        await client.close_session()
    stops = [e for e in history if isinstance(e, InputAudioBufferSpeechStopped)]
    ended = []
    for start, end in HUMAN_SPEECH_PAUSES:
        low, high = (lead_s + start) * 1000, (lead_s + end) * 1000 + 300
        for stop in (e for e in stops if low < e.audio_end_ms <= high):
            heard = "".join(
                e.delta
                for e in history
                if isinstance(e, InputAudioTranscriptionDelta) and e.item_id == stop.item_id
            )
            ended.append(f"after {heard!r}")
    return ended


def _model_cost(texts: list[str]) -> dict[str, list[float]]:
    """Per call, in ms: wall time and this thread's CPU time (on a shared machine the CPU
    time is the cost; the wall time adds the wait for a core), features and model apart."""
    from backends.cpu.log_mel import log_mel
    from backends.cpu.smart_turn import SmartTurn

    async def load() -> SmartTurn:
        model = SmartTurn()
        await model.load()
        return model

    model = asyncio.run(load())
    model.predict_sync(np.zeros(RATE, np.float32))  # onnxruntime's first run allocates
    out: dict[str, list[float]] = {k: [] for k in ("features", "features cpu", "call", "call cpu")}
    out["probability"] = []
    for text in texts:
        pcm = np.concatenate([speech(text), np.zeros(3200, np.float32)])
        wall, cpu = time.perf_counter(), time.thread_time()
        log_mel(pcm)
        out["features"].append((time.perf_counter() - wall) * 1000)
        out["features cpu"].append((time.thread_time() - cpu) * 1000)
        wall, cpu = time.perf_counter(), time.thread_time()
        out["probability"].append(model.predict_sync(pcm))
        out["call"].append((time.perf_counter() - wall) * 1000)
        out["call cpu"].append((time.thread_time() - cpu) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--pauses", type=int, default=6)
    parser.add_argument("--skip-turns", action="store_true", help="only pauses and model cost")
    parser.add_argument("--cost-only", action="store_true", help="only the model's cost")
    args = parser.parse_args()
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.turns)]
    if args.cost_only:
        main_cost(texts)
        return
    server = start_cpu_server()
    print(f"backend: {server.backend.description}")
    for name, detector in DETECTORS.items():
        if args.skip_turns:
            break
        ends = asyncio.run(_turn_ends(server.ws_url, detector, texts, TAIL_S[name]))
        ms = [e * 1000 for e in ends]
        print(
            f"{name:20s} end of speech -> speech_stopped over {len(ms)} turns: "
            f"p50 {_pct(ms, 50):.0f} ms, p90 {_pct(ms, 90):.0f} ms, "
            f"min {min(ms):.0f}, max {max(ms):.0f}"
        )
    quietest = [_mid_sentence(text) for text in texts[: args.pauses]]
    phrases = [paused_after(text, prefix) for text, prefix in PHRASE_PAUSES]
    function_words = [paused_after(text, prefix) for text, prefix in FUNCTION_WORD_PAUSES]
    for label, cases in (
        ("at the quietest point", quietest),
        ("after a phrase", phrases),
        ("after a function word", function_words),
    ):
        for name, detector in DETECTORS.items():
            early, count = asyncio.run(_pauses(server.ws_url, detector, cases, TAIL_S[name]))
            print(f"{name:20s} 1 s pauses {label} that ended the turn: {early} of {count}")
    if HUMAN_SPEECH_PATH.is_file():
        for name, detector in DETECTORS.items():
            ended = asyncio.run(_real_speaker(server.ws_url, detector, TAIL_S[name]))
            print(
                f"{name:20s} a real speaker's pauses inside his sentence (JFK) that ended "
                f"the turn: {ended}"
            )
    else:
        print(f"(no real speaker: {HUMAN_SPEECH_PATH} is missing; `make install-test`)")
    main_cost(texts)


def main_cost(texts: list[str]) -> None:
    cost = _model_cost(texts)
    med = {k: statistics.median(v) for k, v in cost.items()}
    print(
        f"end-of-turn model per call ({len(texts)} calls, 8 s windows): features "
        f"{med['features']:.1f} ms wall / {med['features cpu']:.1f} ms CPU; features + "
        f"model {med['call']:.1f} ms wall / {med['call cpu']:.1f} ms CPU (medians); "
        f"complete-sentence probabilities min {min(cost['probability']):.3f}, "
        f"median {med['probability']:.3f}"
    )
    print(f"load average while measuring: {os.getloadavg()}")


if __name__ == "__main__":
    main()
