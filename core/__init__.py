"""The sans-IO session engine: state machines built from the `spec` tables, coupled by
`SessionProtocol`, which takes client and backend events with the current time and
returns server events and effects. No I/O, no clock, no tasks, no asyncio: everything
here is synchronous and deterministic, so it can be property-tested and benchmarked.
"""

from __future__ import annotations

__all__: list[str] = []
