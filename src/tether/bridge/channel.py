"""The seam between a bridge's developer side and the way it reaches into one cluster.

`tether connect` and `tether intercept` work against a `ClusterChannel`: open a TCP stream or a
UDP association to an address as seen from inside the cluster, and (for intercepts) accept the
streams the cluster opens back to the developer. How the channel gets there is its own business:
a multiplexed connection to the in-cluster bridge agent (through the API server's port-forward or
the hub's cluster proxy), or `DirectChannel`, which dials straight from this machine and serves
where cluster addresses are local (rootless local clusters put pod IPs on loopback) and as the
baseline the benchmarks compare against.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_DIAL_TIMEOUT_S = 10.0
READ_CHUNK = 64 * 1024


class BridgeError(Exception):
    """Base of the bridge's errors."""


class DialFailed(BridgeError):
    """The far end could not reach the destination (refused, unreachable, timed out)."""


class ChannelLost(BridgeError):
    """The channel to the cluster went away; streams on it are over. A new one may be opened."""


class ByteStream(Protocol):
    """One bidirectional byte stream (a TCP connection, as the far end sees it)."""

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        """The next bytes; `b""` once the peer has finished sending."""
        ...

    async def send(self, data: bytes) -> None: ...

    async def send_eof(self) -> None:
        """Half-close: nothing more will be sent; receiving goes on."""
        ...

    async def aclose(self) -> None: ...


class Datagrams(Protocol):
    """A UDP association with one destination: each send is one datagram, each receive one reply."""

    async def send(self, payload: bytes) -> None: ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ReverseStream:
    """A stream the cluster opened towards the developer, and what it was opened for."""

    stream: ByteStream
    route: str  # the intercept (route-as name, or the session's own name for `--all`)
    port: int  # the developer-side port the intercept maps to
    peer: str = ""  # who connected, as the cluster side saw it (for status and logs)


ReverseHandler = Callable[[ReverseStream], Awaitable[None]]


class ClusterChannel(Protocol):
    """One cluster, reached from the developer's machine."""

    @property
    def cluster(self) -> str: ...

    async def open_tcp(self, host: str, port: int, *, timeout_s: float = DEFAULT_DIAL_TIMEOUT_S) -> ByteStream:
        """A stream to `host:port` dialled from inside the cluster; `DialFailed` if it cannot be."""
        ...

    async def open_udp(self, host: str, port: int) -> Datagrams: ...

    async def aclose(self) -> None: ...


class ReverseRegistration(Protocol):
    """A route served by `serve_reverse`; `aclose()` stops serving it."""

    async def aclose(self) -> None: ...


class ReverseChannel(ClusterChannel, Protocol):
    """A channel the cluster can open streams back through (`MuxChannel`)."""

    async def serve_reverse(self, route: str, port: int, handler: ReverseHandler) -> ReverseRegistration:
        """Have the cluster end send streams for `route` and developer `port` to `handler`.

        Each stream runs `handler` in its own task; the registration survives the channel
        reconnecting. Another client already serving `route` is an error (`BridgeError`).
        """
        ...


class _AsyncioStream:
    """`ByteStream` over an asyncio connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        try:
            return await self._reader.read(max_bytes)
        except ConnectionError:
            return b""

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def send_eof(self) -> None:
        if self._writer.can_write_eof():
            with contextlib.suppress(OSError):
                self._writer.write_eof()

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def stream_from_asyncio(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> ByteStream:
    return _AsyncioStream(reader, writer)


class _DatagramProtocol(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received: asyncio.Queue[bytes] = asyncio.Queue(maxsize=256)

    def datagram_received(self, data: bytes, addr: object) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # UDP may drop; so do we when nobody reads
            self.received.put_nowait(data)


class _AsyncioDatagrams:
    def __init__(self, transport: asyncio.DatagramTransport, protocol: _DatagramProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def send(self, payload: bytes) -> None:
        self._transport.sendto(payload)

    async def receive(self) -> bytes:
        return await self._protocol.received.get()

    async def aclose(self) -> None:
        self._transport.close()


@dataclass
class DirectChannel:
    """Dials from this machine: right where the cluster's addresses are local, and a baseline."""

    name: str = "direct"
    _closed: bool = field(default=False, init=False)

    @property
    def cluster(self) -> str:
        return self.name

    async def open_tcp(self, host: str, port: int, *, timeout_s: float = DEFAULT_DIAL_TIMEOUT_S) -> ByteStream:
        if self._closed:
            raise ChannelLost(f"channel to {self.name} is closed")
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise DialFailed(f"dial {host}:{port}: {exc or 'timed out'}") from exc
        return _AsyncioStream(reader, writer)

    async def open_udp(self, host: str, port: int) -> Datagrams:
        if self._closed:
            raise ChannelLost(f"channel to {self.name} is closed")
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.create_datagram_endpoint(_DatagramProtocol, remote_addr=(host, port))
        except OSError as exc:
            raise DialFailed(f"udp {host}:{port}: {exc}") from exc
        return _AsyncioDatagrams(transport, protocol)

    async def aclose(self) -> None:
        self._closed = True


async def splice(left: ByteStream, right: ByteStream) -> None:
    """Copy both ways until both directions have ended, passing half-closes through."""

    async def pump(source: ByteStream, sink: ByteStream) -> None:
        while data := await source.receive():
            await sink.send(data)
        await sink.send_eof()

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(pump(left, right))
            group.create_task(pump(right, left))
    finally:
        for stream in (left, right):
            with contextlib.suppress(Exception):
                await stream.aclose()
