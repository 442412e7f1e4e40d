// Named B20-B23 scenarios, run directly on the browser's ClientProtocol (the same
// scenarios run on the Python ClientProtocol in tests/conformance/test_b20..b23).
import assert from "node:assert/strict";
import { test } from "node:test";

import { Driver, diskSpec } from "./helpers.mjs";

const spec = await diskSpec();
const vad = () => new Driver(spec, "vad").ready();
const ptt = (options = {}) => new Driver(spec, "ptt", options).ready();
const JPEG = "/9j/AAAA";

function committed(d, itemId, clientEventId, extra = {}) {
  const fields = { item_id: itemId, ...extra };
  if (clientEventId) fields.client_event_id = clientEventId;
  return d.server("input_audio_buffer.committed", fields);
}
const created = (d, id) => d.server("response.created", { response: { id } });
const delta = (d, id, item = "item_a") =>
  d.server("response.output_audio.delta", { response_id: id, item_id: item, delta: "A".repeat(64) });
const done = (d, id, status = "completed") => d.server("response.done", { response: { id, status } });
const error = (d, code, eventId) =>
  d.server("error", { error: { type: "invalid_request_error", code, message: code, event_id: eventId } });

test("b20 muted hold sends no commit and leaves camera observations running", () => {
  const d = ptt({ camera: true });
  d.step("frame", { jpeg: JPEG });
  d.step("mute", { muted: true });
  const commit = d.hold(3);
  assert.equal(commit, null);
  assert.equal(d.sent("input_audio_buffer.commit").length, 0);
  assert.equal(d.holdState("hold_1"), "empty");
  assert.equal(d.snapshot().watchdog, "disarmed");
  d.step("timeout", { now_ms: 5000 });
  d.step("frame", { jpeg: JPEG });
  const frames = d.sent("input_audio_buffer.append").filter((e) => e.video_frames && !e.audio);
  assert.equal(frames.length, 2);
  assert.equal(d.snapshot().camera, "standalone");
});

test("b20 empty hold sends no commit and never arms the watchdog", () => {
  const d = ptt();
  d.step("press");
  d.step("release");
  assert.equal(d.sent("input_audio_buffer.commit").length, 0);
  assert.equal(d.holdState("hold_1"), "empty");
  assert.equal(d.of("watchdog").length, 0);
});

test("b20 rejected commit while another is pending releases only its own hold", () => {
  const d = ptt();
  const first = d.hold();
  const second = d.hold();
  error(d, "input_audio_buffer_empty", second);
  assert.equal(d.holdState("hold_2"), "rejected");
  assert.equal(d.holdState("hold_1"), "submitted");
  assert.deepEqual(d.snapshot().pending_commits, [first]);
  assert.equal(d.snapshot().watchdog, "armed");
  assert.equal(d.snapshot().connection, "ready");
  committed(d, "item_1", first);
  created(d, "resp_1");
  done(d, "resp_1");
  assert.equal(d.holdState("hold_1"), "settled");
  assert.equal(d.snapshot().watchdog, "disarmed");
});

for (const answer of ["no_response", "rejected"]) {
  test(`b20 quiet hold after response.done before drain (${answer}) keeps the reply and settles its watchdog`, () => {
    const d = ptt();
    committed(d, "item_1", d.hold());
    created(d, "resp_1");
    for (let i = 0; i < 5; i += 1) delta(d, "resp_1", "item_2");
    d.step("playback_started", { response_id: "resp_1" });
    done(d, "resp_1");
    assert.equal(d.playbackState("resp_1"), "draining");
    const quiet = d.hold();
    assert.equal(d.snapshot().watchdog, "armed");
    if (answer === "no_response") committed(d, "item_3", quiet, { no_response: true });
    else error(d, "input_audio_buffer_empty", quiet);
    assert.equal(d.holdState("hold_2"), answer);
    assert.equal(d.snapshot().watchdog, "disarmed");
    assert.equal(d.playbackState("resp_1"), "draining");
    assert.equal(d.of("clear").length, 0);
    d.step("playback_drained", { response_id: "resp_1", played_ms: 5 });
    assert.equal(d.playbackState("resp_1"), "drained");
    const acks = d.sent("playback.ack");
    assert.deepEqual(acks.map((a) => [a.response_id, a.played_ms]), [["resp_1", 5]]);
  });
}

for (const order of [["first", "second"], ["second", "first"]]) {
  test(`b20 no_response ack with two pending commits, ${order[0]} acknowledged first`, () => {
    const d = ptt();
    const ids = { first: d.hold(), second: d.hold() };
    const holds = { first: "hold_1", second: "hold_2" };
    const [quiet, spoken] = order;
    committed(d, "item_1", ids[quiet], { no_response: true });
    assert.equal(d.holdState(holds[quiet]), "no_response");
    assert.equal(d.holdState(holds[spoken]), "submitted");
    assert.equal(d.snapshot().watchdog, "armed");
    committed(d, "item_2", ids[spoken]);
    created(d, "resp_1");
    assert.equal(d.holdState(holds[spoken]), "answering");
    done(d, "resp_1");
    assert.equal(d.holdState(holds[spoken]), "settled");
    assert.equal(d.holdState(holds[quiet]), "no_response");
    assert.equal(d.snapshot().watchdog, "disarmed");
  });
}

test("b21 VAD speech start during generation clears playback at once and fences late audio", () => {
  const d = vad();
  committed(d, "item_1", null);
  created(d, "resp_1");
  delta(d, "resp_1");
  d.step("playback_started", { response_id: "resp_1" });
  const out = d.server("input_audio_buffer.speech_started", { item_id: "item_3", audio_start_ms: 0 });
  assert.deepEqual(out.filter((o) => o.kind === "clear"), [{ kind: "clear", response_id: "resp_1" }]);
  assert.equal(d.playbackState("resp_1"), "cleared");
  const late = delta(d, "resp_1");
  assert.equal(late.filter((o) => o.kind === "play").length, 0);
  assert.equal(late.filter((o) => o.kind === "fenced").length, 1);
  d.step("playback_stopped", { response_id: "resp_1", played_ms: 30 });
  assert.deepEqual(d.sent("playback.ack").map((a) => a.played_ms), [30]);
  done(d, "resp_1", "cancelled");
  assert.equal(d.of("clear").length, 1);
});

test("b21 VAD speech start after generation completed with audio still queued clears it", () => {
  const d = vad();
  committed(d, "item_1", null);
  created(d, "resp_1");
  for (let i = 0; i < 8; i += 1) delta(d, "resp_1");
  d.server("response.output_audio.done", { response_id: "resp_1", item_id: "item_a" });
  done(d, "resp_1");
  assert.equal(d.playbackState("resp_1"), "draining");
  const out = d.server("input_audio_buffer.speech_started", { item_id: "item_3", audio_start_ms: 0 });
  assert.deepEqual(out.filter((o) => o.kind === "clear"), [{ kind: "clear", response_id: "resp_1" }]);
  d.server("output_audio_buffer.cleared", { response_id: "resp_1" });
  assert.equal(d.of("clear").length, 1);
});

test("b21 late audio of an older response after an interrupt never touches the newer one", () => {
  const d = vad();
  committed(d, "item_1", null);
  created(d, "resp_1");
  delta(d, "resp_1");
  d.server("input_audio_buffer.speech_started", { item_id: "item_3", audio_start_ms: 0 });
  done(d, "resp_1", "cancelled");
  committed(d, "item_3", null);
  created(d, "resp_2");
  delta(d, "resp_2");
  const late = delta(d, "resp_1");
  assert.deepEqual(late.filter((o) => o.kind === "play"), []);
  const stale = d.server("output_audio_buffer.cleared", { response_id: "resp_1" });
  assert.deepEqual(stale.filter((o) => o.kind === "clear"), []);
  assert.equal(d.playbackState("resp_2"), "queued");
  assert.equal(d.holdState("hold_2"), "answering");
});

test("b21 cancelled response.done and output_audio_buffer.cleared clear playback", () => {
  const d = ptt();
  committed(d, "item_1", d.hold());
  created(d, "resp_1");
  delta(d, "resp_1");
  assert.deepEqual(done(d, "resp_1", "cancelled").filter((o) => o.kind === "clear").length, 1);
  committed(d, "item_2", d.hold());
  created(d, "resp_2");
  delta(d, "resp_2");
  done(d, "resp_2");
  const out = d.server("output_audio_buffer.cleared", {});
  assert.deepEqual(out.filter((o) => o.kind === "clear"), [{ kind: "clear", response_id: "resp_2" }]);
});

test("b22 VAD mode: frames ride with speech appends", () => {
  const d = new Driver(spec, "vad", { camera: true }).ready();
  d.step("frame", { jpeg: JPEG });
  assert.equal(d.sent("input_audio_buffer.append").length, 0);
  d.step("mic", { audio: "BBBB", samples: 640 });
  const [append] = d.sent("input_audio_buffer.append");
  assert.deepEqual(append.video_frames, [JPEG]);
  assert.equal(append.audio, "BBBB");
});

test("b22 PTT mode: the camera keeps its 1 fps cadence outside recording", () => {
  const d = ptt({ camera: true });
  const captures = [];
  for (let second = 1; second <= 3; second += 1) {
    const out = d.step("timeout", { now_ms: 20 + second * 1000 });
    captures.push(out.filter((o) => o.kind === "capture_frame").length);
    d.step("frame", { jpeg: JPEG });
  }
  assert.deepEqual(captures, [1, 1, 1]);
  assert.equal(d.sent("input_audio_buffer.append").filter((e) => !e.audio).length, 3);
  assert.equal(d.of("capture_frame").length, 4); // one at once on enable, then one a second
  d.step("press");
  d.step("frame", { jpeg: JPEG });
  d.step("mic", { audio: "BBBB", samples: 640 });
  assert.deepEqual(d.sent("input_audio_buffer.append").at(-1).video_frames, [JPEG]);
});

test("b23 watchdog is armed only while a turn awaits a reply and disarmed by every terminal path", () => {
  const d = ptt();
  const armed = () => d.snapshot().watchdog === "armed";
  committed(d, "item_1", d.hold());
  assert.ok(armed());
  created(d, "resp_1");
  done(d, "resp_1");
  assert.ok(!armed(), "done");
  committed(d, "item_2", d.hold(), { no_response: true });
  assert.ok(!armed(), "no_response");
  error(d, "input_backpressure", d.hold());
  assert.ok(!armed(), "rejection");
  committed(d, "item_3", d.hold());
  created(d, "resp_2");
  delta(d, "resp_2");
  d.step("stop_reply");
  assert.ok(!armed(), "interrupt");
  const v = vad();
  committed(v, "item_1", null);
  created(v, "resp_1");
  assert.equal(v.snapshot().watchdog, "armed");
  v.server("input_audio_buffer.speech_started", { item_id: "item_2", audio_start_ms: 0 });
  assert.equal(v.snapshot().watchdog, "disarmed", "VAD interrupt");
});

test("b23 watchdog expiry ends the call with a notice; 120 s by default", () => {
  const d = ptt();
  d.hold();
  const deadline = d.snapshot().watchdog_deadline_ms;
  assert.equal(deadline - d.now, spec.constants.turn_watchdog_ms);
  assert.equal(spec.constants.turn_watchdog_ms, 120000);
  const out = d.step("timeout", { now_ms: deadline });
  assert.ok(out.some((o) => o.kind === "notice" && o.code === "turn_watchdog"));
  assert.ok(out.some((o) => o.kind === "close" && o.reason === "turn_watchdog"));
  assert.equal(d.snapshot().connection, "closed");
});

test("a non-fatal error is a notice and never tears the call down", () => {
  const d = ptt();
  const out = error(d, "invalid_video_frames", "evt_42");
  assert.deepEqual(out.map((o) => o.kind), ["notice"]);
  assert.equal(d.snapshot().connection, "ready");
});
