// The page's per-turn latency breakdown (web/js/turn_timeline.js), in Node: which event
// sets which mark of which turn. Times are plain numbers here; no test reads a clock.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  TurnTimeline,
  inboundAudioOf,
  jitterBetween,
  segmentsOf,
  timelineText,
} from "../../web/js/turn_timeline.js";

function pushToTalkTurn(timeline) {
  timeline.micLevel(0.2, 90);
  timeline.release(100);
  timeline.lastAudioSent(103);
  timeline.sent({ type: "input_audio_buffer.commit" }, 104);
  timeline.received({ type: "input_audio_buffer.committed", item_id: "item_1" }, 110);
  timeline.received({ type: "response.created", response: { id: "resp_1" } }, 111);
  timeline.received(
    { type: "conversation.item.input_audio_transcription.completed", item_id: "item_1" },
    150,
  );
  timeline.received({ type: "response.output_audio.delta", response_id: "resp_1" }, 260);
  timeline.received({ type: "response.output_audio.delta", response_id: "resp_1" }, 270);
  return timeline.heard(300);
}

test("a push-to-talk turn gets every mark from its release to audible", () => {
  const turns = [];
  const turn = pushToTalkTurn(new TurnTimeline("websocket", turns));
  assert.equal(turns.length, 1);
  assert.equal(turn.kind, "release");
  assert.equal(turn.responseId, "resp_1");
  assert.deepEqual(turn.marks, {
    release: 100,
    lastAudio: 103,
    commitSent: 104,
    committed: 110,
    created: 111,
    transcript: 150,
    firstAudio: 260, // the first delta, not a later one
    audible: 300,
  });
});

test("segments follow time, so a transcript after response.created sits after it", () => {
  const turn = pushToTalkTurn(new TurnTimeline("websocket"));
  const { start, segments, total } = segmentsOf(turn);
  assert.equal(start, "release");
  assert.deepEqual(
    segments.map((s) => `${s.from}>${s.to}`),
    [
      "release>lastAudio",
      "lastAudio>commitSent",
      "commitSent>committed",
      "committed>created",
      "created>transcript",
      "transcript>firstAudio",
      "firstAudio>audible",
    ],
  );
  assert.equal(total, 200);
  assert.match(timelineText(turn), /^release → last audio \+3 → .* audible \+40 = 200 ms$/);
});

test("a hands-free turn starts at speech_stopped and keeps the meter's end of speech", () => {
  const timeline = new TurnTimeline("webrtc");
  timeline.micLevel(0.3, 1000);
  timeline.micLevel(0.001, 1020); // silence: not voiced
  timeline.received({ type: "input_audio_buffer.speech_stopped", item_id: "item_7" }, 1530);
  timeline.received({ type: "input_audio_buffer.committed", item_id: "item_7" }, 1531);
  timeline.received({ type: "response.created", response: { id: "resp_7" } }, 1532);
  timeline.received({ type: "output_audio_buffer.started", response_id: "resp_7" }, 1540);
  const turn = timeline.heard(1600);
  assert.equal(turn.kind, "speech");
  assert.equal(turn.marks.speechEnd, 1000);
  assert.equal(turn.marks.speechStopped, 1530);
  assert.equal(turn.marks.firstAudio, 1540);
  assert.equal(turn.marks.audible, 1600);
});

test("sound heard before the reply's first audio event counts from that event", () => {
  const timeline = new TurnTimeline("webrtc");
  timeline.release(0);
  timeline.sent({ type: "input_audio_buffer.commit" }, 1);
  timeline.received({ type: "input_audio_buffer.committed", item_id: "item_1" }, 5);
  timeline.received({ type: "response.created", response: { id: "resp_1" } }, 6);
  assert.equal(timeline.heard(50), null); // no first audio yet: not this turn's reply
  timeline.received({ type: "output_audio_buffer.started", response_id: "resp_1" }, 60);
  assert.equal(timeline.heard(55).marks.audible, 60);
  assert.equal(timeline.heard(90), null); // once per turn
});

test("a release without a commit (an empty hold) leaves no marks past the release", () => {
  const timeline = new TurnTimeline("websocket");
  timeline.release(0);
  timeline.received({ type: "response.created", response: { id: "resp_x" } }, 5);
  assert.equal(timeline.turns[0].responseId, null);
  assert.equal(segmentsOf(timeline.turns[0]).total, null);
});

test("the jitter buffer is the browser's mean delay over the samples emitted in between", () => {
  const report = (delay, emitted, packets) =>
    new Map([
      ["a", { type: "outbound-rtp", kind: "audio" }],
      [
        "b",
        {
          type: "inbound-rtp",
          kind: "audio",
          packetsReceived: packets,
          jitterBufferDelay: delay,
          jitterBufferEmittedCount: emitted,
          jitterBufferTargetDelay: emitted * 0.04,
        },
      ],
    ]);
  const before = inboundAudioOf(report(10, 1000, 5));
  const after = inboundAudioOf(report(10 + 0.05 * 4800, 1000 + 4800, 15));
  const stats = jitterBetween(before, after);
  assert.equal(stats.packetsReceived, 10);
  assert.equal(Math.round(stats.jitterBufferMs), 50);
  assert.equal(Math.round(stats.jitterBufferTargetMs), 40);
  assert.equal(inboundAudioOf(new Map()), null);
  assert.equal(jitterBetween(null, after), null);
});
