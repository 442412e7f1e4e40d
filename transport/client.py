"""Deprecated path of the Python client: it is `clients.duplex_client` now.

Kept for one release so that `from transport.client import DuplexClient` goes on working
(with a `DeprecationWarning`); it is removed in joyduplex 0.2. The server never imports
it (the import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

import warnings

from clients.duplex_client import (
    ConnectionLost,
    DuplexClient,
    DuplexClientError,
    HandshakeRefused,
    ResponseResult,
    ResumeState,
    ServerError,
)

__all__ = [
    "ConnectionLost",
    "DuplexClient",
    "DuplexClientError",
    "HandshakeRefused",
    "ResponseResult",
    "ResumeState",
    "ServerError",
]

warnings.warn(
    "transport.client moved to clients.duplex_client; import from there "
    "(the old path is removed in joyduplex 0.2)",
    DeprecationWarning,
    stacklevel=2,
)
