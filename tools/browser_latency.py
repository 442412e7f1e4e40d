"""What the person hears, in the browser: where a turn's time goes between the end of the
person's turn and the reply being audible in the web page, over the websocket and over
WebRTC, push-to-talk and hands-free.

    .venv/bin/python tools/browser_latency.py [--turns 10] [--transports websocket,webrtc]
        [--modes ptt,vad] [--voices joe,joe-slow-high] [--out FILE.json] [--screenshot F.png]

It starts the server in this process (the embedded CPU backend, as the browser tests do,
load shedding off) and headless Debian Chromium (`make system-deps`) with a fake
microphone that loops the voices of `tools/turn_latency.py` (its sentences, each voice in
turn, 2.5 s of silence after each) and a fake red camera. For each transport and mode it
runs `--turns` measured turns (one warm-up turn before them is not counted):

- push-to-talk: press in a silence, hold through one sentence, release 300 ms after the
  page's microphone level meter heard its last voiced chunk (longer than a gap between
  two words), wait for the reply to play;
- hands-free (server VAD): the looping voice ends its sentence, the server commits; the
  page is muted until the reply is audible, then unmuted, so the next sentence often
  barges in on the reply (each barge-in is a measured interrupt).

The page records each turn's marks (`window.joyduplex.metrics.turns`, web/js/turn_timeline.js);
the server's own events give, per reply, commit -> first `response.output_audio.delta` (and
speech_stopped -> first delta), read off the session's outgoing events in this process.
Printed per transport and mode, p50 / p90 over the turns:

- every segment of the page's breakdown (release -> last audio -> commit sent ->
  committed -> transcript -> response.created -> first audio -> audible; hands-free: speech
  end (the page's level meter) -> speech_stopped -> ...);
- release -> audible (push-to-talk) or speech_stopped -> audible (hands-free);
- the server's commit -> first delta, and the client path's share: release -> audible
  minus the server's commit -> first delta, turn by turn;
- on WebRTC the browser's jitter buffer (getStats: mean delay of the samples it emitted
  during the turn; derived by the browser, not measured by the page);
- barge-in: speech_started -> the page's output silent.

Figures are printed, never asserted: Chromium and the server share this machine, and a
loaded machine stretches all of them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.fake_browser import (  # noqa: E402
    CHROMIUM,
    FakeMedia,
    chromium_flags,
    write_wav,
    write_y4m,
)
from tools.local_server import ServerStartFailed, serve_in_thread, without_shedding  # noqa: E402
from tools.turn_latency import PIPER_VOICES, RATE_HZ, SENTENCES, synthesize  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator

#: silence before the first sentence and after each (s): room for a reply to play
LEAD_S = 0.6
GAP_S = 2.5
#: push-to-talk: release this long after the last voiced chunk the page heard. Longer than
#: the gaps between two words of one sentence, which the page's voiced mark (-40 dBFS) sees
#: as 80-160 ms of quiet: at 80 ms the tool let go inside two holds of three, mid-sentence,
#: so the hold lost the rest of its sentence and its commit held speech its pause's partial
#: never heard (docs/performance.md, "Where a push-to-talk hold from the page ends")
RELEASE_AFTER_QUIET_MS = 300
#: the fake microphone's rate (Chromium resamples the file to its capture rate)
FAKE_RATE_HZ = 48_000
REPLY_TIMEOUT_S = 30.0


# --- the server's own view -------------------------------------------------------------


@dataclass
class ServerTimes:
    """Per reply, from the session's outgoing events (monotonic s): the last commit and
    speech_stopped before its response.created, and its first audio delta."""

    committed: float | None = None
    speech_stopped: float | None = None
    replies: dict[str, dict[str, float | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, event: Any) -> None:
        from spec.events import (
            InputAudioBufferCommitted,
            InputAudioBufferSpeechStopped,
            ResponseCreated,
            ResponseOutputAudioDelta,
        )

        at = time.monotonic()
        with self.lock:
            if isinstance(event, InputAudioBufferCommitted):
                self.committed = at
            elif isinstance(event, InputAudioBufferSpeechStopped):
                self.speech_stopped = at
            elif isinstance(event, ResponseCreated):
                self.replies[event.response.id] = {
                    "committed": self.committed,
                    "speech_stopped": self.speech_stopped,
                    "first_delta": None,
                }
            elif isinstance(event, ResponseOutputAudioDelta):
                reply = self.replies.get(event.response_id)
                if reply is not None and reply["first_delta"] is None:
                    reply["first_delta"] = at

    def commit_to_first_delta_ms(self, response_id: str) -> float | None:
        return self._ms(response_id, "committed")

    def speech_stopped_to_first_delta_ms(self, response_id: str) -> float | None:
        return self._ms(response_id, "speech_stopped")

    def _ms(self, response_id: str, start: str) -> float | None:
        with self.lock:
            reply = self.replies.get(response_id)
            if reply is None or reply[start] is None or reply["first_delta"] is None:
                return None
            return (reply["first_delta"] - reply[start]) * 1000  # type: ignore[operator]


@contextmanager
def cpu_server(times: ServerTimes) -> Iterator[str]:
    """The transport app with the CPU backend on 127.0.0.1 in a thread, every session's
    outgoing events passed to `times` as they are sent; yields its URL."""
    from transport.app import create_app
    from transport.settings import ServerSettings

    app = create_app(without_shedding(ServerSettings(backend="cpu", port=0)))
    app.state.host.event_listener = times.observe
    try:
        with serve_in_thread(app, start_timeout_s=300) as url:
            yield url
    except ServerStartFailed:
        raise SystemExit("the CPU server did not start") from None


# --- the fake media ----------------------------------------------------------------------


def fake_microphone(path: Path, voices: list[str]) -> None:
    """The voices' sentences (each voice in turn), each followed by `GAP_S` of silence."""
    import soxr

    parts = [np.zeros(int(FAKE_RATE_HZ * LEAD_S), np.float32)]
    for i in range(4):
        for voice in voices:
            text = SENTENCES[(i * len(voices) + voices.index(voice)) % len(SENTENCES)]
            speech = soxr.resample(synthesize(text, voice), RATE_HZ, FAKE_RATE_HZ) * 0.8
            parts += [speech.astype(np.float32), np.zeros(int(FAKE_RATE_HZ * GAP_S), np.float32)]
    write_wav(path, np.concatenate(parts), FAKE_RATE_HZ)


# --- the page ----------------------------------------------------------------------------


def metrics(page: Any) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate("window.joyduplex.metrics")
    return result


def wait_js(page: Any, expression: str, timeout_s: float = REPLY_TIMEOUT_S) -> None:
    page.wait_for_function(expression, polling=10, timeout=timeout_s * 1000)


def open_call(page: Any, url: str, mode: str, transport: str) -> None:
    page.goto(f"{url}/?mode={mode}&transport={transport}")
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#camera")
    page.click("#connect")
    page.wait_for_selector("body[data-connection=ready]", timeout=60_000)


def hang_up(page: Any) -> None:
    if page.locator("#connect").inner_text() == "Disconnect":
        page.click("#connect")
        page.wait_for_selector("body[data-connection=closed]", timeout=30_000)


def reply_done(page: Any, turns_before: int) -> None:
    """The newest turn's reply was audible and then played out, was cut, or ended."""
    wait_js(
        page,
        f"""(() => {{
          const m = window.joyduplex.metrics;
          const t = m.turns.length > {turns_before} ? m.turns.at(-1) : null;
          return t && t.marks.audible !== undefined &&
            (m.drained.includes(t.responseId) ||
             m.interrupts.some(i => i.responseId === t.responseId));
        }})()""",
    )


def push_to_talk_turns(page: Any, count: int) -> None:
    talk = page.locator("#talk")
    for _ in range(count):
        # press in a silence, hold through one sentence, release just after it
        wait_js(page, "performance.now() - (window.joyduplex.lastVoicedAt() ?? 0) > 300")
        talk.hover()  # where the button is now
        pressed = page.evaluate("performance.now()")
        page.mouse.down()
        page.wait_for_selector("#talk.held")
        wait_js(page, f"(window.joyduplex.lastVoicedAt() ?? 0) > {pressed}")
        quiet = f"performance.now() - window.joyduplex.lastVoicedAt() > {RELEASE_AFTER_QUIET_MS}"
        wait_js(page, quiet)
        before = len(metrics(page)["turns"])
        page.mouse.up()
        if not answered(page, lambda before=before: reply_done(page, before)):
            skipped(page, "a push-to-talk turn")


def hands_free_turns(page: Any, count: int) -> None:
    for _ in range(count):
        before = len(metrics(page)["turns"])
        wait_js(page, f"window.joyduplex.metrics.turns.length > {before}")
        page.click("#mute")  # the next sentence must not start a turn before the reply
        heard = answered(
            page,
            lambda: wait_js(
                page,
                "(() => { const t = window.joyduplex.metrics.turns.at(-1);"
                " return t.marks.audible !== undefined; })()",
            ),
        )
        if not heard:
            skipped(page, "a hands-free turn")
        page.click("#mute")  # the next sentence may barge in on the reply


def skipped(page: Any, what: str) -> None:
    """Say which turn got no audible reply, with what the page saw of it."""
    m = metrics(page)
    turn = m["turns"][-1] if m["turns"] else None
    marks = sorted(turn["marks"], key=turn["marks"].get) if turn else []
    recent = [e["type"] for e in m["received"][-8:]]
    print(f"  {what} got no audible reply: skipped (marks {marks}; last {recent})", file=sys.stderr)


def answered(page: Any, wait: Any) -> bool:
    """Whether `wait` saw its reply before the timeout (a turn may get none: a sentence
    cut short, a transcript the model stays silent on)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        wait()
    except PlaywrightTimeout:
        return False
    return True


# --- figures -----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (rank - low), 1)


def spread(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p90": percentile(values, 0.9),
        "mean": round(statistics.fmean(values), 1) if values else None,
    }


MARKS = {
    "release": [
        "release",
        "lastAudio",
        "commitSent",
        "committed",
        "transcript",
        "created",
        "firstAudio",
        "audible",
    ],
    "speech": [
        "speechEnd",
        "speechStopped",
        "committed",
        "transcript",
        "created",
        "firstAudio",
        "audible",
    ],
}


def summarize(
    turns: list[dict[str, Any]], interrupts: list[dict[str, Any]], server: ServerTimes
) -> dict[str, Any]:
    done = [t for t in turns if t["marks"].get("audible") is not None and t.get("responseId")]
    out: dict[str, Any] = {"turns": len(done)}
    if not done:
        return out
    kind = done[0]["kind"]
    names = MARKS[kind]
    start = "release" if kind == "release" else "speechStopped"
    segments: dict[str, list[float]] = {}
    for turn in done:
        marks = turn["marks"]
        # in time order: the transcript runs beside the reply (before or after its start)
        present = sorted(
            (n for n in names if marks.get(n) is not None),
            key=lambda n: (marks[n], names.index(n)),
        )
        for a, b in itertools.pairwise(present):
            segments.setdefault(f"{a} -> {b}", []).append(marks[b] - marks[a])
    out["segments_ms"] = {name: spread(values) for name, values in segments.items()}
    to_audible = [t["marks"]["audible"] - t["marks"][start] for t in done if start in t["marks"]]
    out[f"{start}_to_audible_ms"] = spread(to_audible)
    server_ms: list[float] = []
    share: list[float] = []
    for turn in done:
        if kind == "release":
            ms = server.commit_to_first_delta_ms(turn["responseId"])
        else:
            ms = server.speech_stopped_to_first_delta_ms(turn["responseId"])
        if ms is None or start not in turn["marks"]:
            continue
        server_ms.append(ms)
        share.append(turn["marks"]["audible"] - turn["marks"][start] - ms)
    server_start = "commit" if kind == "release" else "speech_stopped"
    out[f"server_{server_start}_to_first_delta_ms"] = spread(server_ms)
    out["client_share_ms"] = spread(share)
    jitter = [
        t["stats"]["jitterBufferMs"]
        for t in done
        if t.get("stats") and t["stats"].get("jitterBufferMs") is not None
    ]
    if jitter:
        out["jitter_buffer_ms (getStats, derived)"] = spread(jitter)
    barge_ins = [
        i["silenceMs"] for i in interrupts if i["trigger"] == "input_audio_buffer.speech_started"
    ]
    if barge_ins:
        out["speech_started_to_silent_ms"] = spread(barge_ins)
    return out


def print_summary(name: str, summary: dict[str, Any]) -> None:
    print(f"\n== {name}: {summary['turns']} turns (p50 / p90 ms)")

    def line(label: str, figures: dict[str, Any]) -> None:
        print(f"  {label:44s} {figures['p50']!s:>8} / {figures['p90']!s:<8} (n={figures['n']})")

    for label, figures in summary.get("segments_ms", {}).items():
        line(label, figures)
    for key, figures in summary.items():
        if key not in ("turns", "segments_ms") and isinstance(figures, dict):
            line(key.replace("_ms", "").replace("_", " "), figures)


def run_session(
    browser: Any,
    url: str,
    transport: str,
    mode: str,
    turns: int,
    server: ServerTimes,
    screenshot: Path | None = None,
) -> dict[str, Any]:
    page = browser.new_page(viewport={"width": 1100, "height": 600})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        open_call(page, url, mode, transport)
        run = push_to_talk_turns if mode == "ptt" else hands_free_turns
        run(page, 1)  # warm-up, not counted
        warm = len(metrics(page)["turns"])
        warm_interrupts = len(metrics(page)["interrupts"])
        run(page, turns)
        m = metrics(page)
        measured = m["turns"][warm:]
        interrupts = m["interrupts"][warm_interrupts:]
        summary = summarize(measured, interrupts, server)
        for turn in measured:  # the server's own part of each turn, for --out
            response_id = turn.get("responseId")
            if response_id:
                turn["server"] = {
                    "commit_to_first_delta_ms": server.commit_to_first_delta_ms(response_id),
                    "speech_stopped_to_first_delta_ms": server.speech_stopped_to_first_delta_ms(
                        response_id
                    ),
                }
        if screenshot is not None:  # the last turn's breakdown under the badge
            page.wait_for_timeout(300)  # the indicators settle
            page.evaluate("window.scrollTo(0, 0)")  # the transcript scrolled the page
            page.screenshot(path=str(screenshot))
        hang_up(page)
    finally:
        page.close()
    return {
        "transport": transport,
        "mode": mode,
        "summary": summary,
        "turns": measured,
        "interrupts": interrupts,
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--transports", default="websocket,webrtc")
    parser.add_argument("--modes", default="ptt,vad")
    parser.add_argument("--voices", default=",".join(PIPER_VOICES))
    parser.add_argument("--out", type=Path, help="write every turn's marks here (JSON)")
    parser.add_argument(
        "--screenshot", type=Path, help="a PNG of the page after the first transport and mode"
    )
    args = parser.parse_args()
    voices = [v for v in args.voices.split(",") if v]
    unknown = [v for v in voices if v not in PIPER_VOICES]
    if unknown:
        raise SystemExit(f"unknown voices {unknown}; choose from {list(PIPER_VOICES)}")

    from playwright import sync_api

    server = ServerTimes()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        wav, y4m = Path(folder) / "speech.wav", Path(folder) / "red.y4m"
        fake_microphone(wav, voices)
        write_y4m(y4m, (220, 30, 30))
        media = FakeMedia(wav, y4m, 0.0, 0.0)
        with cpu_server(server) as url, sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=chromium_flags(media)
            )
            try:
                for transport in args.transports.split(","):
                    for mode in args.modes.split(","):
                        print(f"-- {transport} {mode}: {args.turns} turns", file=sys.stderr)
                        shot = None if results else args.screenshot
                        result = run_session(
                            browser, url, transport, mode, args.turns, server, shot
                        )
                        results.append(result)
                        print_summary(f"{transport} {mode}", result["summary"])
            finally:
                browser.close()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nevery turn's marks: {args.out}")


if __name__ == "__main__":
    main()
