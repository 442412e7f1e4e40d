"""The test oracle: a deliberately naive, executable model of docs/session-semantics.md,
one module per seam of core (`session.py` holds `ReferenceSession`, the class the
stateful tests drive; `state.py` says how the layers stack)."""
