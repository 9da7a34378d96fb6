"""A small HTTP/1.1 server on asyncio streams.

The API server needs what general-purpose frameworks hide: chunked streams flushed per event
(watch, logs), and the raw socket after a `101 Switching Protocols` (WebSocket exec, SPDY
port-forward). This module parses requests, writes responses, and hands the socket over on
upgrade; it knows nothing about Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tether.net import http1
from tether.net.connections import (
    Admission,
    Connection,
    ConnectionLimits,
    ConnectionTable,
    plain_stream,
    tls_stream,
)
from tether.net.tasks import cancel_and_wait

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 3 * 1024 * 1024
IDLE_TIMEOUT_S = 120.0
LISTEN_BACKLOG = 1024
# asyncio accepts up to its `backlog` argument of waiting sockets in one step of the event loop,
# and sets up every one of them in the next: 1,024 from a flood (refused at once, but each is
# still a socket, a transport and a task) stalled the other connections for ~100 ms.
ACCEPTS_PER_STEP = 32
SWEEP_INTERVAL_S = 1.0  # idle timeouts end up to this late (see _Deadlines)
# After refusing a request whose body is still arriving, read (and drop) what the client sends for
# this long / this much before closing: closing with unread data resets the connection, and the
# client may lose the answer it has not read yet (Go's server lingers the same way).
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024 * 1024


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer_cert: dict[str, Any] | None = None
    connection: Connection | None = None

    def authenticated(self) -> None:
        """The handler accepted this request's credentials: its connection is no longer
        limited as an unauthenticated one (see `connections`)."""
        if self.connection is not None:
            self.connection.authenticated()

    def param(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[-1] if values else default

    def params(self, name: str) -> list[str]:
        return self.query.get(name, [])

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


@dataclass
class StreamResponse:
    """A chunked response; each yielded piece is flushed as one chunk."""

    status: int
    chunks: AsyncIterator[bytes]
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


UpgradeHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class UpgradeResponse:
    """`101 Switching Protocols`; `handler` owns the connection afterwards."""

    headers: list[tuple[str, str]]
    handler: UpgradeHandler
    # Called instead of `handler` when the 101 never reaches the client, so whatever the
    # handler would have released (a member connection) is released anyway.
    abandon: Callable[[], Awaitable[None]] | None = None


Reply = Response | StreamResponse | UpgradeResponse
Handler = Callable[[Request], Awaitable[Reply]]


_REASONS = {int(status): status.phrase for status in HTTPStatus}


def _reason(status: int) -> str:
    return _REASONS.get(status, "Unknown")


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _linger(reader: asyncio.StreamReader) -> None:
    """Drain the rest of a refused request, bounded in time and bytes, before the close."""
    deadline = time.monotonic() + LINGER_S
    left = LINGER_BYTES
    while left > 0:
        wait = deadline - time.monotonic()
        if wait <= 0:
            return
        try:
            chunk = await asyncio.wait_for(reader.read(65536), wait)
        except (TimeoutError, ConnectionError, ssl.SSLError):
            return
        if not chunk:
            return
        left -= len(chunk)


class _Deadlines:
    """Idle timeouts for the waits of many connections, without a timer per wait.

    A connection notes when its current wait (a request head, a body, an answer draining)
    must end, and forgets it after: a dict write, where `asyncio.timeout` schedules and
    cancels a timer handle (three per request). A sweep every SWEEP_INTERVAL_S, running while
    the server has connections, cancels the connections whose wait is overdue, which
    `_on_connection` then closes, as it closed them on a TimeoutError. Waits end at most
    SWEEP_INTERVAL_S after IDLE_TIMEOUT_S.
    """

    def __init__(self, connections: set[asyncio.Task[None]]) -> None:
        self.due: dict[asyncio.Task[None], float] = {}
        self._connections = connections
        self._sweeper: asyncio.Task[None] | None = None

    def ensure_sweeping(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def _sweep(self) -> None:
        while self._connections:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = time.monotonic()
            for task, due in list(self.due.items()):
                if due <= now:
                    del self.due[task]
                    task.cancel()


class HttpServer:
    """Serves `handler` on one listening socket until `close()`.

    Connections are admitted at accept by a `ConnectionTable` (`limits`); the handler calls
    `Request.authenticated()` once a request's credentials are accepted. `close()` ends open
    streams with the chunked terminator, so a watching client sees a clean end.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        server_header: str = "tether",
        sock: socket.socket | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._handler = handler
        self._sock = sock  # a listening socket made elsewhere (e.g. inside a network namespace)
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server_header = server_header
        self._server: asyncio.Server | None = None
        self.table = ConnectionTable(limits or ConnectionLimits())
        self._connections: set[asyncio.Task[None]] = set()
        self._streaming: set[asyncio.Task[None]] = set()
        self._deadlines = _Deadlines(self._connections)
        self._stopping: asyncio.Future[None] | None = None  # done once close() begins

    @property
    def port(self) -> int:
        if self._server is None:
            return self._port
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = loop.create_future()

        # What asyncio.start_server builds, with the connection table in front: a socket is
        # admitted or refused at accept, before any TLS work (see `connections`).
        def serve(conn: Connection) -> asyncio.BaseProtocol:
            reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES, loop=loop)
            on_connected = functools.partial(self._on_connection, conn)
            if self._ssl is None:
                return plain_stream(conn, reader, on_connected, loop)
            app = asyncio.StreamReaderProtocol(reader, on_connected, loop=loop)
            return tls_stream(conn, loop, app, self._ssl, self.table.limits.handshake_timeout_s)

        def accept() -> asyncio.BaseProtocol:
            return Admission(self.table, serve)

        if self._sock is not None:
            self._server = await loop.create_server(accept, sock=self._sock, backlog=ACCEPTS_PER_STEP)
        else:
            self._server = await loop.create_server(accept, self._host, self._port, reuse_address=True,
                                                    backlog=ACCEPTS_PER_STEP)
        for wrapped in self._server.sockets:
            # asyncio passed ACCEPTS_PER_STEP to listen() as well: give the kernel's queue its
            # depth back (on a duplicate of the descriptor: the server keeps the original).
            with socket.socket(fileno=os.dup(wrapped.fileno())) as listening:
                listening.listen(LISTEN_BACKLOG)

    async def close(self, grace_s: float = 2.0) -> None:
        """Stop accepting; end streams with their terminator, close everything else."""
        if self._server is None:
            return
        self._server.close()
        self._deadlines.stop()
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)
        streaming = [task for task in self._connections if task in self._streaming]
        for task in list(self._connections):
            if task not in self._streaming:
                task.cancel()
        if streaming:  # each writes its terminator and returns (bounded: a client may not read)
            await asyncio.wait(streaming, timeout=grace_s)
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), timeout=grace_s)

    def _closing(self) -> bool:
        return self._stopping is not None and self._stopping.done()

    async def _on_connection(self, conn: Connection, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing():
            writer.close()
            return
        self._connections.add(task)
        self._deadlines.ensure_sweeping()
        try:
            await self._serve(conn, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:  # closing, or an idle timeout (_Deadlines)
            pass
        finally:
            self._connections.discard(task)
            self._streaming.discard(task)
            self._deadlines.due.pop(task, None)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_cert = writer.get_extra_info("peercert")
        task = asyncio.current_task()
        assert task is not None
        due = self._deadlines.due  # instead of asyncio.timeout(IDLE_TIMEOUT_S) around each wait
        while True:
            due[task] = time.monotonic() + IDLE_TIMEOUT_S
            try:
                raw = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                await self._simple(writer, 431, b"request header too large")
                await _linger(reader)
                return
            except asyncio.IncompleteReadError:
                return
            finally:
                due.pop(task, None)
            try:
                head = http1.parse_request_head(raw[:-4])
            except http1.ProtocolError as exc:
                await self._simple(writer, 400, str(exc).encode())
                return
            try:
                decoder = http1.request_body(head, limit=MAX_BODY_BYTES)
                # most requests have no body: no coroutine for them
                body = b"" if decoder is None else await self._read_body(reader, decoder, due, task)
            except http1.BodyTooLarge:
                await self._send(writer, await self._handler_error(413), keep_alive=False)
                await _linger(reader)
                return
            except http1.UnsupportedCoding:
                await self._simple(writer, 501, b"unsupported transfer encoding")
                await _linger(reader)
                return
            except http1.ProtocolError as exc:
                await self._simple(writer, 400, str(exc).encode())
                await _linger(reader)
                return
            target = head.target
            split = urlsplit(target)
            request = Request(
                method=head.method,
                target=target,
                path=unquote(split.path),
                query=parse_qs(split.query, keep_blank_values=True),
                headers=head.headers,
                body=body,
                reader=reader,
                writer=writer,
                peer_cert=peer_cert,
                connection=conn,
            )
            reply = await self._handler(request)
            if isinstance(reply, UpgradeResponse):
                try:
                    writer.write(_head(101, reply.headers))
                    await writer.drain()
                except BaseException:
                    if reply.abandon is not None:
                        await reply.abandon()
                    raise
                await reply.handler(reader, writer)
                return
            keep_alive = head.version == "HTTP/1.1" and head.keep_alive  # no 1.0 keep-alive
            if isinstance(reply, StreamResponse):
                self._streaming.add(task)
                try:
                    await self._stream(reader, writer, reply)
                finally:
                    self._streaming.discard(task)
                if not keep_alive or self._closing():
                    return
                continue
            await self._send(writer, reply, keep_alive=keep_alive)
            if not keep_alive or self._closing():
                return

    async def _handler_error(self, status: int) -> Response:
        request_too_large = (
            b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
            b'"message":"Request entity too large: limit is %d","reason":"RequestEntityTooLarge","code":413}\n'
            % MAX_BODY_BYTES
        )
        return Response(status, request_too_large)

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, decoder: http1.BodyDecoder,
                         due: dict[asyncio.Task[None], float], task: asyncio.Task[None]) -> bytes:
        """The request's body, read exactly to its end (the next request may follow)."""
        due[task] = time.monotonic() + IDLE_TIMEOUT_S  # a client that stalls mid-body
        try:
            if decoder.framing == http1.FIXED:  # the common case, one read
                return await reader.readexactly(decoder.wants())
            buffer = bytearray()
            while want := decoder.wants():
                if want == http1.LINE:
                    try:
                        buffer += await reader.readuntil(b"\r\n")
                    except asyncio.LimitOverrunError as exc:
                        raise http1.ProtocolError("chunk line too long") from exc
                else:
                    buffer += await reader.readexactly(want)
                decoder.feed(buffer)
            return bytes(decoder.body)
        finally:
            due.pop(task, None)

    async def _simple(self, writer: asyncio.StreamWriter, status: int, text: bytes) -> None:
        await self._send(writer, Response(status, text, content_type="text/plain"), keep_alive=False)

    def _base_headers(self, content_type: str) -> list[tuple[str, str]]:
        return [("Content-Type", content_type), ("Cache-Control", "no-cache, private")]

    async def _send(self, writer: asyncio.StreamWriter, reply: Response, *, keep_alive: bool) -> None:
        headers = self._base_headers(reply.content_type) + reply.headers
        headers.append(("Content-Length", str(len(reply.body))))
        if not keep_alive:
            headers.append(("Connection", "close"))
        writer.write(_head(reply.status, headers) + reply.body)
        task = asyncio.current_task()
        assert task is not None
        self._deadlines.due[task] = time.monotonic() + IDLE_TIMEOUT_S  # a client that never reads
        try:
            await writer.drain()
        finally:
            self._deadlines.due.pop(task, None)

    async def _stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: StreamResponse
    ) -> None:
        headers = self._base_headers(reply.content_type) + reply.headers
        headers.append(("Transfer-Encoding", "chunked"))
        writer.write(_head(reply.status, headers))
        await writer.drain()
        # A client that goes away must end the stream even when no event is due, or
        # idle watches would pile up; reading its side is how EOF is noticed. One pump task
        # per stream (not one task per chunk) keeps the cost of a watch event low: a single
        # write fans out to every watcher.
        chunks = reply.chunks
        gone = asyncio.ensure_future(reader.read(1))
        pump = asyncio.ensure_future(self._pump(writer, chunks))
        waits: set[asyncio.Future[Any]] = {pump, gone}
        if self._stopping is not None:
            waits.add(self._stopping)  # shared by every stream: no task per stream for it
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if pump in done:
                pump.result()  # re-raises a failed write
            elif gone in done:
                raise ConnectionResetError("client went away")
            else:  # the server is closing: stop between chunks, then end the stream cleanly
                pump.cancel()
                await asyncio.wait({pump})
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            for task in (pump, gone):
                await cancel_and_wait(task)
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()

    @staticmethod
    async def _pump(writer: asyncio.StreamWriter, chunks: AsyncIterator[bytes]) -> None:
        async for chunk in chunks:
            if chunk:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
