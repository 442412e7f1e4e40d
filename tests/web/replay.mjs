// CLI for tests/web/test_web_runtimes_agree.py: replay every trace file in a directory
// through the browser's ClientProtocol and print one JSON line: {replayed, mismatches}.
import { basename } from "node:path";

import { diskSpec, readTrace, replay, traceFiles } from "./helpers.mjs";

const spec = await diskSpec();
const mismatches = [];
const files = traceFiles(process.argv[2]);
for (const path of files) {
  const mismatch = replay(spec, readTrace(path));
  if (mismatch !== null) mismatches.push({ trace: basename(path), ...mismatch });
}
console.log(JSON.stringify({ replayed: files.length, mismatches }));
