// The browser's ClientProtocol (web/js/client_protocol.js over web/spec/*.json) agrees with
// the Python ClientProtocol on every recorded trace: same outputs, same snapshot, each step.
import assert from "node:assert/strict";
import { basename } from "node:path";
import { test } from "node:test";

import { diskSpec, readTrace, replay, traceFiles } from "./helpers.mjs";

const spec = await diskSpec();
const files = traceFiles();

test("there are recorded traces to replay", () => {
  assert.ok(files.length >= 20, `only ${files.length} traces`);
});

for (const path of files) {
  test(`trace ${basename(path, ".json")}: both runtimes agree at every step`, () => {
    const mismatch = replay(spec, readTrace(path));
    assert.equal(mismatch, null, JSON.stringify(mismatch, null, 1));
  });
}
