// The table interpreter follows the rulebook semantics of core/statemachines/_rulebook.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidTransition, Rulebook } from "../../web/js/rulebook.js";
import { diskSpec } from "./helpers.mjs";

const spec = await diskSpec();

test("the first row whose guard passes wins; effects run after the state changes", () => {
  const book = new Rulebook(spec.tables.client_hold);
  const model = { state: "new", mic_muted: (kw) => kw.muted };
  book.fire(model, "press", { muted: true });
  assert.equal(model.state, "muted");
  const other = { state: "new", mic_muted: () => false };
  book.fire(other, "press", { muted: false });
  assert.equal(other.state, "pressed");
});

test("an illegal trigger throws and changes nothing", () => {
  const book = new Rulebook(spec.tables.client_hold);
  const model = { state: "settled" };
  assert.throws(() => book.fire(model, "release"), InvalidTransition);
  assert.equal(model.state, "settled");
});

test("every table's initial and terminal states are among its states", () => {
  for (const table of Object.values(spec.tables)) {
    assert.ok(table.states.includes(table.initial), table.name);
    for (const state of table.terminal) assert.ok(table.states.includes(state), table.name);
    for (const row of table.transitions) {
      for (const source of row.source) assert.ok(table.states.includes(source), row.trigger);
    }
  }
});
