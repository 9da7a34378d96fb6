"""The developer's end of an intercept: connections parked at the router, spliced to a local port.

The developer opens a few connections to the router through its `ClusterChannel` (so nothing
listens on the developer's machine) and announces the route and its token on each. When the
router hands one a connection (`GO peer`), it is spliced to the local program and a fresh one
is parked in its place. A refused park (`ERR ...`) is reported and retried with backoff: the
session object may not have reached the router yet.

`leave` ends it gracefully: the router is told first (`routing.encode_leave`), so it hands out no
parked connection any more and sends this developer's requests to the original pods; then the
parked connections, which the router closes, are not replaced, and the requests already handed
here are finished before the pool stops.
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
LEAVE_GRACE_S = 10.0  # for requests already handed here when leaving

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
    _left: asyncio.Event = field(default_factory=asyncio.Event)
    _slots: int = 0
    _no_slots: asyncio.Event = field(default_factory=asyncio.Event)

    def leaving(self) -> bool:
        return self._left.is_set()

    async def leave(self, grace_s: float = LEAVE_GRACE_S) -> None:
        """Tell the router this developer is going, then let what it already handed here finish
        (at most `grace_s`); cancel `run` after this."""
        self._left.set()
        try:
            async with asyncio.timeout(grace_s):
                stream = await self.open_router()
                try:
                    await stream.send(routing.encode_leave(self.route, self.token))
                    answer, _ = await _read_line(stream)
                finally:
                    with contextlib.suppress(Exception):
                        await stream.aclose()
            if answer != b"OK\n":
                log.info("intercept %s: the router answered the leave with %s", self.route,
                         answer.decode("ascii", "replace").strip())
        except Exception as exc:  # the router is gone or unreachable: nothing hands out requests
            log.info("intercept %s: could not tell the router: %s", self.route, exc)
        # Each parked connection now ends one of two ways: closed by the router, or carrying a
        # request handed out just before the leave (its `GO` may arrive after the router's
        # answer above, on another connection). Every slot sees which before the pool stops.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                if self._slots:
                    await self._no_slots.wait()
                served = list(self._tasks)
                if served:
                    await asyncio.wait(served)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(self.size):
                    group.create_task(self._slot())
            # the slots end by themselves only when leaving: what they handed on finishes first
            # (`leave` bounds that; cancelling `run` cuts it short)
            while self._tasks:
                await asyncio.wait(list(self._tasks))
        finally:
            # the served connections end with the pool: cancelled and awaited, so the caller
            # that ends the session next finds them closed
            served = list(self._tasks)
            for task in served:
                task.cancel()
            if served:
                await asyncio.wait(served)

    async def _pause(self, seconds: float) -> None:
        """A backoff that a leave cuts short."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._left.wait()

    async def _slot(self) -> None:
        self._slots += 1
        try:
            await self._parking()
        finally:
            self._slots -= 1
            if not self._slots:
                self._no_slots.set()

    async def _parking(self) -> None:
        backoff = 0.1
        while not self.leaving():
            try:
                stream = await self.open_router()
            except Exception as exc:  # the channel reports its own errors; retry while we run
                self.last_error = f"cannot reach the router: {exc}"
                await self._pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if self.leaving():  # decided while the connection was being opened
                with contextlib.suppress(Exception):
                    await stream.aclose()
                return
            try:
                await stream.send(routing.encode_park(self.route, self.token))
                answer, rest = await _read_line(stream)
                if answer != b"OK\n":
                    self.last_error = answer.decode("ascii", "replace").strip()
                    await stream.aclose()
                    await self._pause(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                backoff = 0.1
                go, rest = await _read_line(stream, rest)
                peer = routing.parse_go(go)
            except (ConnectionError, OSError, ValueError) as exc:
                self.last_error = str(exc)
                with contextlib.suppress(Exception):
                    await stream.aclose()
                await self._pause(backoff)
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
