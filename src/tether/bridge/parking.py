"""The developer's end of an intercept: connections parked at the router, spliced to a local port.

The developer opens a few connections to the router through its `ClusterChannel` (so nothing
listens on the developer's machine) and announces the route and its token on each. When the
router hands one a connection (`GO peer`), it is spliced to the local program and a fresh one
is parked in its place. A refused park (`ERR ...`) is reported and retried with backoff: the
session object may not have reached the router yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tether.bridge import routing
from tether.bridge.channel import (
    ByteStream,
    ReverseHandler,
    ReverseStream,
    splice,
    stream_from_asyncio,
)

log = logging.getLogger(__name__)

PARKED = 4
MAX_BACKOFF_S = 2.0

Opener = Callable[[], Awaitable[ByteStream]]


async def _read_line(stream: ByteStream, data: bytes = b"", limit: int = 512) -> tuple[bytes, bytes]:
    """One `\\n`-ended line (after `data`, bytes already read) and whatever came after it."""
    while b"\n" not in data:
        piece = await stream.receive()
        if not piece:
            raise ConnectionError("the router closed the parked connection")
        data += piece
        if len(data) > limit and b"\n" not in data:
            raise ConnectionError("the router sent an overlong line")
    line, _, rest = data.partition(b"\n")
    return line + b"\n", rest


def local_handler(port: int, host: str = "127.0.0.1") -> ReverseHandler:
    """Connect each reverse stream to the local program on `host:port`."""

    async def handle(reverse: ReverseStream) -> None:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            log.warning("intercept %s: the local program on %s:%d does not answer: %s",
                        reverse.route, host, port, exc)
            await reverse.stream.aclose()
            return
        await splice(reverse.stream, stream_from_asyncio(reader, writer))

    return handle


@dataclass
class ParkedPool:
    """Keeps `size` connections parked at the router for `route`; `run` until cancelled."""

    open_router: Opener
    route: str
    token: str
    port: int
    handler: ReverseHandler
    size: int = PARKED
    served: int = 0
    last_error: str = ""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.size):
                    group.create_task(self._slot())
        finally:
            # the served connections end with the pool: cancelled and awaited, so the caller
            # that ends the session next finds them closed
            served = list(self._tasks)
            for task in served:
                task.cancel()
            if served:
                await asyncio.wait(served)

    async def _slot(self) -> None:
        backoff = 0.1
        while True:
            try:
                stream = await self.open_router()
            except Exception as exc:  # the channel reports its own errors; retry while we run
                self.last_error = f"cannot reach the router: {exc}"
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            try:
                await stream.send(routing.encode_park(self.route, self.token))
                answer, rest = await _read_line(stream)
                if answer != b"OK\n":
                    self.last_error = answer.decode("ascii", "replace").strip()
                    await stream.aclose()
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                backoff = 0.1
                go, rest = await _read_line(stream, rest)
                peer = routing.parse_go(go)
            except (ConnectionError, OSError, ValueError) as exc:
                self.last_error = str(exc)
                with contextlib.suppress(Exception):
                    await stream.aclose()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.served += 1
            task = asyncio.create_task(self._serve(stream, rest, peer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: ByteStream, first: bytes, peer: str) -> None:
        try:
            await self.handler(ReverseStream(_Prefixed(stream, first), self.route, self.port, peer))
        except Exception as exc:  # one connection's failure must not end the intercept
            log.debug("intercept %s: connection from %s ended: %s", self.route, peer, exc)


class _Prefixed:
    """A stream whose first bytes were already read (they followed the `GO` line)."""

    def __init__(self, stream: ByteStream, first: bytes) -> None:
        self._stream = stream
        self._first = first

    async def receive(self, max_bytes: int = 64 * 1024) -> bytes:
        if self._first:
            piece, self._first = self._first[:max_bytes], self._first[max_bytes:]
            return piece
        return await self._stream.receive(max_bytes)

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()
