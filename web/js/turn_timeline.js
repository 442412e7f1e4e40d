// Where a turn's time goes, as the page sees it: one timeline per turn, from the end of
// the person's turn to the reply being audible in the page. A plain class (no DOM, no
// clock: every input carries its `performance.now()` time), fed by app.js and unit-tested
// in Node (tests/web/turn_timeline.test.mjs).
//
// Marks, in the order a turn passes them (a turn has the marks of its kind only):
//   push-to-talk                         hands-free (server or semantic VAD)
//   release     the button went up       speechEnd      the microphone's level meter: end
//   lastAudio   the flushed partial                     of the last voiced chunk (measured
//               chunk went out (websocket)              in the page, before the server's
//   commitSent  input_audio_buffer.commit               silence window)
//                                        speechStopped  input_audio_buffer.speech_stopped
//   then both: committed (input_audio_buffer.committed), transcript (the transcription's
//   `completed`), created (response.created), firstAudio (websocket: the first
//   response.output_audio.delta received; WebRTC: output_audio_buffer.started, which the
//   server sends with the reply's first RTP packet: the nearest a page gets to "first
//   packet", as a page cannot tell the reply's first packets from the silence before
//   them), audible (the output level meter: the playback worklet's output on the
//   websocket, the remote track on WebRTC, stamped on the audio clock).
// Each mark is measured (an event's arrival, a level meter's quantum). On WebRTC the turn
// also keeps what getStats() says of the reply's inbound RTP stream between the turn's
// start and audible (`stats`): the jitter buffer's mean delay over the samples it emitted
// then and its target (derived by the browser, not measured by the page), packets received.

/** The marks of each kind of turn, in order. */
export const TURN_MARKS = {
  release: ["release", "lastAudio", "commitSent", "committed", "transcript", "created", "firstAudio", "audible"],
  speech: ["speechEnd", "speechStopped", "committed", "transcript", "created", "firstAudio", "audible"],
};

/** Short words for the compact timeline under the badge. */
export const MARK_LABELS = {
  release: "release",
  lastAudio: "last audio",
  commitSent: "commit",
  speechEnd: "speech end",
  speechStopped: "speech stopped",
  committed: "committed",
  transcript: "transcript",
  created: "created",
  firstAudio: "first audio",
  audible: "audible",
};

/** The peak (full scale 1) a microphone chunk's RMS must reach to count as voiced. */
export const VOICED_RMS = 0.01;

export class TurnTimeline {
  /** `turns`: where the turns go (the page's `metrics.turns`, kept across calls). */
  constructor(transport, turns = [], { maxTurns = 64 } = {}) {
    this.transport = transport;
    this.maxTurns = maxTurns;
    this.turns = turns; // {transport, kind, marks: {name: ms}, itemId, responseId, stats}
    this.lastVoicedEnd = null; // the end of the last voiced microphone chunk
    this.firstAudioSeen = new Set(); // response ids with a firstAudio mark
  }

  /** A microphone chunk that ended at `at` (its arrival), with its RMS level. */
  micLevel(rms, at) {
    if (rms >= VOICED_RMS) this.lastVoicedEnd = at;
  }

  /** The push-to-talk button went up: a turn starts here. */
  release(at) {
    return this.open("release", { release: at });
  }

  /** The release's flushed partial chunk (the hold's last audio) went out. */
  lastAudioSent(at) {
    const turn = this.latest("release");
    if (turn && turn.marks.lastAudio === undefined && turn.marks.commitSent === undefined) {
      turn.marks.lastAudio = at;
    }
  }

  /** A client event went out. */
  sent(event, at) {
    if (event.type !== "input_audio_buffer.commit") return;
    const turn = this.latest("release");
    if (turn && turn.marks.commitSent === undefined) turn.marks.commitSent = at;
  }

  /** A server event arrived (decoded). */
  received(event, at) {
    const type = event?.type;
    if (type === "input_audio_buffer.speech_stopped") {
      const marks = { speechStopped: at };
      // the voiced audio the server heard ended before its silence window: the page's own
      // meter says when (none within the last few seconds: not this turn's)
      if (this.lastVoicedEnd !== null && at - this.lastVoicedEnd < 5000) {
        marks.speechEnd = this.lastVoicedEnd;
      }
      const turn = this.open("speech", marks);
      turn.itemId = event.item_id ?? null;
    } else if (type === "input_audio_buffer.committed") {
      const turn =
        this.turns.findLast((t) => t.itemId && t.itemId === event.item_id) ??
        this.awaiting("committed");
      if (turn) {
        turn.marks.committed ??= at;
        turn.itemId ??= event.item_id ?? null;
      }
    } else if (type === "conversation.item.input_audio_transcription.completed") {
      const turn = this.turns.findLast((t) => t.itemId && t.itemId === event.item_id);
      if (turn) turn.marks.transcript ??= at;
    } else if (type === "response.created") {
      const turn = this.turns.findLast(
        (t) => t.responseId === null && t.marks.committed !== undefined,
      );
      if (turn) {
        turn.responseId = event.response?.id ?? null;
        turn.marks.created = at;
      }
    } else if (type === "response.output_audio.delta" || type === "output_audio_buffer.started") {
      const responseId = event.response_id;
      if (this.firstAudioSeen.has(responseId)) return;
      const turn = this.turns.findLast((t) => t.responseId === responseId);
      if (turn) {
        turn.marks.firstAudio = at;
        this.firstAudioSeen.add(responseId);
      }
    }
  }

  /** The output level meter heard sound at `at`: the newest turn whose reply's first
   * audio arrived and was not heard yet is audible from then on (never before its first
   * audio: a WebRTC packet may beat the data channel's event, and the host calls this
   * again when that event comes while the meter still hears sound). The turn, or null. */
  heard(at) {
    const turn = this.turns.findLast((t) => t.marks.firstAudio !== undefined);
    if (!turn || turn.marks.audible !== undefined) return null;
    turn.marks.audible = Math.max(at, turn.marks.firstAudio);
    return turn;
  }

  open(kind, marks) {
    const turn = { transport: this.transport, kind, marks, itemId: null, responseId: null, stats: null };
    this.turns.push(turn);
    while (this.turns.length > this.maxTurns) this.turns.shift();
    return turn;
  }

  latest(kind) {
    const turn = this.turns.at(-1);
    return turn && turn.kind === kind ? turn : null;
  }

  awaiting(mark) {
    return this.turns.findLast((t) => t.marks[mark] === undefined && t.responseId === null) ?? null;
  }
}

/** A turn's segments in time order: [{from, to, ms}] between consecutive present marks
 * (the transcript runs beside the reply: it may come before or after response.created or
 * the first audio), and its total (first mark to audible, null until audible). */
export function segmentsOf(turn) {
  const order = TURN_MARKS[turn.kind];
  const names = order
    .filter((name) => turn.marks[name] !== undefined)
    .sort((a, b) => turn.marks[a] - turn.marks[b] || order.indexOf(a) - order.indexOf(b));
  const segments = [];
  for (let i = 1; i < names.length; i += 1) {
    segments.push({
      from: names[i - 1],
      to: names[i],
      ms: turn.marks[names[i]] - turn.marks[names[i - 1]],
    });
  }
  const start = names.length ? turn.marks[names[0]] : undefined;
  const total = turn.marks.audible !== undefined && start !== undefined ? turn.marks.audible - start : null;
  return { start: names[0] ?? null, segments, total };
}

/** The compact timeline of a turn: "release → commit 2 → committed 14 → … = 243 ms". */
export function timelineText(turn) {
  const { start, segments, total } = segmentsOf(turn);
  if (start === null) return "";
  const parts = [MARK_LABELS[start]];
  for (const segment of segments) parts.push(`${MARK_LABELS[segment.to]} +${Math.round(segment.ms)}`);
  const jitter = turn.stats?.jitterBufferMs;
  const tail = total === null ? "" : ` = ${Math.round(total)} ms`;
  const stats = jitter === undefined || jitter === null ? "" : ` (jitter buffer ≈${Math.round(jitter)} ms)`;
  return `${parts.join(" → ")}${tail}${stats}`;
}

/** What getStats() says of the reply's inbound audio stream, as a flat snapshot (null
 * when the report has none). Fields Chromium does not report are left out. */
export function inboundAudioOf(report) {
  for (const stat of report.values()) {
    if (stat.type !== "inbound-rtp" || stat.kind !== "audio") continue;
    const snapshot = { packetsReceived: stat.packetsReceived ?? 0 };
    for (const key of [
      "jitterBufferDelay",
      "jitterBufferEmittedCount",
      "jitterBufferTargetDelay",
      "jitterBufferMinimumDelay",
      "totalSamplesReceived",
      "concealedSamples",
    ]) {
      if (typeof stat[key] === "number") snapshot[key] = stat[key];
    }
    return snapshot;
  }
  return null;
}

/** The jitter buffer over the samples emitted between two snapshots (derived: the
 * browser's own mean delay and target over that interval, in ms). */
export function jitterBetween(before, after) {
  if (!before || !after) return null;
  const emitted = (after.jitterBufferEmittedCount ?? 0) - (before.jitterBufferEmittedCount ?? 0);
  const stats = { packetsReceived: after.packetsReceived - before.packetsReceived };
  if (emitted > 0) {
    stats.jitterBufferMs = (1000 * (after.jitterBufferDelay - before.jitterBufferDelay)) / emitted;
    if (after.jitterBufferTargetDelay !== undefined) {
      stats.jitterBufferTargetMs =
        (1000 * (after.jitterBufferTargetDelay - before.jitterBufferTargetDelay)) / emitted;
    }
    if (after.jitterBufferMinimumDelay !== undefined) {
      stats.jitterBufferMinimumMs =
        (1000 * (after.jitterBufferMinimumDelay - before.jitterBufferMinimumDelay)) / emitted;
    }
  }
  return stats;
}
