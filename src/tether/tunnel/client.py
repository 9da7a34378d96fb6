"""Dialing through the tunnel server's gRPC frontend, as konnectivity-client does.

- `dial(server, host, port, *, tls, timeout_s)`: single-use, like `CreateSingleUseGrpcTunnel`:
  one channel, one `/ProxyService/Proxy` stream, one connection; the channel closes with it.
- `TunnelClient`: reusable, like ANP's `ReusableTunnel`: one channel (one HTTP/2 connection),
  one Proxy stream per dial, so every connection keeps HTTP/2's own per-stream flow control and a
  Go proxy-server (one connection per stream) serves it unchanged.

Both return an `(asyncio.StreamReader, asyncio.StreamWriter)` pair on a transport fed directly by
the Proxy stream (`_TunnelTransport`: no local socket pair), so anything asyncio offers (TLS via
`start_tls`, `drain`, the HTTP client in `tether.net.httpclient`) works on top; both fit
`tether.kube.ConnectOptions(dialer=...)`:

    ConnectOptions(dialer=functools.partial(client.dial, "hub:8090", tls=tls))
    ConnectOptions(dialer=tunnel_client.dial)

Closing the writer sends CLOSE_REQ and waits up to 10 s for CLOSE_RSP. The protocol has no
half-close: `write_eof()` closes the whole connection, as in ANP.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import secrets
from typing import Any

import grpc

from tether.tunnel import packets as p
from tether.tunnel.tls import ClientTLS

CHUNK = 256 * 1024
MAX_MESSAGE = 16 * 1024 * 1024
CLOSE_TIMEOUT_S = 10.0
DIAL_BACKSTOP_S = 30.0

_background: set[asyncio.Task[None]] = set()  # single-use pumps, kept alive until they finish


class DialError(ConnectionError):
    """The dial failed; `reason` is konnectivity-client's (endpoint, timeout, dialclosed, ...)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def channel_for(server: str, tls: ClientTLS | None) -> grpc.aio.Channel:
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", MAX_MESSAGE),
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.enable_retries", 0),
    ]
    if server.startswith("unix:") or tls is None:
        return grpc.aio.insecure_channel(server, options=options)
    return grpc.aio.secure_channel(server, tls.grpc_credentials(), options=options + tls.grpc_options())


async def _open(channel: grpc.aio.Channel, host: str, port: int, timeout_s: float) -> tuple[Any, int]:
    """Open a Proxy stream and dial; returns (call, connectID)."""
    call = channel.stream_stream(p.PROXY_METHOD, request_serializer=p.serialize,
                                 response_deserializer=p.decode)()
    random = secrets.randbits(63)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        async with asyncio.timeout(min(timeout_s, DIAL_BACKSTOP_S)):
            await call.write(p.dial_req(address, random))
            while True:
                packet = await call.read()
                if packet is grpc.aio.EOF:
                    raise DialError(f"dial {address}: tunnel closed", "tunnelclosed")
                payload = packet.payload
                if isinstance(payload, p.DialResponse) and payload.random == random:
                    if payload.error:
                        raise DialError(payload.error, "endpoint")
                    return call, payload.connect_id
                if isinstance(payload, p.CloseDial) and payload.random == random:
                    raise DialError(f"dial {address}: closed by the server", "dialclosed")
    except TimeoutError:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await call.write(p.dial_cls(random))
        call.cancel()
        raise DialError(f"dial {address}: dial timeout", "timeout") from None
    except grpc.aio.AioRpcError as exc:
        call.cancel()
        raise DialError(f"dial {address}: {exc.code().name}: {exc.details()}", "streamsetup") from exc
    except BaseException:
        call.cancel()
        raise


class _TunnelTransport(asyncio.Transport):
    """An asyncio transport fed directly by a Proxy stream (no local socket pair, no extra copy).

    Reads: DATA payloads go straight to the protocol (`data_received`, or the buffered protocol
    API that `start_tls` installs); `pause_reading` stops reading the stream, so HTTP/2 flow
    control pushes back on the server. Writes are buffered and sent by the pump as DATA packets of
    up to `CHUNK` bytes (small writes coalesce); `pause_writing` above `HIGH_WATER`. `close()` and
    `write_eof()` flush, then send CLOSE_REQ (the protocol has no half-close)."""

    _start_tls_compatible = True
    HIGH_WATER = 4 * CHUNK
    LOW_WATER = CHUNK

    def __init__(self, call: Any, connect_id: int, protocol: asyncio.BaseProtocol,
                 extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._call = call
        self._connect_id = connect_id
        self._protocol = protocol
        self._out: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._pending = asyncio.Event()  # data or a close request waits for the up pump
        self._can_read = asyncio.Event()
        self._can_read.set()
        self._close_requested = False  # close()/write_eof(): flush, then CLOSE_REQ
        self._closing = False  # close(): is_closing() is True
        self._writing_paused = False
        self._lost = False
        self.sent_close = asyncio.Event()

    # -- asyncio.Transport ---------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._close_requested or self._lost:
            return
        if not data:
            return
        self._out.append(bytes(data))
        self._buffered += len(data)
        self._pending.set()
        if not self._writing_paused and self._buffered > self.HIGH_WATER:
            self._writing_paused = True
            self._protocol.pause_writing()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._close_requested = True
        self._pending.set()

    def close(self) -> None:
        self._closing = True
        self.write_eof()

    def abort(self) -> None:
        self._closing = True
        self._close_requested = True
        self._call.cancel()
        self._connection_lost(None)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def get_write_buffer_size(self) -> int:
        return self._buffered

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.LOW_WATER, self.HIGH_WATER

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # fixed limits

    def pause_reading(self) -> None:
        self._can_read.clear()

    def resume_reading(self) -> None:
        self._can_read.set()

    def is_reading(self) -> bool:
        return self._can_read.is_set()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- pumps ---------------------------------------------------------------------------------
    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._out.clear()
        self._buffered = 0
        self._can_read.set()
        self._pending.set()
        with contextlib.suppress(Exception):
            self._protocol.connection_lost(exc)

    def _take(self) -> bytes:
        """The next DATA packet, encoded: up to CHUNK buffered bytes, small writes coalesced,
        each copied once (straight into the message)."""
        first = self._out.popleft()
        if len(first) > CHUNK:
            self._out.appendleft(first[CHUNK:])
            first = first[:CHUNK]
        parts = [first]
        size = len(first)
        while self._out and size + len(self._out[0]) <= CHUNK:
            part = self._out.popleft()
            parts.append(part)
            size += len(part)
        self._buffered -= size
        return p.encode_data_parts(self._connect_id, parts, size)

    async def up(self) -> None:
        while not self._lost:
            if not self._out:
                if self._close_requested:
                    break
                self._pending.clear()
                await self._pending.wait()
                continue
            await self._call.write(self._take())  # pre-encoded: see `p.serialize`
            if self._writing_paused and self._buffered <= self.LOW_WATER:
                self._writing_paused = False
                self._protocol.resume_writing()
        if self._lost:
            return
        await self._call.write(p.close_req(self._connect_id))
        self.sent_close.set()
        if self._closing:  # close() is done once flushed, as a socket's would be
            self._connection_lost(None)

    async def down(self) -> None:
        connect_id = self._connect_id
        while True:
            packet = await self._call.read()
            if packet is grpc.aio.EOF:
                return
            payload = packet.payload
            if isinstance(payload, p.Data):
                if payload.connect_id == connect_id:
                    if not payload.data:
                        continue
                    if not self._can_read.is_set():
                        await self._can_read.wait()
                    if self._lost:
                        continue  # closed locally: drop until CLOSE_RSP
                    protocol = self._protocol
                    if isinstance(protocol, asyncio.BufferedProtocol):
                        _feed_buffered(protocol, payload.data)
                    else:
                        protocol.data_received(payload.data)  # type: ignore[attr-defined]
                elif payload.connect_id:
                    await self._call.write(p.close_req(payload.connect_id))
            elif isinstance(payload, p.CloseResponse):
                return

    def end(self) -> None:
        """The stream is over: EOF to the protocol, then connection_lost."""
        if self._lost:
            return
        protocol = self._protocol
        if isinstance(protocol, asyncio.Protocol | asyncio.BufferedProtocol):
            with contextlib.suppress(Exception):
                protocol.eof_received()  # no half-close: the connection ends either way
        self._connection_lost(None)


def _feed_buffered(protocol: asyncio.BufferedProtocol, data: p.Chunk) -> None:
    view = memoryview(data)
    while view:
        buf = memoryview(protocol.get_buffer(len(view)))
        n = min(len(buf), len(view))
        if not n:
            raise RuntimeError("get_buffer() returned an empty buffer")
        buf[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


async def _pump(call: Any, transport: _TunnelTransport) -> None:
    """Carry bytes between the transport and the Proxy stream until either side closes."""

    async def close_deadline() -> None:
        await transport.sent_close.wait()
        await asyncio.sleep(CLOSE_TIMEOUT_S)

    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(transport.up()), tg.create_task(transport.down())]
            deadline = tg.create_task(close_deadline())
            await asyncio.wait([tasks[1], deadline], return_when=asyncio.FIRST_COMPLETED)
            for task in (*tasks, deadline):
                task.cancel()
    except* (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError, ConnectionError,
             OSError, p.DecodeError):
        pass
    finally:
        call.cancel()
        transport.end()


def _local_pair(call: Any, connect_id: int, host: str,
                port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, _TunnelTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK * 2, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport = _TunnelTransport(call, connect_id, protocol,
                                 {"peername": (host, port), "sockname": None, "socket": None})
    protocol.connection_made(transport)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer, transport


async def dial(server: str, host: str, port: int, *, tls: ClientTLS | None = None,
               timeout_s: float = DIAL_BACKSTOP_S) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Single-use tunnel: dial `host:port` through the server at `server` ("host:port" or
    "unix:/path"). Raises `DialError` (a ConnectionError) when the dial fails."""
    channel = channel_for(server, tls)
    try:
        call, connect_id = await _open(channel, host, port, timeout_s)
        reader, writer, transport = _local_pair(call, connect_id, host, port)
    except BaseException:
        await channel.close(grace=None)
        raise

    async def run() -> None:
        try:
            await _pump(call, transport)
        finally:
            await channel.close(grace=None)

    task = asyncio.get_running_loop().create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)
    return reader, writer


class TunnelClient:
    """Reusable tunnel: `async with TunnelClient(server, tls=...) as t: r, w = await t.dial(h, p)`.
    Every open connection is closed when the block ends."""

    def __init__(self, server: str, *, tls: ClientTLS | None = None,
                 timeout_s: float = DIAL_BACKSTOP_S) -> None:
        self.server = server
        self.tls = tls
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._tg: asyncio.TaskGroup | None = None

    async def __aenter__(self) -> TunnelClient:
        self._channel = channel_for(self.server, self.tls)
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None and self._channel is not None
        await self._channel.close(grace=None)  # cancels every stream; the pumps then end
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._tg.__aexit__(None, None, None)
        finally:
            self._tg = None

    async def dial(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._channel is None or self._tg is None:
            raise RuntimeError("TunnelClient is not open (use `async with`)")
        call, connect_id = await _open(self._channel, host, port, self.timeout_s)
        reader, writer, transport = _local_pair(call, connect_id, host, port)
        self._tg.create_task(_pump(call, transport))
        return reader, writer
