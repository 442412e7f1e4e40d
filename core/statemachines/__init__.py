"""One module per state machine kind (item, commit, input buffer, turn detector, response,
playback), each built once at import from its table in `spec` with `transitions`, driven
through one typed `fire()` wrapper; callbacks only append to an outbox.
"""

from __future__ import annotations

__all__: list[str] = []
