"""A TCP proxy the browser tests put between Chromium and a server, to cut the network.

`cut()` resets every connection through it (each side gets a TCP reset, as when a route
goes away under an open socket) and refuses new ones, accepted and reset at once, as a
blocked port does, until `restore()`. `blackhole()` is the silent kind (a tunnel): bytes
are dropped both ways and new connections hang, no reset and no close reaches anyone,
until `restore()`; the connections it swallowed stay dead. The page is loaded through the
proxy, so every socket it opens (the first one and each resume attempt) crosses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

__all__ = ["CuttableProxy"]


class CuttableProxy:
    def __init__(self, target_url: str) -> None:
        host_port = target_url.split("://", 1)[1]
        self._target_host, port = host_port.rsplit(":", 1)
        self._target_port = int(port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._cut = False
        self._silent = False
        self._swallowed: set[asyncio.StreamWriter] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    def __enter__(self) -> CuttableProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._handle, "127.0.0.1", 0))
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def cut(self) -> None:
        """Reset every connection and refuse new ones."""
        self._call(self._cut_all())

    def blackhole(self) -> None:
        """Drop every byte, reset nothing; new connections hang."""
        self._call(self._blackhole())

    def restore(self) -> None:
        """Let connections through again."""
        self._call(self._restore())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _cut_all(self) -> None:
        self._cut = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _blackhole(self) -> None:
        self._silent = True
        self._swallowed |= self._writers  # dead for good, as a route that went away

    async def _restore(self) -> None:
        self._cut = False
        self._silent = False

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut_all()
        # let every handler see its reset and finish, then drop any still waiting
        await asyncio.sleep(0.1)
        current = asyncio.current_task()
        for task in asyncio.all_tasks():
            if task is not current:
                task.cancel()
        await asyncio.sleep(0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        if self._silent:  # accepted, never answered
            self._writers.add(writer)
            with contextlib.suppress(OSError, ConnectionError):
                while await reader.read(65536):
                    pass
            self._writers.discard(writer)
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self._target_host, self._target_port
            )
        except OSError:
            writer.transport.abort()
            return
        pair = {writer, up_writer}
        self._writers |= pair
        writers = {reader: writer, up_reader: up_writer}

        def src_writer(src: asyncio.StreamReader) -> asyncio.StreamWriter:
            return writers[src]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if dst in self._swallowed or src_writer(src) in self._swallowed:
                        continue  # the silent drop: the bytes vanish
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():  # a clean close is passed on as one
                    dst.write_eof()
            except (OSError, ConnectionError):
                for end in pair:  # a reset on one side resets the other
                    end.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for end in pair:
            with contextlib.suppress(OSError, ConnectionError):
                end.close()
        self._writers -= pair
