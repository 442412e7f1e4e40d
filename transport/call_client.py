"""Deprecated path of the Python WebRTC call client: it is `clients.webrtc_call` now.

Kept for one release so that `from transport.call_client import open_call` goes on
working (with a `DeprecationWarning`); it is removed in joyduplex 0.2.
"""

from __future__ import annotations

import warnings

from clients.webrtc_call import CALL_RATE_HZ, CallClient, open_call

__all__ = ["CALL_RATE_HZ", "CallClient", "open_call"]

warnings.warn(
    "transport.call_client moved to clients.webrtc_call; import from there "
    "(the old path is removed in joyduplex 0.2)",
    DeprecationWarning,
    stacklevel=2,
)
