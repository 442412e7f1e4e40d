"""Give the C heap's free pages back to the operating system once a process is idle.

A load peak (hundreds of sessions, each with its audio buffers and numpy arrays) leaves
glibc's malloc holding the freed memory in its arenas: the process stayed about 200 MB
above its idle figure after 1000 sessions left. `malloc_trim(0)` returns the free pages
at the top of every arena and the unused pages inside them. It is called when the last
session of a process closes, where nothing is waiting on the loop; on a C library
without it (musl, macOS) nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import cache
from typing import Any

__all__ = ["return_free_heap"]

log = logging.getLogger("joyduplex.runtime")


@cache
def _trim() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def return_free_heap() -> bool:
    """Return the C heap's free pages to the system; True when the C library could."""
    trim = _trim()
    if trim is None:
        return False
    return bool(trim(0))
