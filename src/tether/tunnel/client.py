"""Dialing through the tunnel server's gRPC frontend, as konnectivity-client does.

- `dial(server, host, port, *, tls, timeout_s)`: single-use, like `CreateSingleUseGrpcTunnel`:
  one channel, one `/ProxyService/Proxy` stream, one connection; the channel closes with it.
- `TunnelClient`: reusable, like ANP's `ReusableTunnel`: one channel (one HTTP/2 connection),
  one Proxy stream per dial, so every connection keeps HTTP/2's own per-stream flow control and a
  Go proxy-server (one connection per stream) serves it unchanged.

Both return an `(asyncio.StreamReader, asyncio.StreamWriter)` pair backed by a local socket pair,
so anything asyncio offers (TLS via `start_tls`, `drain`, httpcore) works on top; both fit
`tether.kube.ConnectOptions(dialer=...)`:

    ConnectOptions(dialer=functools.partial(client.dial, "hub:8090", tls=tls))
    ConnectOptions(dialer=tunnel_client.dial)

Closing the writer sends CLOSE_REQ and waits up to 10 s for CLOSE_RSP. The protocol has no
half-close: `write_eof()` closes the whole connection, as in ANP.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
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
    call = channel.stream_stream(p.PROXY_METHOD, request_serializer=p.encode,
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


async def _pump(call: Any, connect_id: int, sock: socket.socket) -> None:
    """Carry bytes between the local socket end and the Proxy stream until either side closes."""
    reader, writer = await asyncio.open_connection(sock=sock, limit=CHUNK * 2)
    sent_close = asyncio.Event()

    async def up() -> None:
        while chunk := await reader.read(CHUNK):
            await call.write(p.data(connect_id, chunk))
        await call.write(p.close_req(connect_id))
        sent_close.set()

    async def down() -> None:
        while True:
            packet = await call.read()
            if packet is grpc.aio.EOF:
                return
            payload = packet.payload
            if isinstance(payload, p.Data):
                if payload.connect_id == connect_id:
                    writer.write(payload.data)
                    await writer.drain()
                elif payload.connect_id:
                    await call.write(p.close_req(payload.connect_id))
            elif isinstance(payload, p.CloseResponse):
                return

    async def close_deadline() -> None:
        await sent_close.wait()
        await asyncio.sleep(CLOSE_TIMEOUT_S)

    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(up()), tg.create_task(down())]
            deadline = tg.create_task(close_deadline())
            await asyncio.wait([tasks[1], deadline], return_when=asyncio.FIRST_COMPLETED)
            for task in (*tasks, deadline):
                task.cancel()
    except* (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError, ConnectionError,
             OSError, p.DecodeError):
        pass
    finally:
        call.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await writer.wait_closed()


async def _local_pair() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    mine, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=mine, limit=CHUNK * 2)
    return reader, writer, theirs


async def dial(server: str, host: str, port: int, *, tls: ClientTLS | None = None,
               timeout_s: float = DIAL_BACKSTOP_S) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Single-use tunnel: dial `host:port` through the server at `server` ("host:port" or
    "unix:/path"). Raises `DialError` (a ConnectionError) when the dial fails."""
    channel = channel_for(server, tls)
    try:
        call, connect_id = await _open(channel, host, port, timeout_s)
        reader, writer, theirs = await _local_pair()
    except BaseException:
        await channel.close(grace=None)
        raise

    async def run() -> None:
        try:
            await _pump(call, connect_id, theirs)
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
        reader, writer, theirs = await _local_pair()
        self._tg.create_task(_pump(call, connect_id, theirs))
        return reader, writer
