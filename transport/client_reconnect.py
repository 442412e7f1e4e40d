"""Deprecated path of the client's resume after a drop: it is `clients.reconnect` now.

Kept for one release so that `from transport.client_reconnect import resume_after_drop`
goes on working (with a `DeprecationWarning`); it is removed in joyduplex 0.2.
"""

from __future__ import annotations

import warnings

from clients.reconnect import resume_after_drop

__all__ = ["resume_after_drop"]

warnings.warn(
    "transport.client_reconnect moved to clients.reconnect; import from there "
    "(the old path is removed in joyduplex 0.2)",
    DeprecationWarning,
    stacklevel=2,
)
