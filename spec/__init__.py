"""The protocol as data: wire events, session configuration and its validator, error
codes, limits, state tables and invariants, and an executable reference model.

`spec` imports nothing else of the project and never touches I/O, clocks or tasks; every
other layer builds on it. What is written here is the one source of truth: the machines
in `core` are built from its tables and the documents in `docs/` are generated from it.
"""

from __future__ import annotations

from spec.version import PROTOCOL_VERSION, __version__

__all__ = ["PROTOCOL_VERSION", "__version__"]
