"""The edge: the Starlette app with the `/v1/realtime` websocket, the msgspec codec, the
`joyduplex` command line (uvicorn) and the Python client. Translates sockets to and from
typed events; holds no session logic of its own.
"""

from __future__ import annotations

__all__: list[str] = []
