"""The scripted backend: deterministic, programmable latencies, transcripts, replies,
silence decisions, failures and parked requests. The oracle backend for runtime,
transport and benchmark tests, and a stand-in for client developers.
"""

from __future__ import annotations

__all__: list[str] = []
