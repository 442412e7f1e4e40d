"""The client side: programs that speak the realtime protocol to a server, over its wire
only. The Python client (`duplex_client.DuplexClient`, anyio over a websocket), its WebRTC
call (`webrtc_call`), the `joyduplex client` command (`cli`) and the load generator behind
`joyduplex bench` (`loadgen/`). They run the client state machines of
`core.client_protocol` and share the wire codec (`transport.codec`) with the server, and
import nothing else of it (the import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

__all__: list[str] = []
