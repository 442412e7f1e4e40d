"""The test oracle: a deliberately naive, executable model of docs/session-semantics.md
(`session.py` holds `ReferenceSession`, the class the stateful tests drive)."""
