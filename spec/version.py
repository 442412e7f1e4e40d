"""Versions: the distribution and the wire protocol."""

from __future__ import annotations

__all__ = ["PROTOCOL_VERSION", "__version__"]

__version__ = "0.1.0"
#: bumped on any breaking change of the wire protocol; announced in `session.created`
PROTOCOL_VERSION = "2026-11-29"
