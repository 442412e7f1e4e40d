// Shared helpers of the node --test suites: load the exported spec from disk and drive a
// ClientProtocol with trace-format inputs.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { ClientProtocol } from "../../web/js/client_protocol.js";
import { loadSpec } from "../../web/js/spec_loader.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TRACE_DIR = join(ROOT, "tests", "web", "traces");

export async function diskSpec() {
  return loadSpec(async (name) =>
    JSON.parse(readFileSync(join(ROOT, "web", "spec", `${name}.json`), "utf8")),
  );
}

export function traceFiles(dir = TRACE_DIR) {
  return readdirSync(dir)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((name) => join(dir, name));
}

export function readTrace(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

/** Replay a trace; returns the first disagreement ({index, what, expected, actual}) or null. */
export function replay(spec, trace) {
  const protocol = new ClientProtocol(spec, trace.mode, trace.options);
  for (const [index, step] of trace.steps.entries()) {
    let outputs;
    try {
      outputs = protocol.step(step.input);
    } catch (error) {
      return { index, what: "exception", expected: step.outputs, actual: String(error) };
    }
    if (!deepEqual(outputs, step.outputs)) {
      return { index, what: "outputs", input: step.input, expected: step.outputs, actual: outputs };
    }
    const snapshot = protocol.snapshot();
    if (!deepEqual(snapshot, step.snapshot)) {
      return { index, what: "snapshot", input: step.input, expected: step.snapshot, actual: snapshot };
    }
  }
  return null;
}

export function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((key) => Object.hasOwn(b, key) && deepEqual(a[key], b[key]));
}

/** A protocol driven by terse calls, collecting outputs: for the named B20-B23 tests. */
export class Driver {
  constructor(spec, mode, options = {}) {
    this.protocol = new ClientProtocol(spec, mode, options);
    this.outputs = [];
    this.now = 0;
  }
  step(kind, fields = {}) {
    this.now = fields.now_ms ?? this.now + 10;
    const out = this.protocol.step({ kind, now_ms: this.now, ...fields });
    this.outputs.push(...out);
    return out;
  }
  server(type, fields = {}) {
    return this.step("server", { event: { type, ...fields } });
  }
  ready() {
    this.step("connected");
    this.server("session.updated", { session: { id: "sess_1" } });
    return this;
  }
  sent(type = null) {
    return this.outputs
      .filter((o) => o.kind === "send" && (type === null || o.event.type === type))
      .map((o) => o.event);
  }
  of(kind) {
    return this.outputs.filter((o) => o.kind === kind);
  }
  hold(chunks = 2) {
    this.step("press");
    for (let i = 0; i < chunks; i += 1) this.step("mic", { audio: "BBBB", samples: 640 });
    const out = this.step("release");
    const commit = out.find((o) => o.kind === "send" && o.event.type === "input_audio_buffer.commit");
    return commit ? commit.event.event_id : null;
  }
  snapshot() {
    return this.protocol.snapshot();
  }
  holdState(holdId) {
    return this.snapshot().holds.find((h) => h.hold_id === holdId)?.state;
  }
  playbackState(responseId) {
    return this.snapshot().playbacks.find((p) => p.response_id === responseId)?.state;
  }
}
