"""Local listeners that carry a mapped Service's ports through a `ClusterChannel`.

A TCP listener on `address:port` opens one channel stream to `cluster_ip:port` per accepted
connection and splices the two. A UDP listener keeps one channel association per local client
(address and port), idle ones closed after `UDP_IDLE_S`. Bytes and connections are counted per
Service for `tether bridge status`. A dial the cluster side refuses closes the local connection
at once (the client sees a reset or EOF, never a hang).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from dataclasses import dataclass, field
from typing import cast

from tether.bridge.channel import (
    BridgeError,
    ByteStream,
    ClusterChannel,
    Datagrams,
    splice,
    stream_from_asyncio,
)

log = logging.getLogger(__name__)

UDP_IDLE_S = 60.0
MAX_UDP_CLIENTS = 1024


class BindFailed(Exception):
    def __init__(self, address: str, port: int, protocol: str, exc: OSError) -> None:
        super().__init__(f"cannot listen on {address}:{port}/{protocol}: {exc.strerror}")
        self.address = address
        self.port = port
        self.in_use = exc.errno == errno.EADDRINUSE
        self.denied = exc.errno == errno.EACCES


@dataclass
class Counters:
    bytes_out: int = 0  # towards the cluster
    bytes_in: int = 0  # from the cluster
    connections: int = 0
    failures: int = 0


class CountingStream:
    """A `ByteStream` that adds what passes through it to counters."""

    def __init__(self, inner: ByteStream, counters: Counters) -> None:
        self._inner = inner
        self._counters = counters

    async def receive(self, max_bytes: int = 64 * 1024) -> bytes:
        data = await self._inner.receive(max_bytes)
        self._counters.bytes_in += len(data)
        return data

    async def send(self, data: bytes) -> None:
        self._counters.bytes_out += len(data)
        await self._inner.send(data)

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Listener:
    """One local port of one mapped Service."""

    channel: ClusterChannel
    address: str
    port: int
    target_host: str
    target_port: int
    protocol: str
    counters: Counters
    _server: asyncio.base_events.Server | None = field(default=None, init=False)
    _udp: asyncio.DatagramTransport | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def start(self) -> int:
        """Listen; the port actually bound (the Service's, or any when `port` is 0)."""
        try:
            if self.protocol == "UDP":
                loop = asyncio.get_running_loop()
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _UdpRelay(self), local_addr=(self.address, self.port))
                self._udp = transport
                bound = transport.get_extra_info("sockname")
            else:
                self._server = await asyncio.start_server(self._serve_tcp, self.address, self.port,
                                                          reuse_address=True)
                bound = self._server.sockets[0].getsockname()
        except OSError as exc:
            raise BindFailed(self.address, self.port, self.protocol, exc) from None
        self.port = int(bound[1])
        return self.port

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = stream_from_asyncio(reader, writer)
        self.counters.connections += 1
        try:
            remote = await self.channel.open_tcp(self.target_host, self.target_port)
        except BridgeError as exc:
            self.counters.failures += 1
            log.info("%s:%d -> %s:%d: %s", self.address, self.port, self.target_host, self.target_port, exc)
            _reset(writer)
            return
        with contextlib.suppress(Exception):
            await splice(local, CountingStream(remote, self.counters))

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        for task in list(self._tasks):
            task.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    with contextlib.suppress(Exception):
        transport.abort()


class _UdpRelay(asyncio.DatagramProtocol):
    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._transport: asyncio.DatagramTransport | None = None
        self._clients: dict[tuple[str, int], _UdpClient] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)  # selector transports do not subclass it

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        client = self._clients.get(addr)
        if client is None:
            if len(self._clients) >= MAX_UDP_CLIENTS:
                return  # UDP may drop; better than unbounded associations
            client = _UdpClient(self, addr)
            self._clients[addr] = client
            task = asyncio.get_running_loop().create_task(client.run())
            self._listener._tasks.add(task)
            task.add_done_callback(self._listener._tasks.discard)
        client.queue_send(data)

    def reply(self, addr: tuple[str, int], data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(data, addr)

    def forget(self, addr: tuple[str, int]) -> None:
        self._clients.pop(addr, None)


class _UdpClient:
    def __init__(self, relay: _UdpRelay, addr: tuple[str, int]) -> None:
        self._relay = relay
        self._addr = addr
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=256)
        self._last = time.monotonic()

    def queue_send(self, data: bytes) -> None:
        self._last = time.monotonic()
        with contextlib.suppress(asyncio.QueueFull):
            self._outbox.put_nowait(data)

    async def run(self) -> None:
        listener = self._relay._listener
        listener.counters.connections += 1
        try:
            association = await listener.channel.open_udp(listener.target_host, listener.target_port)
        except BridgeError as exc:
            listener.counters.failures += 1
            log.info("udp %s -> %s:%d: %s", self._addr, listener.target_host, listener.target_port, exc)
            self._relay.forget(self._addr)
            return
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pump_out(association))
                group.create_task(self._pump_in(association))
        except* (BridgeError, OSError, TimeoutError):
            pass
        finally:
            self._relay.forget(self._addr)
            with contextlib.suppress(Exception):
                await association.aclose()

    async def _pump_out(self, association: Datagrams) -> None:
        counters = self._relay._listener.counters
        while True:
            remaining = UDP_IDLE_S - (time.monotonic() - self._last)
            if remaining <= 0:
                raise TimeoutError
            try:
                async with asyncio.timeout(remaining):
                    data = await self._outbox.get()
            except TimeoutError:
                continue  # re-checked against the last datagram either way
            counters.bytes_out += len(data)
            await association.send(data)

    async def _pump_in(self, association: Datagrams) -> None:
        counters = self._relay._listener.counters
        while True:
            data = await association.receive()
            self._last = time.monotonic()
            counters.bytes_in += len(data)
            self._relay.reply(self._addr, data)
