// Loads the exported client tables and constants (web/spec/*.json): in the browser with
// fetch relative to this module, in Node (tests) with fs.

export const TABLE_NAMES = [
  "client_connection",
  "client_hold",
  "client_playback",
  "client_reply_gate",
  "client_watchdog",
  "client_camera",
  "client_resume",
];

export async function loadSpec(readJson = null) {
  const read =
    readJson ??
    (async (name) => {
      const response = await fetch(new URL(`../spec/${name}.json`, import.meta.url));
      if (!response.ok) throw new Error(`cannot load spec/${name}.json: ${response.status}`);
      return response.json();
    });
  const constants = await read("client_constants");
  const tables = {};
  for (const name of constants.tables ?? TABLE_NAMES) tables[name] = await read(name);
  return { constants, tables };
}
