"""A lean HTTP/1.1 client for the request/response calls of `KubeClient`.

Why not httpx for these: a controller's cost is its API calls, and a profile of the hub under
load spent about 85% of its CPU inside httpx, httpcore and anyio's pure-Python TLS stream
(~2 ms a call), against ~0.3 ms for the same call here. Watches, raw pass-through and upgrades
keep using httpx (`client.py`): they are few and long.

Two parts:
- `ResponseParser`: sans-I/O, bytes in, `Answer` out (status line, headers, a body framed by
  Content-Length, chunked encoding, or the end of the connection; 1xx heads skipped).
- `ConnectionPool`: keep-alive connections to one origin over asyncio streams (TLS by the
  event loop's C-level transport), from a direct TCP connect or a `Dialer`, at most
  `max_connections` at once, idle ones reused newest first and dropped after
  `keepalive_expiry_s`.

Failures are `TransportError` with `sent` saying whether the server may have seen the
request: False only when it was never written (no connection, TLS failed). A request on a
reused connection that the server had already closed (EOF before any answer byte) is tried
once more on a new connection when it is safe to replay (GET/HEAD), as Go's transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

Dialer = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

MAX_HEAD_BYTES = 256 * 1024
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,19}")
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))  # printable ASCII, no space
READ_CHUNK = 256 * 1024
CLOSE_TIMEOUT_S = 2.0
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})


class TransportError(Exception):
    """No complete answer: `sent` is False only when the request certainly never left;
    `answered` when some of the answer had arrived."""

    def __init__(self, message: str, *, sent: bool, answered: bool = False) -> None:
        super().__init__(message)
        self.sent = sent
        self.answered = answered


class ProtocolError(TransportError):
    """The server's bytes are not HTTP/1.1 as we read it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, sent=True, answered=True)


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    body: bytes
    keep_alive: bool

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)


@dataclass
class ResponseParser:
    """Reads one response; `feed` returns the `Answer` once it is complete, else None."""

    head_request: bool = False
    _buffer: bytearray = field(default_factory=bytearray)
    _state: int = _HEAD
    _status: int = 0
    _reason: str = ""
    _headers: dict[str, str] = field(default_factory=dict)
    _keep_alive: bool = True
    _remaining: int = 0
    _body: bytearray = field(default_factory=bytearray)
    received_any: bool = False

    def feed(self, data: bytes) -> Answer | None:
        if data:
            self.received_any = True
            self._buffer += data
        while True:
            if self._state == _HEAD:
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEAD_BYTES:
                        raise ProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                    return None
                head = bytes(self._buffer[:end])
                del self._buffer[:end + 4]
                if self._start(head):
                    continue  # a 1xx: the real answer follows
                if self._state == _DONE:
                    return self._answer()
            elif self._state == _LENGTH:
                if not self._take_remaining():
                    return None
                self._state = _DONE
                return self._answer()
            elif self._state == _CHUNK_SIZE:
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    if len(self._buffer) > 1024:
                        raise ProtocolError("chunk size line too long")
                    return None
                line = bytes(self._buffer[:end]).split(b";", 1)[0].strip()
                del self._buffer[:end + 2]
                if not _HEX.fullmatch(line):
                    raise ProtocolError(f"bad chunk size {line[:20]!r}")
                self._remaining = int(line, 16)
                self._state = _CHUNK_DATA if self._remaining else _TRAILERS
            elif self._state == _CHUNK_DATA:
                if not self._take_remaining():
                    return None
                self._state = _CHUNK_END
            elif self._state == _CHUNK_END:
                if len(self._buffer) < 2:
                    return None
                if self._buffer[:2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                del self._buffer[:2]
                self._state = _CHUNK_SIZE
            elif self._state == _TRAILERS:
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    return None
                del self._buffer[:end + 2]
                if end == 0:  # the empty line that ends the trailers
                    self._state = _DONE
                    return self._answer()
            elif self._state == _UNTIL_CLOSE:
                self._body += self._buffer
                self._buffer.clear()
                return None
            else:
                return None

    def _take_remaining(self) -> bool:
        """Move what has arrived of the `_remaining` body bytes; True once all are there."""
        count = min(len(self._buffer), self._remaining)
        if count:
            self._body += self._buffer[:count]
            del self._buffer[:count]
            self._remaining -= count
        return self._remaining == 0

    @property
    def head_ready(self) -> bool:
        return self._state != _HEAD

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    def head(self) -> Answer:
        """The answer so far, without its body (once `head_ready`)."""
        return Answer(self._status, self._reason, self._headers, b"", self._keep_alive)

    def take_body(self) -> bytes:
        """The body bytes decoded so far and not yet taken (streaming use)."""
        if self._state == _UNTIL_CLOSE and self._buffer:
            self._body += self._buffer
            self._buffer.clear()
        piece = bytes(self._body)
        self._body.clear()
        return piece

    def feed_eof(self) -> Answer:
        """The connection ended: the answer if that completes it, else `TransportError`."""
        if self._state == _UNTIL_CLOSE:
            self._body += self._buffer
            self._buffer.clear()
            self._state = _DONE
            return self._answer()
        raise TransportError("connection closed before the answer was complete"
                             if self.received_any else "connection closed without an answer",
                             sent=True, answered=self.received_any)

    @property
    def leftover(self) -> bool:
        """Bytes after the answer: the connection is out of step and must not be reused."""
        return bool(self._buffer)

    def _start(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        try:
            status = int(parts[1])
        except ValueError:
            raise ProtocolError(f"bad status code {parts[1][:10]!r}") from None
        if 100 <= status < 200 and status != 101:
            return True
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolError(f"bad header line {line[:60]!r}")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        self._status = status
        self._reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self._headers = headers
        connection = headers.get("connection", "").lower()
        self._keep_alive = ("close" not in connection if parts[0] == b"HTTP/1.1"
                            else "keep-alive" in connection)
        if self.head_request or status in (204, 304) or status == 101:
            self._state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
            if "content-length" in headers:
                self._keep_alive = False  # RFC 9112 6.3: framing in doubt, do not reuse
        elif "content-length" in headers:
            # a repeated header arrives joined ("2, 2"): fine when every value agrees
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not _DIGITS.fullmatch(next(iter(values))):
                raise ProtocolError(f"bad Content-Length {headers['content-length'][:20]!r}")
            self._remaining = int(next(iter(values)))
            self._state = _LENGTH
        else:
            self._state = _UNTIL_CLOSE
            self._keep_alive = False
        return False

    def _answer(self) -> Answer:
        return Answer(self._status, self._reason, self._headers, bytes(self._body), self._keep_alive)


def encode_request(method: str, target: str, host: str, headers: Sequence[tuple[str, str]],
                   body: bytes | None) -> bytes:
    """The request head and body. Spaces, control and non-ASCII characters in `target` are
    percent-encoded (UTF-8), so nothing can end the request line early."""
    target = urllib.parse.quote(target, safe=_TARGET_SAFE)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


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
                 dialer: Dialer | None = None, max_connections: int = 256,
                 max_idle: int = 32, keepalive_expiry_s: float = 30.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.authority = host if port == (443 if ssl_context else 80) else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            self.authority = f"[{host}]:{port}"
        self._ssl = ssl_context
        self._dialer = dialer
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
                   body: bytes | None = None) -> StreamedAnswer:
        """Send a request and return once the answer's head is in; the body is read from the
        `StreamedAnswer`, which holds the connection (and a slot) until it is closed."""
        payload = encode_request(method, target, self.authority, headers, body)
        await self._slots.acquire()
        try:
            connection = await self._checkout()
            try:
                parser = await self._start(connection, method, payload)
            except TransportError as exc:
                if not (connection.reused and not exc.answered and method in REPLAYABLE):
                    raise
                # the server had closed this idle connection: once more on a fresh one
                connection = await self._connect()
                parser = await self._start(connection, method, payload)
        except BaseException:
            self._slots.release()
            raise
        return StreamedAnswer(parser.head(), self, connection, parser)

    @staticmethod
    async def _start(connection: _Connection, method: str, payload: bytes) -> ResponseParser:
        """Send, and read until the answer's head is in; the connection is closed on failure."""
        parser = ResponseParser(head_request=method == "HEAD")
        try:
            await _send(connection, payload)
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
                if self._dialer is None:
                    reader, writer = await asyncio.open_connection(
                        self.host, self.port, ssl=self._ssl,
                        server_hostname=self.host if self._ssl else None)
                else:
                    reader, writer = await self._dialer(self.host, self.port)
                    if self._ssl is not None:
                        await writer.start_tls(self._ssl, server_hostname=self.host)
        except TimeoutError:
            raise TransportError(f"connecting to {self.authority} timed out after "
                                 f"{self._connect_timeout_s:.1f}s", sent=False) from None
        except Exception as exc:  # a dialer's own errors mean "not connected", like OSError
            raise TransportError(f"connecting to {self.authority}: {_describe(exc)}", sent=False) from exc
        return _Connection(reader, writer)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        if idle:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.gather(*(connection.closed() for connection in idle))


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
    if not data:
        return parser.feed_eof()
    return parser.feed(data)


class StreamedAnswer:
    """An answer whose body is read as it arrives (watches, logs). Close it when done: the
    connection goes back to the pool only when the body was read to its end."""

    def __init__(self, head: Answer, pool: ConnectionPool, connection: _Connection,
                 parser: ResponseParser) -> None:
        self.status = head.status
        self.reason = head.reason
        self.headers = head.headers
        self._pool = pool
        self._connection: _Connection | None = connection
        self._parser = parser

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

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        parser = self._parser
        self._pool._finish(connection, parser.complete and parser.head().keep_alive
                           and not parser.leftover and self.status != 101)
        self._pool._slots.release()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
