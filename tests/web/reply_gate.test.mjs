// The WebRTC reply gate (web/js/reply_gate.js): a clear silences the track at once; the
// next reply the server starts opens it, the cleared one never does.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ReplyGate } from "../../web/js/reply_gate.js";

test("a cleared reply stays silent; the next reply the server starts is heard", () => {
  const gain = { value: 1 };
  const gate = new ReplyGate(gain);
  gate.started("resp_1");
  assert.equal(gain.value, 1);
  gate.close("resp_1");
  assert.equal(gain.value, 0);
  gate.started("resp_1"); // a late start of the cut reply
  assert.equal(gain.value, 0);
  gate.started("resp_2");
  assert.equal(gain.value, 1);
  assert.equal(gate.closed, false);
});

test("a clear of every reply (the stop button) opens at whichever reply starts next", () => {
  const gain = { value: 1 };
  const gate = new ReplyGate(gain);
  gate.close(null);
  assert.equal(gain.value, 0);
  gate.started("resp_1");
  assert.equal(gain.value, 1);
});
