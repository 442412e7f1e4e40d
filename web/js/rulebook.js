// The table interpreter: runs the client tables of spec/tables/client_*.py, exported to
// web/spec/*.json, with the semantics of core/statemachines/_rulebook.py (`transitions`):
// the rows of a trigger whose source holds the model's state are tried in table order; the
// first whose guard passes moves the model to `dest` (null: internal, state unchanged) and
// then runs its effect. No row, or no passing guard, throws InvalidTransition and changes
// nothing. Guards and effects are methods of the model, called with the trigger's kwargs.

export class InvalidTransition extends Error {
  constructor(machine, trigger, state, guard = null) {
    const why = guard ? ` (guard \`${guard}\` failed)` : "";
    super(`cannot \`${trigger}\` ${machine} in state \`${state}\`${why}`);
    this.machine = machine;
    this.trigger = trigger;
    this.state = state;
    this.guard = guard;
  }
}

export class Rulebook {
  constructor(table) {
    this.table = table;
    this.rows = new Map();
    for (const row of table.transitions) {
      if (!this.rows.has(row.trigger)) this.rows.set(row.trigger, []);
      this.rows.get(row.trigger).push(row);
    }
    this.firing = false;
  }

  allowed(state, trigger) {
    return (this.rows.get(trigger) ?? []).some((row) => row.source.includes(state));
  }

  fire(model, trigger, kwargs = {}) {
    if (this.firing) throw new Error(`re-entrant trigger \`${trigger}\` on ${this.table.name}`);
    const state = model.state;
    const candidates = (this.rows.get(trigger) ?? []).filter((row) => row.source.includes(state));
    if (candidates.length === 0) throw new InvalidTransition(this.table.name, trigger, state);
    this.firing = true;
    try {
      for (const row of candidates) {
        if (row.guard && !model[row.guard](kwargs)) continue;
        if (row.dest !== null) model.state = row.dest;
        if (row.effect) model[row.effect](kwargs);
        return;
      }
    } finally {
      this.firing = false;
    }
    const guard = candidates.find((row) => row.guard)?.guard ?? null;
    throw new InvalidTransition(this.table.name, trigger, state, guard);
  }
}

export function buildRulebooks(tables) {
  const books = {};
  for (const [name, table] of Object.entries(tables)) books[name] = new Rulebook(table);
  return books;
}
