// The playback queue of the playback worklet, as a plain class (unit-tested in Node).
//
// Audio of several responses queues in arrival order. Each response has a played cursor
// (samples actually rendered). Messages out:
//   {type: "playback-started", responseId}                 its first sample was rendered
//   {type: "playback-drained", responseId, playedMs}       after a drain request, all played
//   {type: "playback-stopped", responseId, playedMs, droppedMs}
//        on clear, reported BEFORE the cursor and the queued audio are dropped
//   {type: "playback-underrun", responseId}                ran dry before a drain request
// Playback (re)starts once `initialBufferMs` is queued or a drain was requested.

export class PlaybackQueue {
  constructor(sampleRate, initialBufferMs = 100) {
    this.sampleRate = sampleRate;
    this.initialSamples = Math.round((sampleRate * initialBufferMs) / 1000);
    this.segments = []; // {responseId, data: Float32Array, offset}
    this.responses = new Map(); // responseId -> {played, queued, started, drainRequested}
    this.primed = false;
    this.queuedSamples = 0;
  }

  record(responseId) {
    let entry = this.responses.get(responseId);
    if (entry === undefined) {
      entry = { played: 0, queued: 0, started: false, drainRequested: false };
      this.responses.set(responseId, entry);
    }
    return entry;
  }

  ms(samples) {
    return (samples * 1000) / this.sampleRate;
  }

  push(responseId, int16) {
    const data = new Float32Array(int16.length);
    for (let i = 0; i < int16.length; i += 1) data[i] = int16[i] / 32768;
    this.segments.push({ responseId, data, offset: 0 });
    this.record(responseId).queued += data.length;
    this.queuedSamples += data.length;
  }

  drain(responseId) {
    this.record(responseId).drainRequested = true;
    return this.settleDrained();
  }

  clear(responseId = null) {
    const messages = [];
    for (const [id, entry] of this.responses) {
      if (responseId !== null && id !== responseId) continue;
      messages.push({
        type: "playback-stopped",
        responseId: id,
        playedMs: this.ms(entry.played),
        droppedMs: this.ms(entry.queued - entry.played),
      });
      this.responses.delete(id);
    }
    if (responseId !== null && messages.length === 0) {
      messages.push({ type: "playback-stopped", responseId, playedMs: 0, droppedMs: 0 });
    }
    const kept = [];
    for (const segment of this.segments) {
      if (responseId === null || segment.responseId === responseId) {
        this.queuedSamples -= segment.data.length - segment.offset;
      } else {
        kept.push(segment);
      }
    }
    this.segments = kept;
    if (this.segments.length === 0) this.primed = false;
    return messages;
  }

  settleDrained() {
    const messages = [];
    for (const [id, entry] of this.responses) {
      if (entry.drainRequested && entry.played >= entry.queued) {
        messages.push({ type: "playback-drained", responseId: id, playedMs: this.ms(entry.played) });
        this.responses.delete(id);
      }
    }
    return messages;
  }

  /** Fill `out` (Float32Array) with the next samples; returns the messages to post. */
  render(out) {
    const messages = [];
    if (!this.primed) {
      const draining = this.segments.some((s) => this.responses.get(s.responseId)?.drainRequested);
      if (this.queuedSamples >= this.initialSamples || (draining && this.queuedSamples > 0)) {
        this.primed = true;
      }
    }
    let i = 0;
    while (this.primed && i < out.length && this.segments.length) {
      const segment = this.segments[0];
      const entry = this.record(segment.responseId);
      if (!entry.started) {
        entry.started = true;
        messages.push({ type: "playback-started", responseId: segment.responseId });
      }
      const n = Math.min(out.length - i, segment.data.length - segment.offset);
      out.set(segment.data.subarray(segment.offset, segment.offset + n), i);
      segment.offset += n;
      entry.played += n;
      this.queuedSamples -= n;
      i += n;
      if (segment.offset >= segment.data.length) {
        this.segments.shift();
        messages.push(...this.settleDrained());
      }
    }
    if (i < out.length) {
      out.fill(0, i);
      if (this.primed && this.segments.length === 0) {
        this.primed = false;
        const last = [...this.responses.entries()].find(([, e]) => !e.drainRequested);
        if (last) messages.push({ type: "playback-underrun", responseId: last[0] });
      }
    }
    return messages;
  }
}
