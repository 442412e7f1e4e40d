"""The client's old import paths (`transport.client`, `transport.client_reconnect`,
`transport.call_client`, shown to users before the client side moved to `clients/`) keep
working for one release: each warns that it moved and hands out the very objects of its
new home."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "transport.client": (
        "clients.duplex_client",
        [
            "ConnectionLost",
            "DuplexClient",
            "DuplexClientError",
            "HandshakeRefused",
            "ResponseResult",
            "ResumeState",
            "ServerError",
        ],
    ),
    "transport.client_reconnect": ("clients.reconnect", ["resume_after_drop"]),
    "transport.call_client": ("clients.webrtc_call", ["CALL_RATE_HZ", "CallClient", "open_call"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_client_import_path_warns_and_gives_the_moved_objects(old: str) -> None:
    new, names = MOVED[old]
    if old == "transport.call_client":
        pytest.importorskip("aiortc")
    moved = importlib.import_module(new)
    sys.modules.pop(old, None)  # a module warns when it is first imported
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}"):
        shim = importlib.import_module(old)
    sys.modules.pop(old, None)  # the next importer warns again
    assert sorted(shim.__all__) == sorted(names)
    for name in names:
        assert getattr(shim, name) is getattr(moved, name), name
