"""An HTTP/1.1 client on asyncio streams: keep-alive connections to one origin.

How a connection is made (`ConnectionPool._open_connection`):
1. The first hop is the origin, or the proxy when there is one. It is reached by a TCP connect
   (TLS by the event loop's C-level transport when the hop is https) or, when a `dialer` is
   given, by `dialer(host, port)`: anything that returns an `(asyncio.StreamReader,
   asyncio.StreamWriter)` pair already connected (a tunnel, a Unix socket, an SSH channel),
   with TLS started on top when the hop is https.
2. With a `Proxy`: `CONNECT host:port` carrying the proxy's headers (Karmada's `proxyURL` and
   `proxyHeader`, apiserver-network-proxy in http-connect mode); a 2xx opens the tunnel, any
   other answer fails the connection. Then TLS to the origin inside the tunnel (TLS in TLS
   through an https proxy). Plain-http origins are tunnelled too: the proxy never forwards
   requests itself.

What goes over a connection:
- `request`: one exchange, the whole answer buffered.
- `open`: the answer's head, then its body as it arrives (`StreamedAnswer.chunks`: watches, logs,
  pass-through); the request body may stream as well (an async iterable, sent chunked). After a
  `101 Switching Protocols`, `StreamedAnswer.take_connection()` hands the raw connection over
  (`RawConnection`: exec, attach, port-forward).

At most `max_connections` at once (an open stream or an upgraded connection holds one); idle
ones are reused newest first and dropped after `keepalive_expiry_s`.

Every failure is a `TransportError`. `sent` is False only when the request certainly never left
(no connection: refused, the dial failed, the proxy refused the CONNECT, TLS failed); `answered`
when some of an answer had arrived. A request on a reused connection that the server had already
closed (EOF before any answer byte) is tried once more on a new connection when it is safe to
replay (GET/HEAD/OPTIONS with the body in hand), as Go's transport does.

The wire format is `tether.net.http1` (why not httpx: see there).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from tether.net.http1 import (
    LAST_CHUNK,
    Answer,
    IncompleteMessage,
    ProtocolError,
    ResponseParser,
    authority,
    encode_chunk,
    encode_connect,
    encode_request,
    field_items,
)

Dialer = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
Body = bytes | AsyncIterable[bytes] | None

READ_CHUNK = 256 * 1024
CLOSE_TIMEOUT_S = 2.0
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
PROXY_MESSAGE_BYTES = 1024  # of a refusal's body, for the error message
PROXY_MESSAGE_WAIT_S = 1.0


class TransportError(Exception):
    """No complete answer: `sent` is False only when the request certainly never left;
    `answered` when some of the answer had arrived."""

    def __init__(self, message: str, *, sent: bool, answered: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.answered = answered


@dataclass(frozen=True)
class Proxy:
    """An HTTP CONNECT proxy: where it is, whether it speaks TLS, and the headers every CONNECT
    carries (a `Proxy-Authorization` made from the URL's user and password among them)."""

    host: str
    port: int
    tls: bool = False
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_url(cls, url: str, headers: Sequence[tuple[str, str]] = ()) -> Proxy:
        """`http://[user:password@]host[:port]` or `https://...`; `ValueError` for anything else."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported proxy scheme {parts.scheme!r} "
                             "(http and https CONNECT proxies are supported)")
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        sent = list(headers)
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            sent.append(("Proxy-Authorization", f"Basic {token}"))
        return cls(parts.hostname, port, tls, tuple(sent))


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0
    reused: bool = False

    def usable(self, now: float, expiry_s: float) -> bool:
        # bytes that arrived while idle (a late 408, a stray body byte) would be read as the
        # next request's answer; StreamReader has no public "buffered" query
        unsolicited = bool(getattr(self.reader, "_buffer", b""))
        return (not self.writer.is_closing() and not self.reader.at_eof() and not unsolicited
                and now - self.idle_since < expiry_s)

    def close(self) -> None:
        """Start closing; nothing waits for it (a cancelled call must not be held up)."""
        self.writer.close()

    async def closed(self) -> None:
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, RuntimeError):
            await self.writer.wait_closed()


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to one origin (`host`:`port`, TLS when `ssl_context`)."""

    def __init__(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None,
                 dialer: Dialer | None = None, proxy: Proxy | None = None,
                 max_connections: int = 256, max_idle: int = 32, keepalive_expiry_s: float = 30.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.target = authority(host, port)  # for CONNECT and messages
        default_port = 443 if ssl_context else 80
        self.authority = self.target if port != default_port else (
            f"[{host}]" if ":" in host and not host.startswith("[") else host)
        self._ssl = ssl_context
        self._dialer = dialer
        self._proxy = proxy
        self._proxy_ssl: ssl.SSLContext | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._max_idle = max_idle
        self._expiry_s = keepalive_expiry_s
        self._connect_timeout_s = connect_timeout_s
        self._closed = False

    async def request(self, method: str, target: str, headers: Sequence[tuple[str, str]],
                      body: bytes | None = None) -> Answer:
        """One exchange. The caller bounds the time (cancellation closes the connection)."""
        payload = encode_request(method, target, self.authority, headers, body)
        async with self._slots:
            connection = await self._checkout()
            try:
                return await self._exchange(connection, method, payload)
            except TransportError as exc:
                if not (connection.reused and not exc.answered and method in REPLAYABLE):
                    raise
            # the server had closed this idle connection: once more on a fresh one
            return await self._exchange(await self._connect(), method, payload)

    async def open(self, method: str, target: str, headers: Sequence[tuple[str, str]],
                   body: Body = None) -> StreamedAnswer:
        """Send a request and return once the answer's head is in; the body is read from the
        `StreamedAnswer`, which holds the connection (and a slot) until it is closed. A `body`
        that is an async iterable is sent chunked as it comes (and never replayed)."""
        pieces: AsyncIterable[bytes] | None = None
        if body is None or isinstance(body, bytes):
            payload = encode_request(method, target, self.authority, headers, body)
        else:
            pieces = body
            payload = encode_request(method, target, self.authority, headers, None, chunked=True)
        await self._slots.acquire()
        try:
            connection = await self._checkout()
            try:
                parser = await self._start(connection, method, payload, pieces)
            except TransportError as exc:
                if pieces is not None or not (connection.reused and not exc.answered and method in REPLAYABLE):
                    raise
                # the server had closed this idle connection: once more on a fresh one
                connection = await self._connect()
                parser = await self._start(connection, method, payload, None)
        except BaseException:
            self._slots.release()
            raise
        return StreamedAnswer(parser.head(), self, connection, parser)

    @staticmethod
    async def _start(connection: _Connection, method: str, payload: bytes,
                     pieces: AsyncIterable[bytes] | None) -> ResponseParser:
        """Send, and read until the answer's head is in; the connection is closed on failure."""
        parser = ResponseParser(head_request=method == "HEAD")
        try:
            await _send(connection, payload)
            if pieces is not None:
                async for piece in pieces:
                    if piece:
                        await _send(connection, encode_chunk(piece))
                await _send(connection, LAST_CHUNK)
            while not parser.head_ready:
                await _receive(connection, parser)
        except BaseException:
            connection.close()
            raise
        return parser

    def _finish(self, connection: _Connection, reusable: bool) -> None:
        if reusable and not self._closed and len(self._idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            connection.reused = True
            self._idle.append(connection)
        else:
            connection.close()

    async def _exchange(self, connection: _Connection, method: str, payload: bytes) -> Answer:
        parser = ResponseParser(head_request=method == "HEAD")
        reusable = False
        try:
            await _send(connection, payload)
            while True:
                answer = await _receive(connection, parser)
                if answer is not None:
                    break
            reusable = answer.keep_alive and not parser.leftover and answer.status != 101
            return answer
        finally:
            self._finish(connection, reusable)

    async def _checkout(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now, self._expiry_s):
                return connection
            connection.close()
        return await self._connect()

    async def _connect(self) -> _Connection:
        if self._closed:
            raise TransportError("the client is closed", sent=False)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                reader, writer = await self._open_connection()
        except TimeoutError:
            raise TransportError(f"connecting to {self.target} timed out after "
                                 f"{self._connect_timeout_s:.1f}s", sent=False) from None
        except TransportError:
            raise
        except Exception as exc:  # a dialer's own errors mean "not connected", like OSError
            raise TransportError(f"connecting to {self.target}: {_describe(exc)}", sent=False) from exc
        return _Connection(reader, writer)

    async def _open_connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        proxy = self._proxy
        if proxy is not None:
            host, port, tls = proxy.host, proxy.port, self._proxy_context() if proxy.tls else None
        else:
            host, port, tls = self.host, self.port, self._ssl
        if self._dialer is None:
            reader, writer = await asyncio.open_connection(host, port, ssl=tls,
                                                           server_hostname=host if tls else None)
        else:
            reader, writer = await self._dialer(host, port)
        try:
            if self._dialer is not None and tls is not None:
                await writer.start_tls(tls, server_hostname=host)
            if proxy is not None:
                await self._tunnel(proxy, reader, writer)
                if self._ssl is not None:
                    await writer.start_tls(self._ssl, server_hostname=self.host)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    def _proxy_context(self) -> ssl.SSLContext:
        if self._proxy_ssl is None:  # the system store: built once, on first use (~15 ms)
            self._proxy_ssl = ssl.create_default_context()
        return self._proxy_ssl

    async def _tunnel(self, proxy: Proxy, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """CONNECT through the proxy; returns once the tunnel is open."""
        writer.write(encode_connect(self.target, proxy.headers))
        await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # never reads past the head
        except asyncio.IncompleteReadError:
            raise TransportError(f"the proxy closed the connection before answering CONNECT "
                                 f"{self.target}", sent=False) from None
        except asyncio.LimitOverrunError:
            raise TransportError(f"the proxy's answer to CONNECT {self.target} has an oversized "
                                 "head", sent=False) from None
        parser = ResponseParser(connect_request=True)
        try:
            parser.feed(head)
        except ProtocolError as exc:
            raise TransportError(f"the proxy's answer to CONNECT {self.target} is not HTTP: {exc}",
                                 sent=False) from exc
        answer = parser.head()
        if 200 <= answer.status < 300:
            return
        message = await _refusal_message(reader, parser)
        raise TransportError(f"the proxy refused CONNECT {self.target}: {answer.status} "
                             f"{answer.reason}{': ' + message if message else ''}", sent=False)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Refuse new connections and close the idle ones; open streams and upgraded
        connections end with their owners."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        if idle:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.gather(*(connection.closed() for connection in idle))


async def _refusal_message(reader: asyncio.StreamReader, parser: ResponseParser) -> str:
    """The start of a refusal's body (a proxy says why there), read briefly and best-effort."""
    body = bytearray(parser.take_body())
    with contextlib.suppress(TimeoutError, OSError, ssl.SSLError, ProtocolError):
        async with asyncio.timeout(PROXY_MESSAGE_WAIT_S):
            while not parser.complete and len(body) < PROXY_MESSAGE_BYTES:
                data = await reader.read(PROXY_MESSAGE_BYTES)
                if not data:
                    parser.feed_eof()
                else:
                    parser.feed(data)
                body += parser.take_body()
    text = body[:300].decode("utf-8", errors="replace")
    return " ".join(text.split())


async def _send(connection: _Connection, payload: bytes) -> None:
    try:
        connection.writer.write(payload)
        await connection.writer.drain()
    except (OSError, ssl.SSLError, RuntimeError) as exc:
        raise TransportError(f"sending: {_describe(exc)}", sent=True) from exc


async def _receive(connection: _Connection, parser: ResponseParser) -> Answer | None:
    """Read once into `parser`; the answer when that completed it."""
    try:
        data = await connection.reader.read(READ_CHUNK)
    except (OSError, ssl.SSLError) as exc:
        raise TransportError(f"reading: {_describe(exc)}", sent=True,
                             answered=parser.received_any) from exc
    try:
        return parser.feed(data) if data else parser.feed_eof()
    except IncompleteMessage as exc:
        raise TransportError(str(exc), sent=True, answered=exc.received_any) from exc
    except ProtocolError as exc:
        raise TransportError(f"not an HTTP/1.1 answer: {exc}", sent=True, answered=True) from exc


class StreamedAnswer:
    """An answer whose body is read as it arrives (watches, logs). Close it when done: the
    connection goes back to the pool only when the body was read to its end."""

    def __init__(self, head: Answer, pool: ConnectionPool, connection: _Connection,
                 parser: ResponseParser) -> None:
        self.status = head.status
        self.reason = head.reason
        self.headers = head.headers
        self.raw_fields = head.raw_fields
        self._pool = pool
        self._connection: _Connection | None = connection
        self._parser = parser

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """Every header as received, repeated names included."""
        return field_items(self.raw_fields)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes (transfer coding removed) until the body ends."""
        parser = self._parser
        while True:
            piece = parser.take_body()
            if piece:
                yield piece
            if parser.complete or self._connection is None:
                return
            await _receive(self._connection, parser)  # what it completes is taken above

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    def take_connection(self) -> RawConnection:
        """After a `101`: the connection, no longer HTTP, with any bytes that came with the
        101. It keeps its pool slot until it is closed."""
        if self.status != 101 or self._connection is None:
            raise RuntimeError("only an open 101 answer has a connection to take")
        connection, self._connection = self._connection, None
        return RawConnection(connection.reader, connection.writer, self._parser.take_leftover(),
                             self._pool._slots.release)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        parser = self._parser
        self._pool._finish(connection, parser.complete and parser.head().keep_alive
                           and not parser.leftover and self.status != 101)
        self._pool._slots.release()


class RawConnection:
    """A connection's bytes both ways after a `101` (exec, attach, port-forward); failures are
    `TransportError`. There is no half-close: TLS and tunnels cannot end one direction alone."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, early: bytes,
                 release: Callable[[], None]) -> None:
        self._reader = reader
        self._writer = writer
        self._early = early
        self._release: Callable[[], None] | None = release

    async def read(self, max_bytes: int = READ_CHUNK) -> bytes:
        """Up to `max_bytes`; b"" at EOF."""
        if self._early:
            piece, self._early = self._early[:max_bytes], self._early[max_bytes:]
            return piece
        try:
            return await self._reader.read(max_bytes)
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"reading: {_describe(exc)}", sent=True, answered=True) from exc

    async def write(self, data: bytes) -> None:
        if not data:
            return
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (OSError, ssl.SSLError, RuntimeError) as exc:
            raise TransportError(f"sending: {_describe(exc)}", sent=True, answered=True) from exc

    async def aclose(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        self._writer.close()
        release()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, RuntimeError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._writer.wait_closed()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
