"""A fake OpenAI-compatible chat server on 127.0.0.1 (raw asyncio HTTP/1.1), for the
background model of delegation tests (B31).

`GET /health` answers 200. `POST /v1/chat/completions` records the JSON body and then,
by `mode`: `answer` (200 with `answer` as the message content), `fail` (500), or `hold`
(waits until `release()` or until the client disconnects, which it records: an aborted
request). One request per connection (`Connection: close`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["FakeChatServer"]


class FakeChatServer:
    def __init__(self, answer: str = "The moon is about 384,000 kilometres away.") -> None:
        self.answer = answer
        self.mode = "answer"
        self.requests: list[dict[str, Any]] = []
        self.disconnected = 0  # held requests whose client went away (aborted)
        self.held = 0  # requests waiting in `hold` right now
        self._release = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeChatServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._release.set()
        self._server.close()
        for writer in list(self._writers):  # a held request's connection is cut
            writer.close()
        await self._server.wait_closed()

    def release(self) -> None:
        """Let every held request answer."""
        self._release.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            fields = (line.partition(":") for line in lines[1:] if line)
            headers = {k.strip().lower(): v.strip() for k, _, v in fields}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/health":
                await self._reply(writer, 200, b"ok")
                return
            if method != "POST" or path != "/v1/chat/completions":
                await self._reply(writer, 404, b"not found")
                return
            self.requests.append(json.loads(body))
            if self.mode == "fail":
                await self._reply(writer, 500, b'{"error": "the background model crashed"}')
                return
            if self.mode == "hold":
                self.held += 1
                gone = asyncio.ensure_future(reader.read(1))  # b"" once the client closes
                released = asyncio.ensure_future(self._release.wait())
                try:
                    await asyncio.wait({gone, released}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self.held -= 1
                if gone.done():
                    released.cancel()
                    self.disconnected += 1
                    return
                gone.cancel()
            completion = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.answer},
                        "finish_reason": "stop",
                    }
                ],
            }
            await self._reply(writer, 200, json.dumps(completion).encode())
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
