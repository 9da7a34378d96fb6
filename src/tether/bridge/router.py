"""The routing proxy's data plane: an intercepted Service's connections, request by request.

The router listens on the Service's target ports (the Service's selector points at the router's
pod while intercepted). Each connection is sniffed: HTTP/1.x is read request by request with
`tether.net.http1`, and each request goes where `routing.decide` says (a keep-alive connection
may carry requests for different destinations, in order, each answered before the next is
read); an h2c connection goes whole where its first request goes (its HPACK header block decoded,
then every byte replayed); anything else (TLS, a database protocol, a client that waits for the
server to speak) is spliced whole to an original pod. An `--all` route takes every connection as
is.

Original pods are dialled at their own addresses (the cloned Service's endpoints) rather than
through a Service IP, so the router never loops back into itself. Developers are reached
through connections they parked here ahead of time (`routing.encode_park`): a request for a
route takes one, writes `GO peer`, and the connection then carries the request's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import hpack

from tether.bridge import routing
from tether.net import http1

log = logging.getLogger(__name__)

SNIFF_TIMEOUT_S = 1.0  # a client that says nothing first is a server-speaks-first protocol
PARK_WAIT_S = 10.0
MAX_PARKED = 64
READ = 64 * 1024
DIAL_TIMEOUT_S = 10.0

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class NoRoute(Exception):
    """The destination cannot be reached now (no original endpoint, no parked connection)."""


@dataclass
class Route:
    digest: str
    take_all: bool = False
    parked: deque[Stream] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    requests: int = 0
    connections: int = 0


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(READ):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        _close(writer)


async def splice(a: Stream, b: Stream, first_to_b: bytes = b"") -> None:
    """Copy both ways until both ends finish, passing half-closes."""
    try:
        if first_to_b:
            b[1].write(first_to_b)
            await b[1].drain()
        await asyncio.gather(_pump(a[0], b[1]), _pump(b[0], a[1]))
    except (ConnectionError, OSError):
        pass
    finally:
        _close(a[1])
        _close(b[1])


class Router:
    """Routes connections arriving on `ports` (listen port -> the originals' port to dial)."""

    def __init__(self, ports: Mapping[int, int], originals: Callable[[], Sequence[str]]) -> None:
        self.ports = dict(ports)
        self.originals = originals
        self.routes: dict[str, Route] = {}
        self.hosts: dict[str, str] = {}  # `--ingress` subdomain hosts -> route
        self._next = itertools.count()
        self._servers: list[asyncio.AbstractServer] = []
        self.original_requests = 0

    # configuration ---------------------------------------------------------------------------

    def set_routes(self, wanted: Mapping[str, tuple[str, bool]]) -> None:
        """Routes as the session objects say: name -> (token digest, takes all traffic)."""
        for name in list(self.routes):
            if name not in wanted or wanted[name][0] != self.routes[name].digest:
                route = self.routes.pop(name)
                for _, writer in route.parked:
                    _close(writer)
        for name, (digest, take_all) in wanted.items():
            route = self.routes.setdefault(name, Route(digest))
            route.take_all = take_all

    def counts(self) -> dict[str, int]:
        return {name: route.requests for name, route in self.routes.items()}

    def _all_route(self) -> str | None:
        return next((name for name, route in sorted(self.routes.items()) if route.take_all), None)

    # serving ---------------------------------------------------------------------------------

    async def start(self, host: str, park_port: int) -> None:
        for listen, dial in sorted(self.ports.items()):
            self._servers.append(await asyncio.start_server(functools.partial(self._client, port=dial),
                                                            host, listen))
        self._servers.append(await asyncio.start_server(self._park, host, park_port))

    async def aclose(self) -> None:
        for server in self._servers:
            server.close()
        for route in self.routes.values():
            for _, writer in route.parked:
                _close(writer)

    async def _park(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
            park = routing.parse_park(line)
            why = routing.authorize_park(park, {n: r.digest for n, r in self.routes.items()})
            route = self.routes.get(park.route)
            if why is None and route is not None and len(route.parked) >= MAX_PARKED:
                why = "too many parked connections"
        except (ValueError, TimeoutError, ConnectionError, OSError, asyncio.LimitOverrunError) as exc:
            why = str(exc) or "bad park line"
            route = None
        if why is not None or route is None:
            with contextlib.suppress(Exception):
                writer.write(f"ERR {why}\n".encode())
                await writer.drain()
            _close(writer)
            return
        writer.write(b"OK\n")
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
        route.parked.append((reader, writer))
        route.arrived.set()

    async def _developer(self, name: str, peer: str) -> Stream:
        route = self.routes.get(name)
        if route is None:
            raise NoRoute(f"route {name} is gone")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PARK_WAIT_S
        while True:
            while route.parked:
                reader, writer = route.parked.popleft()
                if reader.at_eof() or writer.is_closing():
                    _close(writer)
                    continue
                try:
                    writer.write(routing.encode_go(peer))
                    await writer.drain()
                except (ConnectionError, OSError):
                    _close(writer)
                    continue
                return reader, writer
            route.arrived.clear()
            remaining = deadline - loop.time()
            if remaining <= 0 or self.routes.get(name) is not route:
                raise NoRoute(f"the developer of route {name} has no connection parked here")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await route.arrived.wait()

    async def _original(self, port: int) -> Stream:
        addresses = list(self.originals())
        if not addresses:
            raise NoRoute("the Service has no ready original pods")
        start = next(self._next)
        last: Exception | None = None
        for i in range(len(addresses)):
            address = addresses[(start + i) % len(addresses)]
            try:
                async with asyncio.timeout(DIAL_TIMEOUT_S):
                    return await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as exc:
                last = exc
        raise NoRoute(f"no original pod answered on port {port}: {last}")

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
        peer_info = writer.get_extra_info("peername")
        peer = f"{peer_info[0]}:{peer_info[1]}" if isinstance(peer_info, tuple) else ""
        try:
            take_all = self._all_route()
            if take_all is not None:
                route = self.routes[take_all]
                route.connections += 1
                route.requests += 1
                await splice((reader, writer), await self._developer(take_all, peer))
                return
            buffer = bytearray()
            kind = routing.NEED_MORE
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SNIFF_TIMEOUT_S):
                    while kind == routing.NEED_MORE:
                        data = await reader.read(READ)
                        if not data:
                            break
                        buffer += data
                        kind = routing.sniff(bytes(buffer[:routing.MAX_REQUEST_LINE + 2]))
            if kind == routing.H2C:
                await self._h2c(reader, writer, port, buffer, peer)
                return
            if kind != routing.HTTP1:
                if kind == routing.NEED_MORE and not buffer and reader.at_eof():
                    return
                await splice((reader, writer), await self._original(port), bytes(buffer))
                return
            await self._http(reader, writer, port, buffer, peer)
        except NoRoute as exc:
            log.info("connection from %s: %s", peer, exc)
        except (ConnectionError, OSError):
            pass
        finally:
            _close(writer)

    async def _h2c(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int,
                   buffer: bytearray, peer: str) -> None:
        """h2c with prior knowledge: the whole connection goes where its first request goes (its
        header block decoded here, then every byte replayed, so the destination's HPACK state
        is the client's). Later requests on the connection follow the first."""
        block: bytes | None = None
        destination = routing.ORIGINAL
        try:
            async with asyncio.timeout(SNIFF_TIMEOUT_S * 5):
                while (block := routing.h2c_first_header_block(bytes(buffer))) is None:
                    data = await reader.read(READ)
                    if not data:
                        return
                    buffer += data
            fields = [(_text(name), _text(value)) for name, value in hpack.Decoder().decode(block, raw=True)]
            authority = next((value for name, value in fields if name == ":authority"), None)
            destination = routing.decide(routing.request_route(fields), frozenset(self.routes), authority, self.hosts)
        except (ValueError, TimeoutError, hpack.HPACKError) as exc:
            log.info("h2c connection from %s: %s; sent to the original pods", peer, exc)
        if destination.developer:
            self.routes[destination.route].requests += 1
            upstream = await self._developer(destination.route, peer)
        else:
            self.original_requests += 1
            upstream = await self._original(port)
        await splice((reader, writer), upstream, bytes(buffer))

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int,
                    buffer: bytearray, peer: str) -> None:
        upstreams: dict[routing.Destination, Stream] = {}
        try:
            while True:
                while (end := buffer.find(b"\r\n\r\n")) < 0:
                    if len(buffer) > http1.MAX_HEAD_BYTES:
                        await _answer(writer, 431, "request head too large")
                        return
                    data = await reader.read(READ)
                    if not data:
                        return
                    buffer += data
                raw_head = bytes(buffer[:end + 4])
                del buffer[:end + 4]
                try:
                    head = http1.parse_request_head(raw_head[:-4])
                    body = http1.request_body(head)
                except http1.ProtocolError as exc:
                    await _answer(writer, 400, f"bad request: {exc}")
                    return
                destination = routing.decide(routing.request_route(head.fields), frozenset(self.routes),
                                             head.headers.get("host"), self.hosts)
                try:
                    upstream = upstreams.get(destination)
                    if upstream is None or upstream[0].at_eof():
                        upstream = upstreams[destination] = await (
                            self._developer(destination.route, peer) if destination.developer
                            else self._original(port))
                except NoRoute as exc:
                    await _answer(writer, 502 if destination.developer else 503, str(exc))
                    return
                if destination.developer:
                    self.routes[destination.route].requests += 1
                else:
                    self.original_requests += 1
                outcome = await self._exchange(head, raw_head, body, buffer, reader, writer, upstream)
                if outcome == "upgraded":
                    await splice((reader, writer), upstream, bytes(buffer))
                    return
                if outcome == "close":
                    return
                if outcome == "upstream-done":
                    _close(upstream[1])
                    del upstreams[destination]
        finally:
            for _, up_writer in upstreams.values():
                _close(up_writer)

    async def _exchange(self, head: http1.RequestHead, raw_head: bytes, body: http1.BodyDecoder | None,
                        buffer: bytearray, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: Stream) -> str:
        """One request forwarded and its answer relayed: 'keep', 'upstream-done', 'close' or
        'upgraded'."""
        up_reader, up_writer = upstream
        up_writer.write(raw_head)

        async def send_body() -> None:
            while body is not None:
                before = bytes(buffer)
                done = body.feed(buffer)
                up_writer.write(before[:len(before) - len(buffer)])
                body.take()
                await up_writer.drain()
                if done:
                    return
                data = await reader.read(READ)
                if not data:
                    raise ConnectionError("client closed inside a request body")
                buffer.extend(data)
            await up_writer.drain()

        sender = asyncio.create_task(send_body())
        try:
            parser = http1.ResponseParser(head_request=head.method == "HEAD",
                                          connect_request=head.method == "CONNECT")
            answer: http1.Answer | None = None
            while answer is None:
                data = await up_reader.read(READ)
                if not data:
                    answer = parser.feed_eof()
                    writer.write(parser.take_leftover())
                    await writer.drain()
                    return "close"
                answer = parser.feed(data)
                parser.take_body()
                writer.write(data)
                await writer.drain()
            if answer.status == 101 or (head.method == "CONNECT" and 200 <= answer.status < 300):
                await sender
                return "upgraded"
            if not sender.done():  # answered before the body was sent (an early error)
                return "close"
            await sender
            if not answer.keep_alive or not head.keep_alive:
                return "close"
            return "upstream-done" if parser.leftover else "keep"
        except http1.ProtocolError:
            return "close"
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(BaseException):
                    await sender


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reasons = {400: "Bad Request", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
               503: "Service Unavailable"}
    body = f"tether router: {message}\n".encode()
    writer.write(f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()
