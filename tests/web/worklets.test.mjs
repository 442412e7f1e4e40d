// The playback queue of the playback worklet and the capture resampler, in Node.
import assert from "node:assert/strict";
import { test } from "node:test";

import { PlaybackQueue } from "../../web/js/playback_queue.js";
import { Resampler, floatToInt16 } from "../../web/js/resampler.js";

const RATE = 24000;
const tone = (n, value = 1000) => new Int16Array(n).fill(value);
function renderMs(queue, ms) {
  const messages = [];
  let rendered = 0;
  const block = new Float32Array(128);
  while (rendered < (RATE * ms) / 1000) {
    messages.push(...queue.render(block));
    rendered += 128;
  }
  return { messages, last: block };
}

test("playback waits for the initial buffer, then reports started", () => {
  const q = new PlaybackQueue(RATE, 100);
  q.push("resp_1", tone(1200)); // 50 ms < 100 ms
  assert.deepEqual(renderMs(q, 10).messages, []);
  q.push("resp_1", tone(2400));
  const { messages } = renderMs(q, 10);
  assert.deepEqual(messages, [{ type: "playback-started", responseId: "resp_1" }]);
});

test("the played cursor is reported before the clear, and the output is silent at once", () => {
  const q = new PlaybackQueue(RATE, 0);
  q.push("resp_1", tone(24000)); // 1 s queued
  renderMs(q, 100);
  const played = q.responses.get("resp_1").played;
  const [stopped] = q.clear("resp_1");
  assert.equal(stopped.type, "playback-stopped");
  assert.equal(stopped.playedMs, (played * 1000) / RATE);
  assert.ok(stopped.droppedMs > 800);
  const block = new Float32Array(128).fill(1);
  q.render(block);
  assert.ok(block.every((s) => s === 0));
  assert.deepEqual(q.clear("resp_1"), [{ type: "playback-stopped", responseId: "resp_1", playedMs: 0, droppedMs: 0 }]);
});

test("clearing one response keeps the other's audio", () => {
  const q = new PlaybackQueue(RATE, 0);
  q.push("resp_1", tone(2400));
  q.push("resp_2", tone(2400, 2000));
  q.clear("resp_1");
  const block = new Float32Array(128);
  const messages = q.render(block);
  assert.deepEqual(messages, [{ type: "playback-started", responseId: "resp_2" }]);
  assert.ok(Math.abs(block[0] - 2000 / 32768) < 1e-9);
});

test("a drain request reports drained once everything played", () => {
  const q = new PlaybackQueue(RATE, 400);
  q.push("resp_1", tone(480)); // 20 ms, below the initial buffer: the drain starts it
  assert.deepEqual(q.drain("resp_1"), []);
  const { messages } = renderMs(q, 30);
  assert.deepEqual(messages.map((m) => m.type), ["playback-started", "playback-drained"]);
  assert.equal(messages[1].playedMs, 20);
});

test("the resampler turns 48 kHz into 16 kHz, continuously across blocks", () => {
  const r = new Resampler(48000, 16000);
  let total = 0;
  for (let i = 0; i < 100; i += 1) total += r.push(new Float32Array(128).fill(0.5)).length;
  assert.ok(Math.abs(total - (100 * 128) / 3) <= 1, String(total));
  const out = r.push(new Float32Array(384).fill(0.5));
  assert.ok(out.every((s) => Math.abs(s - 0.5) < 1e-6));
  assert.deepEqual(Array.from(floatToInt16(Float32Array.from([1, -1, 0]))), [32767, -32768, 0]);
});

test("the resampler upsamples 8 kHz to 16 kHz", () => {
  const r = new Resampler(8000, 16000);
  const out = r.push(Float32Array.from([0, 1, 0, 1, 0, 1]));
  assert.ok(out.length >= 9 && out.length <= 11, String(out.length));
});
