"""`MuxChannel`: a `ClusterChannel` over one multiplexed connection to the cluster's bridge agent.

The channel gets its transport from a *connector* (an async function returning a `ByteStream` to
the agent's mux port): a plain TCP connection (`tcp_connector`, right where the agent's pod IP is
reachable, as in rootless local clusters), or a port-forward through the API server or the hub's
cluster proxy (`bridge.agentpods.portforward_connector`). One supervisor task keeps a connection
up: when it drops (the agent pod was replaced, the port-forward ended), streams on it fail with
`ChannelLost`, the supervisor reconnects with backoff, and registers the reverse routes again.
Opens made while it is down wait for the new connection up to `reconnect_deadline_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType

from tether import __version__
from tether.bridge.channel import (
    DEFAULT_DIAL_TIMEOUT_S,
    BridgeError,
    ByteStream,
    ChannelLost,
    Datagrams,
    ReverseHandler,
    ReverseStream,
    stream_from_asyncio,
)
from tether.bridge.muxconn import (
    KEEPALIVE_INTERVAL_S,
    ControlError,
    MuxConnection,
    MuxStats,
    OpenRequest,
)

log = logging.getLogger(__name__)

Connector = Callable[[], Awaitable[ByteStream]]
RECONNECT_DEADLINE_S = 60.0
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 2.0


def tcp_connector(host: str, port: int, *, timeout_s: float = 10.0) -> Connector:
    """Connect straight to the agent's mux port."""

    async def connect() -> ByteStream:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise ChannelLost(f"cannot reach the bridge agent at {host}:{port}: {exc or 'timed out'}") from None
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return stream_from_asyncio(reader, writer)

    return connect


@dataclass
class _Registration:
    channel: MuxChannel
    route: str
    port: int

    async def aclose(self) -> None:
        await self.channel._unserve(self.route, self.port)


class MuxChannel:
    """One cluster through its bridge agent; see the module docstring."""

    def __init__(self, cluster: str, connector: Connector, *,
                 reconnect_deadline_s: float = RECONNECT_DEADLINE_S,
                 keepalive_s: float = KEEPALIVE_INTERVAL_S) -> None:
        self._cluster = cluster
        self._connector = connector
        self._deadline_s = reconnect_deadline_s
        self._keepalive_s = keepalive_s
        self._connection: MuxConnection | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self._supervisor: asyncio.Task[None] | None = None
        self._last_error = "not connected yet"
        self._handlers: dict[tuple[str, int], ReverseHandler] = {}
        # proves to the agent that a reconnection is this channel, taking its routes back
        self._route_key = secrets.token_urlsafe(24)
        self.connects = 0  # how many connections were made (a reconnect adds one)
        self._past = MuxStats()  # counters of connections that have ended
        self.agent: dict[str, object] = {}  # what the agent said in its HELLO

    @property
    def cluster(self) -> str:
        return self._cluster

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.lost

    async def __aenter__(self) -> MuxChannel:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def start(self, *, wait: bool = True) -> None:
        """Start connecting; with `wait`, until connected (`ChannelLost` past the deadline)."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise())
        if wait:
            await self._live()

    async def aclose(self) -> None:
        self._closed = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.wait([self._supervisor])
        if self._connection is not None:
            await self._connection.aclose("client closing")

    # -- ClusterChannel

    async def open_tcp(self, host: str, port: int, *, timeout_s: float = DEFAULT_DIAL_TIMEOUT_S) -> ByteStream:
        connection = await self._live()
        return await connection.open_tcp(host, port, timeout_s=timeout_s)

    async def open_udp(self, host: str, port: int) -> Datagrams:
        connection = await self._live()
        return await connection.open_udp(host, port, timeout_s=DEFAULT_DIAL_TIMEOUT_S)

    async def serve_reverse(self, route: str, port: int, handler: ReverseHandler) -> _Registration:
        new_route = all(r != route for r, _ in self._handlers)
        self._handlers[(route, port)] = handler
        if new_route:
            try:
                connection = await self._live()
                await connection.call({"op": "register", "route": route, "key": self._route_key})
            except BaseException:
                self._handlers.pop((route, port), None)
                raise
        return _Registration(self, route, port)

    @property
    def stats(self) -> MuxStats:
        """Bytes and streams over this channel's life, across reconnections."""
        total = MuxStats()
        total.add(self._past)
        if self._connection is not None:
            total.add(self._connection.stats)
        return total

    async def status(self) -> dict[str, object]:
        """The agent's own report (routes, connections, streams)."""
        connection = await self._live()
        return await connection.call({"op": "status"})

    async def _unserve(self, route: str, port: int) -> None:
        self._handlers.pop((route, port), None)
        if any(r == route for r, _ in self._handlers):
            return
        connection = self._connection
        if connection is not None and not connection.lost:
            with contextlib.suppress(BridgeError):
                await connection.call({"op": "unregister", "route": route})

    # -- connection upkeep

    async def _live(self) -> MuxConnection:
        if self._closed:
            raise ChannelLost(f"channel to {self._cluster} is closed")
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise())
        try:
            async with asyncio.timeout(self._deadline_s):
                while True:
                    await self._ready.wait()
                    connection = self._connection
                    if connection is not None and not connection.lost:
                        return connection
                    self._ready.clear()
        except TimeoutError:
            raise ChannelLost(f"no bridge agent in {self._cluster} within {self._deadline_s:g}s: "
                              f"{self._last_error}") from None

    async def _supervise(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._closed:
            try:
                connection = await self._connect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any connector failure: try again, report it on open
                self._last_error = str(exc) or type(exc).__name__
                log.debug("%s: connecting to the bridge agent: %s", self._cluster, self._last_error)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_FIRST_S
            self._connection = connection
            self._ready.set()
            await connection.wait_lost()
            self._ready.clear()
            self._last_error = f"connection lost: {connection.lost_reason}"
            log.info("%s: bridge agent connection lost (%s); reconnecting", self._cluster, connection.lost_reason)
            await connection.aclose()
            self._past.add(connection.stats)
            self._connection = None

    async def _connect(self) -> MuxConnection:
        transport = await self._connector()
        connection = MuxConnection(transport, "client", on_open=self._on_reverse, name=f"agent in {self._cluster}",
                                   hello={"client": __version__}, keepalive_s=self._keepalive_s)
        await connection.start()
        try:
            for route in sorted({r for r, _ in self._handlers}):
                try:
                    await connection.call({"op": "register", "route": route, "key": self._route_key})
                except ControlError as exc:  # taken by someone else meanwhile: keep the connection
                    log.warning("%s: route %s not served any more: %s", self._cluster, route, exc)
        except BaseException:
            await connection.aclose()
            raise
        self.connects += 1
        self.agent = dict(connection.peer_hello)
        return connection

    async def _on_reverse(self, request: OpenRequest) -> None:
        opened = request.opened
        handler = self._handlers.get((opened.route, opened.port))
        if handler is None:
            request.reject(f"this client serves no route {opened.route!r} on port {opened.port}")
            return
        stream = request.accept()
        try:
            await handler(ReverseStream(stream, opened.route, opened.port, opened.peer))
        finally:
            await stream.aclose()
