"""The server's edge: the Starlette app with the `/v1/realtime` websocket and WebRTC calls,
the `joyduplex` command line (uvicorn), and the wire codec both sides share. Translates
sockets to and from typed events; holds no session logic of its own. The clients are
`clients/`.
"""

from __future__ import annotations

__all__: list[str] = []
