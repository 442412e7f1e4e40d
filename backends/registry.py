"""The backends by name, imported only when asked for, and the delegate any of them gets
from a `[delegation]` table (B31).

Here, not in `backends.base`: the delegate is a remote stage, and the remote backend
builds on `backends.base`, so wiring it there made the one import circle of the house.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from backends.base import Backend, BackendUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BACKENDS", "load_backend"]

#: backend name -> "module:factory"; imported only when asked for
BACKENDS: dict[str, str] = {
    "scripted": "backends.scripted.backend:create_backend",
    "cpu": "backends.cpu.backend:create_backend",
    "gpu": "backends.gpu.backend:create_backend",
    "remote": "backends.remote.backend:create_backend",
}


def load_backend(name: str, **options: Any) -> Backend:
    """Import the named backend lazily and build it (not yet entered or warmed up).

    Raises:
        BackendUnavailable: unknown name, or its package (an optional extra) is missing.
    """
    target = BACKENDS.get(name)
    if target is None:
        raise BackendUnavailable(
            f"unknown backend `{name}`; expected one of {', '.join(sorted(BACKENDS))}"
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = {"cpu": "cpu", "gpu": "gpu", "remote": "remote"}.get(name)
        hint = f" (install the `{extra}` extra: pip install 'joyduplex[{extra}]')" if extra else ""
        raise BackendUnavailable(f"backend `{name}` cannot be imported: {exc}{hint}") from exc
    factory: Callable[..., Backend] = getattr(module, attr)
    delegation = options.pop("delegation", None)
    backend = factory(**options)
    if delegation is not None:
        try:
            from backends.remote.delegation import create_delegate
        except ImportError as exc:
            raise BackendUnavailable(
                f"[delegation] needs the `remote` extra (httpx): {exc};"
                " pip install 'joyduplex[remote]'"
            ) from exc
        backend.delegate = create_delegate(delegation)
    return backend
