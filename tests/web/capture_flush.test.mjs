// The capture worklet's flush (web/js/capture_worklet.js), in Node with a stand-in for the
// AudioWorklet globals: a push-to-talk release gets the partial chunk at once, marked
// `flushed`, and the chunks after it start afresh.
import assert from "node:assert/strict";
import { test } from "node:test";

const registered = {};
globalThis.sampleRate = 16000; // no resampling: the samples come out as they go in
globalThis.registerProcessor = (name, cls) => {
  registered[name] = cls;
};
globalThis.AudioWorkletProcessor = class {
  constructor() {
    this.posted = [];
    this.port = { postMessage: (message) => this.posted.push(message), onmessage: null };
  }
};
await import("../../web/js/capture_worklet.js");

function processor() {
  const Capture = registered["joyduplex-capture"];
  return new Capture({ processorOptions: { targetRate: 16000, chunkMs: 20 } });
}

test("a flush posts the partial chunk at once, marked flushed, and the next chunk starts afresh", () => {
  const capture = processor();
  capture.process([[new Float32Array(128).fill(0.5)]]);
  capture.process([[new Float32Array(128).fill(0.5)]]);
  assert.equal(capture.posted.length, 0); // 256 of 320 samples: not a whole chunk yet
  capture.port.onmessage({ data: { type: "flush" } });
  assert.equal(capture.posted.length, 1);
  const [flushed] = capture.posted;
  assert.equal(flushed.flushed, true);
  assert.equal(flushed.samples, 256);
  assert.equal(new Int16Array(flushed.pcm).length, 256);
  assert.ok(flushed.rms > 0.4);
  capture.process([[new Float32Array(320).fill(0.1)]]);
  assert.equal(capture.posted.length, 2);
  assert.equal(capture.posted[1].samples, 320);
  assert.equal(capture.posted[1].flushed, false);
});

test("a flush with nothing pending still answers, with no samples", () => {
  const capture = processor();
  capture.port.onmessage({ data: { type: "flush" } });
  assert.deepEqual(
    capture.posted.map((m) => [m.samples, m.flushed, m.rms]),
    [[0, true, 0]],
  );
});
