// The page's words (web/js/labels.js): every state an indicator shows has a plain label,
// and the note on spoken languages says what session.created's capabilities say.
import assert from "node:assert/strict";
import test from "node:test";

import {
  labelOf,
  languageNote,
  micLabel,
  replyLabel,
  stateLabels,
  transportLabel,
} from "../../web/js/labels.js";
import { diskSpec } from "./helpers.mjs";

const spec = await diskSpec();
const labels = stateLabels(spec.constants);

for (const table of ["client_connection", "client_watchdog", "client_camera"]) {
  test(`every ${table} state the page shows has a label other than its name`, () => {
    for (const state of spec.tables[table].states) {
      const label = labelOf(labels, table, state);
      assert.notEqual(label, state, `${table}.${state} shows its internal name`);
    }
  });
}

test("every live hold state the talk button shows has a label", () => {
  for (const state of spec.tables.client_hold.groups.live) {
    assert.notEqual(labelOf(labels, "client_hold", state), state);
  }
});

test("a camera riding with speech is described, not named", () => {
  assert.equal(labelOf(labels, "client_camera", "riding"), "camera on — sending frames with your speech");
  assert.match(labelOf(labels, "client_camera", "standalone"), /^camera on — sending a frame every second$/);
});

test("the reply indicator says the assistant speaks while a reply is heard", () => {
  const snapshot = (watchdog, ...states) => ({
    watchdog,
    playbacks: states.map((state, i) => ({ response_id: `resp_${i}`, state })),
  });
  assert.equal(replyLabel(labels, snapshot("armed", "queued")), "waiting for the reply");
  assert.equal(replyLabel(labels, snapshot("armed", "playing")), "assistant speaking");
  assert.equal(replyLabel(labels, snapshot("disarmed", "drained", "draining")), "assistant speaking");
  assert.equal(replyLabel(labels, snapshot("disarmed", "cleared")), "idle");
  assert.equal(replyLabel(labels, null), "idle");
});

test("the microphone indicator says who is heard", () => {
  const mic = (o) => micLabel({ connected: true, muted: false, speaking: false, handsFree: true, ...o });
  assert.equal(mic({ connected: false }), "mic off");
  assert.equal(mic({ muted: true }), "mic muted");
  assert.equal(mic({ speaking: true }), "hearing you");
  assert.equal(mic({}), "listening");
  assert.equal(mic({ handsFree: false }), "hold to talk");
});

test("an English-only speech recognition is named as English only", () => {
  const note = languageNote({ input_languages: ["en"] });
  assert.equal(note.languages, "en");
  assert.match(note.text, /^Speech recognition: English only \(speak English;/);
});

test("several languages are all named", () => {
  const note = languageNote({ input_languages: ["en", "de"] });
  assert.equal(note.languages, "en de");
  assert.match(note.text, /English, German only/);
});

test("a multilingual speech recognition detects any language", () => {
  for (const capabilities of [{ input_languages: null }, { input_languages: [] }]) {
    const note = languageNote(capabilities);
    assert.equal(note.languages, "any");
    assert.match(note.text, /^Speech recognition: any language, detected/);
  }
});

test("a server that does not say claims no language", () => {
  for (const capabilities of [undefined, null, {}]) {
    const note = languageNote(capabilities);
    assert.equal(note.languages, "unknown");
    assert.doesNotMatch(note.text, /any language/);
  }
});

test("a code Intl does not know is shown as the server spelled it", () => {
  assert.match(languageNote({ input_languages: ["e"] }).text, /Speech recognition: e only/);
});

test("the transport indicator names the transport, chosen or in use", () => {
  assert.equal(transportLabel("webrtc", null), "will connect over WebRTC");
  assert.equal(transportLabel("websocket", "connecting"), "connecting over websocket…");
  assert.equal(transportLabel("webrtc", "ready"), "connected over WebRTC");
  assert.equal(transportLabel("websocket", "ready"), "connected over websocket");
});
