"""The web UI end to end in headless Chromium against a real server with the CPU backend,
over both transports: the websocket (`?transport=websocket`) and WebRTC (the default: a
call to `POST /v1/realtime/calls`, media on its tracks, events on its data channel).

The microphone is a looping WAV of Piper speech ("What colour is this?"), the camera a red
Y4M. In server-VAD mode and in push-to-talk mode (press, hold, release through the UI) the
page must show the user's transcript and play a reply. The VAD test also barges in while a
reply plays and measures, from the page, the time from the interrupt event to the
playback worklet's report that the reply's audio was dropped. Both tests write a
screenshot and their measurements to `test-artifacts/` (git-ignored).

Durations are reported, never asserted: a loaded machine stretches any of them without a
bug. What is asserted holds at any speed: the interrupt's clear is posted in the same task
as the event that caused it, and the worklet drops the reply's queued audio (that the
output is silent from the next render quantum on is proven in Node by
tests/web/worklets.test.mjs). The push-to-talk hold lasts a number of uploaded samples
(the audio clock), not of wall-clock milliseconds.

Over WebRTC the server plays the reply onto the call's audio track; the page plays it with
an <audio> element and measures its level (js/level_worklet.js): the barge-in figure is
the time from the interrupt event to the remote track going quiet in the page, and the
first-audio figure the time from speech_stopped to its first audible quantum. Both are
written beside the websocket's (`test-artifacts/web-webrtc-*.json`), never asserted.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS
from tools.fake_browser import FakeMedia

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: goal of the issue: local playback silent within this long after the interrupt event
#: (reported with the measurement in test-artifacts/web-vad.json, not asserted)
SILENCE_GOAL_MS = 50.0


def metrics(page: Any) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate("window.joyduplex.metrics")
    return result


def received(page: Any, type_: str) -> list[dict[str, Any]]:
    return [e for e in metrics(page)["received"] if e["type"] == type_]


def wait_until(page: Any, what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        page.wait_for_timeout(50)
    m = metrics(page)
    summary = {k: m[k] for k in ("transcripts", "notices", "started", "latencies")}
    raise AssertionError(f"timed out waiting for {what}: {json.dumps(summary)[:2000]}")


#: resolves once the page has received more than `stopped` speech_stopped events, after
#: clicking the page's mute button from inside the page in the same task
_MUTE_AT_TURN_END = """({stopped, timeoutMs}) => new Promise((resolve, reject) => {
  const started = performance.now();
  const check = () => {
    const n = window.joyduplex.metrics.received.filter(
      (e) => e.type === "input_audio_buffer.speech_stopped").length;
    if (n > stopped) {
      document.querySelector("#mute").click();
      resolve(n);
    } else if (performance.now() - started > timeoutMs) {
      reject(new Error(`no speech_stopped beyond ${stopped} within ${timeoutMs} ms`));
    } else {
      setTimeout(check, 5);
    }
  };
  check();
})"""


def mute_at_turn_end(page: Any, stopped: int = 0, timeout_s: float = 60.0) -> int:
    """Mute the page's microphone as soon as the page has received more than `stopped`
    `speech_stopped` events; returns how many it has. The fake microphone loops its
    question about 0.8 s after the server ends a turn, so the mute must land before that:
    clicked from here, after a poll of the page's metrics, it came too late on a loaded
    machine and the looping question barged in on the reply the test waits for. The page
    clicks it itself, in the task that sees the event."""
    count: int = page.evaluate(
        _MUTE_AT_TURN_END, {"stopped": stopped, "timeoutMs": timeout_s * 1000}
    )
    return count


def final_reply(page: Any, reply: str, timeout_s: float) -> dict[str, Any]:
    """The page's final transcript of the reply `reply`, once it has one."""
    found: dict[str, Any] = wait_until(
        page,
        "the reply's final transcript",
        lambda: [
            t
            for t in metrics(page)["transcripts"]
            if t["role"] == "assistant" and t["id"] == reply and t["final"]
        ],
        timeout_s,
    )[0]
    return found


def open_call(page: Any, url: str, mode: str, transport: str = "websocket") -> None:
    page.goto(f"{url}/?mode={mode}&transport={transport}")
    page.wait_for_selector("body[data-loaded=true]")
    page.click("#camera")
    page.click("#connect")
    page.wait_for_selector("body[data-connection=ready]", timeout=30_000)
    indicator = page.locator("#transport-state")
    assert indicator.get_attribute("data-transport") == transport
    assert metrics(page)["transport"] == transport


def assert_on_webrtc(page: Any) -> None:
    """The page says it is on WebRTC, ICE connected, and no media rode the data channel."""
    indicator = page.locator("#transport-state")
    assert indicator.inner_text() == "connected over WebRTC"
    assert indicator.get_attribute("data-transport") == "webrtc"
    assert indicator.get_attribute("data-ice") in ("connected", "completed")
    m = metrics(page)
    assert any(s["state"] in ("connected", "completed") for s in m["ice"]), m["ice"]
    sent = {e["type"] for e in m["sent"]}
    assert "input_audio_buffer.append" not in sent, sent  # the tracks carry mic and camera
    got = {e["type"] for e in m["received"]}
    assert "response.output_audio.delta" not in got, got  # the reply is on the audio track
    assert "output_audio_buffer.started" in got, got


def user_lines(page: Any) -> list[str]:
    return [
        t.strip() for t in page.locator("#transcript li.user .text").all_inner_texts() if t.strip()
    ]


def assistant_lines(page: Any) -> list[str]:
    return [
        t.strip()
        for t in page.locator("#transcript li.assistant .text").all_inner_texts()
        if t.strip()
    ]


def save(page: Any, name: str, data: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")


def turn_then_barge_in(page: Any) -> tuple[str, dict[str, Any]]:
    """A hands-free turn, then the looping question barging in on a reply: (the first
    reply's id, the interrupt's measurement).

    A turn: the looping question ends, the server VAD commits; the microphone is muted
    until the reply plays (is audible in the page), then unmuted so the looping question
    barges in on the reply. If the reply finished before the question came round again,
    that question is the next turn: try again (the machine may be slow)."""
    stopped = 0
    seen: set[str] = set()
    first_reply: str | None = None
    interrupt: dict[str, Any] | None = None
    for _attempt in range(4):
        stopped = mute_at_turn_end(page, stopped)
        reply = wait_until(
            page,
            "a reply to play",
            lambda: [r for r in metrics(page)["started"] if r not in seen],
            90,
        )[0]
        seen.add(reply)
        if first_reply is None:
            first_reply = reply
            transcript = wait_until(page, "the user transcript", lambda: user_lines(page), 30)
            assert any("see" in line.lower() for line in transcript), transcript
        page.click("#mute")
        outcome = wait_until(
            page,
            "a barge-in or the end of the reply",
            lambda reply=reply: (
                [i for i in metrics(page)["interrupts"] if i["responseId"] == reply]
                or reply in metrics(page)["drained"]
            ),
            30,
        )
        if isinstance(outcome, list):
            interrupt = outcome[0]
            break
    assert first_reply is not None
    assert interrupt is not None, "no barge-in landed while a reply was playing"
    return first_reply, interrupt


def test_b11_vad_mode_shows_transcript_plays_reply_and_barge_in_silences_playback(
    browser_page: Any, cpu_server: str, fake_media: FakeMedia, record_property: Any
) -> None:
    page = browser_page
    open_call(page, cpu_server, "vad")
    first_reply, interrupt = turn_then_barge_in(page)
    # what the assistant said (the cancelled reply's final transcript is its played prefix)
    said = [t["text"] for t in metrics(page)["transcripts"] if t["role"] == "assistant"]
    assert any("red" in text.lower() for text in said), said
    reply = first_reply
    m = metrics(page)
    latency = next(x for x in m["latencies"] if x["responseId"] == reply)
    figures = {
        "mode": "vad",
        "speech_stopped_to_first_audio_ms": latency["firstAudioMs"],
        "end_of_speech_to_first_audio_ms": latency["firstAudioMs"] + 500,  # VAD silence window
        "interrupt": interrupt,
        "interrupt_to_silence_ms": interrupt["silenceMs"],
        "interrupt_to_silence_goal_ms": SILENCE_GOAL_MS,
        "interrupt_to_silence_goal_met": interrupt["silenceMs"] < SILENCE_GOAL_MS,
        "output_latency_ms": m["outputLatencyMs"],
        "transcripts": m["transcripts"],
        "notices": m["notices"],
    }
    save(page, "web-vad", figures)
    record_property("interrupt_to_silence_ms", interrupt["silenceMs"])
    record_property("speech_stopped_to_first_audio_ms", latency["firstAudioMs"])
    print(json.dumps({k: v for k, v in figures.items() if k != "transcripts"}))

    # the clear went to the worklet while the server event that caused it was handled (the
    # trigger is recorded only inside that synchronous handler), not from a timer or later
    assert interrupt["trigger"] in (
        "input_audio_buffer.speech_started",
        "output_audio_buffer.cleared",
        "response.done",
    ), interrupt
    # the reply was audible when cut, and its queued audio was dropped, not played out
    assert interrupt["playedMs"] > 0, interrupt
    assert interrupt["droppedMs"] > 0, interrupt
    # nothing of the interrupted reply is played again, the call is still up
    assert interrupt["responseId"] not in m["drained"], interrupt
    assert page.evaluate("window.joyduplex.snapshot().connection") == "ready"
    assert not page.errors, page.errors


def test_b36_webrtc_vad_turn_with_the_camera_on_shows_transcript_and_a_reply_about_red(
    browser_page: Any, cpu_server: str, fake_media: FakeMedia, record_property: Any
) -> None:
    """The default transport: a call whose tracks carry the microphone and the camera
    (the describer answers the colour it sees on the video track) and the reply audio."""
    page = browser_page
    open_call(page, cpu_server, "vad", "webrtc")
    mute_at_turn_end(page)  # the looping question must not barge in on the reply
    reply = wait_until(page, "the reply to be audible", lambda: metrics(page)["started"], 90)[0]
    transcript = wait_until(page, "the user transcript", lambda: user_lines(page), 30)
    assert any("see" in line.lower() for line in transcript), transcript
    said = wait_until(
        page,
        "the reply's transcript",
        lambda: [
            t["text"]
            for t in metrics(page)["transcripts"]
            if t["role"] == "assistant" and t["id"] == reply and t["final"]
        ],
        60,
    )
    assert any("red" in text.lower() for text in said), said
    wait_until(page, "the reply to play out", lambda: reply in metrics(page)["drained"], 60)
    assert_on_webrtc(page)
    m = metrics(page)
    latency = next(x for x in m["latencies"] if x["responseId"] == reply)
    figures = {
        "transport": "webrtc",
        "mode": "vad",
        "speech_stopped_to_output_audio_buffer_started_ms": latency["firstAudioMs"],
        "speech_stopped_to_first_audible_ms": latency["firstAudibleMs"],
        "ice": m["ice"],
        "transcripts": m["transcripts"],
        "notices": m["notices"],
    }
    save(page, "web-webrtc-turn", figures)
    record_property("speech_stopped_to_first_audible_ms", latency["firstAudibleMs"])
    print(json.dumps({k: v for k, v in figures.items() if k != "transcripts"}))
    # the server's output buffer started and stopped the reply: it played out, in the page
    assert latency["audibleAt"] >= latency["turnEndAt"], latency
    # the page's breakdown of the hands-free turn, from the meter's end of speech to
    # audible, in order (its figures are reported, never asserted)
    turn = next(t for t in m["turns"] if t["responseId"] == reply)
    assert (turn["kind"], turn["transport"]) == ("speech", "webrtc"), turn
    steps = ["speechEnd", "speechStopped", "committed", "created", "firstAudio", "audible"]
    assert all(turn["marks"].get(step) is not None for step in steps), turn
    assert [turn["marks"][s] for s in steps] == sorted(turn["marks"][s] for s in steps), turn
    assert turn["stats"] is not None and turn["stats"]["packetsReceived"] > 0, turn
    snapshot = page.evaluate("window.joyduplex.snapshot()")
    assert snapshot["camera"] != "off" and snapshot["next_capture_ms"] is None, snapshot
    assert not any(e["type"] == "playback.ack" for e in m["sent"])  # the server knows
    assert page.evaluate("window.joyduplex.snapshot().connection") == "ready"
    assert not page.errors, page.errors


def test_b36_webrtc_barge_in_silences_the_reply_track_in_the_page(
    browser_page: Any, cpu_server: str, fake_media: FakeMedia, record_property: Any
) -> None:
    """Barge-in over WebRTC: the server clears its output buffer, the reply's audio on the
    track stops; the page's level meter says when it went silent (reported, not asserted:
    the websocket's figure is `interrupt_to_silence_ms` of the test above)."""
    page = browser_page
    open_call(page, cpu_server, "vad", "webrtc")
    first_reply, interrupt = turn_then_barge_in(page)
    m = metrics(page)
    latency = next(x for x in m["latencies"] if x["responseId"] == first_reply)
    # when the server's clear of its output buffer reached the page, after the interrupt
    cleared = [
        e["at"] - interrupt["eventAt"]
        for e in m["received"]
        if e["type"] == "output_audio_buffer.cleared" and e["at"] >= interrupt["eventAt"]
    ]
    figures = {
        "transport": "webrtc",
        "mode": "vad",
        "speech_stopped_to_output_audio_buffer_started_ms": latency["firstAudioMs"],
        "speech_stopped_to_first_audible_ms": latency["firstAudibleMs"],
        "interrupt": interrupt,
        "interrupt_to_silence_ms": interrupt["silenceMs"],
        "interrupt_to_output_audio_buffer_cleared_ms": cleared[0] if cleared else None,
        "interrupt_to_silence_goal_ms": SILENCE_GOAL_MS,
        "interrupt_to_silence_goal_met": interrupt["silenceMs"] < SILENCE_GOAL_MS,
        "quiet_ms": page.evaluate("window.joyduplex.quietMs"),
        "output_latency_ms": m["outputLatencyMs"],
        "ice": m["ice"],
        "transcripts": m["transcripts"],
        "notices": m["notices"],
    }
    save(page, "web-webrtc-vad", figures)
    record_property("interrupt_to_silence_ms", interrupt["silenceMs"])
    record_property("speech_stopped_to_first_audible_ms", latency["firstAudibleMs"])
    print(json.dumps({k: v for k, v in figures.items() if k != "transcripts"}))

    assert_on_webrtc(page)
    # the interrupt came from the server event that caused it, not from a timer
    assert interrupt["transport"] == "webrtc", interrupt
    assert interrupt["trigger"] in (
        "input_audio_buffer.speech_started",
        "output_audio_buffer.cleared",
        "response.done",
    ), interrupt
    # the reply was audible in the page before the interrupt, and went silent after it
    reply = interrupt["responseId"]
    audible = next(x for x in metrics(page)["latencies"] if x["responseId"] == reply)
    assert audible["audibleAt"] <= interrupt["eventAt"], (audible, interrupt)
    assert interrupt["silentAt"] >= interrupt["eventAt"], interrupt
    # the protocol's reply gate muted the track for the cut reply with the interrupt
    # (ClientProtocol's `mute_reply`, carried out on the page's gain node)
    gate = metrics(page)["replyGate"]
    assert any(g["kind"] == "mute_reply" and g["at"] == interrupt["eventAt"] for g in gate), gate
    # the server cleared its output buffer for it: no stop, so it never played out
    wait_until(
        page,
        "the server's output_audio_buffer.cleared",
        lambda: [
            e for e in metrics(page)["received"] if e["type"] == "output_audio_buffer.cleared"
        ],
        30,
    )
    assert reply not in metrics(page)["drained"], interrupt
    assert page.evaluate("window.joyduplex.snapshot().connection") == "ready"
    assert not page.errors, page.errors


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
def test_ptt_mode_press_hold_release_shows_transcript_and_plays_reply(
    browser_page: Any, cpu_server: str, fake_media: FakeMedia, transport: str
) -> None:
    page = browser_page
    open_call(page, cpu_server, "ptt", transport)

    talk = page.locator("#talk")
    talk.hover()
    page.mouse.down()
    page.wait_for_selector("#talk.held")
    # hold until one whole question fell inside the hold, wherever the loop was: counted
    # in microphone samples uploaded (the audio clock), however slowly they come
    rate_hz = page.evaluate("window.joyduplex.constants.capture_rate_hz")
    needed = round((fake_media.loop_s + fake_media.speech_s + 0.2) * rate_hz)
    wait_until(
        page,
        f"{needed} samples uploaded in the hold",
        lambda: (
            page.evaluate("window.joyduplex.snapshot().holds.at(-1).uploaded_samples") >= needed
        ),
        120,
    )
    page.mouse.up()
    wait_until(
        page,
        "the commit",
        lambda: page.evaluate(
            "window.joyduplex.metrics.sent.some(e => e.type === 'input_audio_buffer.commit')"
        ),
        30,
    )

    reply = wait_until(page, "the reply to play", lambda: metrics(page)["started"], 90)[0]
    transcript = wait_until(page, "the user transcript", lambda: user_lines(page), 30)
    assert any("see" in line.lower() for line in transcript), transcript
    wait_until(page, "the reply to drain", lambda: reply in metrics(page)["drained"], 30)
    assert any("red" in line.lower() for line in assistant_lines(page))

    m = metrics(page)
    snapshot = page.evaluate("window.joyduplex.snapshot()")
    latency = next(x for x in m["latencies"] if x["responseId"] == reply)
    figures = {
        "transport": transport,
        "mode": "ptt",
        "release_to_first_audio_ms": latency["firstAudioMs"],
        "release_to_first_audible_ms": latency.get("firstAudibleMs"),
        "output_latency_ms": m["outputLatencyMs"],
        "transcripts": m["transcripts"],
        "notices": m["notices"],
        "snapshot": snapshot,
    }
    save(page, "web-ptt" if transport == "websocket" else "web-webrtc-ptt", figures)
    print(json.dumps({k: v for k, v in figures.items() if k not in ("transcripts", "snapshot")}))

    # the page's breakdown of the turn: every step from the release to audible, in order,
    # shown under the first-audio badge (its figures are reported, never asserted)
    turn = next(t for t in m["turns"] if t["responseId"] == reply)
    assert (turn["kind"], turn["transport"]) == ("release", transport), turn
    steps = ["release", "lastAudio", "commitSent", "committed", "created", "firstAudio", "audible"]
    assert all(turn["marks"].get(step) is not None for step in steps), turn
    assert [turn["marks"][s] for s in steps] == sorted(turn["marks"][s] for s in steps), turn
    breakdown = page.inner_text("#breakdown")
    assert breakdown.startswith("release") and "audible" in breakdown, breakdown

    # the hold settled, the watchdog is disarmed, the camera keeps its cadence (B20, B22, B23)
    assert [h["state"] for h in snapshot["holds"]] == ["settled"]
    assert snapshot["watchdog"] == "disarmed"
    assert snapshot["camera"] == "standalone"
    sent = [e["type"] for e in m["sent"]]
    if transport == "websocket":
        assert "playback.ack" in sent
    else:
        assert_on_webrtc(page)
        # the track streams all the time: the press cleared what it sent before the hold
        assert sent.index("input_audio_buffer.clear") < sent.index("input_audio_buffer.commit")
        assert "playback.ack" not in sent  # the server knows what it played
    assert not page.errors, page.errors


#: a reply long enough to still be generating when the looping question barges in
LONG_REPLY = "Well, here is a long answer about the colour. " * 8


def test_b34_barge_in_during_generation_keeps_the_reply_text_and_marks_the_unheard_rest(
    browser_page: Any, fake_media: FakeMedia
) -> None:
    """The scripted backend (energy VAD, tone TTS) slowed down: its TTS makes 100 ms of
    audio every 50 ms, so a long reply is still being generated seconds after it started
    playing. The question barges in meanwhile: the reply's bubble keeps the streamed text,
    the part that was played stays as it is and the rest is marked as not heard."""
    from tests.transport.conftest import start_server

    live, stop = start_server()
    try:
        live.script.reply(LONG_REPLY).latency["tts"] = 0.05
        page = browser_page
        open_call(page, live.url, "vad")
        mute_at_turn_end(page)  # the question must not barge in before the reply plays
        reply = wait_until(page, "the reply to play", lambda: metrics(page)["started"], 60)[0]
        page.click("#mute")  # the looping question now barges in on the playing reply
        interrupt = wait_until(
            page,
            "the barge-in",
            lambda: [i for i in metrics(page)["interrupts"] if i["responseId"] == reply],
            30,
        )[0]
        heard = wait_until(
            page,
            "the heard part marked",
            lambda: [h for h in metrics(page)["heard"] if h["responseId"] == reply],
            30,
        )[0]
        final = final_reply(page, reply, 30)
        line = page.locator(f'#transcript li[data-key="assistant:{reply}"]')
        text = line.locator(".text").inner_text()
        unheard = line.locator(".unheard").inner_text()
        save(page, "web-b34", {"interrupt": interrupt, "heard": heard, "final": final})
    finally:
        stop()
    # the barge-in landed while the reply was generated: its end came after the interrupt
    assert final["at"] >= interrupt["eventAt"], (final, interrupt)
    # the server closed it with the text it had sent, not an empty transcript (D34)
    assert final["text"].strip() and LONG_REPLY.startswith(final["text"][:20]), final
    # the bubble keeps that text; what was not played is marked
    assert text == final["text"], (text, final)
    assert 0 < len(unheard) <= len(text) and text.endswith(unheard), (text, unheard)
    assert heard["heardChars"] == len(text) - len(unheard), heard
    assert not page.errors, page.errors
