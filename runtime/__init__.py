"""Async glue (anyio): runs one `SessionProtocol` per connection, executes its effects
against a backend, feeds results back, and owns every task, timer, cancel scope and
bounded queue. One task group per connection; one cancel scope per response.
"""

from __future__ import annotations

__all__: list[str] = []
