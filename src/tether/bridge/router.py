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

A developer counts as there while a connection of theirs is open here (parked, or carrying
requests). A request for a route whose developer is not (their client stopped or was killed, the
route was just left, or has not parked yet) goes to the original pods like a request without
the header, rather than failing until the next look at the sessions; so does a request for a
route its developer is leaving (`routing.encode_leave`: the client says so before closing, and
the router hands out none of its parked connections from then on).
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
from tether.net.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SNIFF_TIMEOUT_S = 1.0  # a client that says nothing first is a server-speaks-first protocol
PARK_WAIT_S = 10.0
MAX_PARKED = 64
READ = 64 * 1024
LINGER_S = 2.0  # how long a refused client may still send before the close
LINGER_BYTES = 1 << 20
DIAL_TIMEOUT_S = 10.0
LEAVE_HOLD_S = 15.0  # after a leave, parks for the route are refused this long
PRESENCE_CHECK_S = 0.1  # while waiting for a busy developer's next park

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class NoRoute(Exception):
    """The destination cannot be reached now (no original endpoint, no parked connection)."""


@dataclass
class Route:
    digest: str
    take_all: bool = False
    parked: deque[Stream] = field(default_factory=deque)
    handed: list[Stream] = field(default_factory=list)  # taken by requests, maybe still open
    busy: set[asyncio.StreamWriter] = field(default_factory=set)  # of `handed`: in a request or a splice
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    leaving: bool = False  # the developer said they are going: no more requests for them
    left_at: float = 0.0
    requests: int = 0
    connections: int = 0

    def present(self) -> bool:
        """Whether the developer is still here: a connection of theirs is open (EOF is seen on
        an idle connection too: its transport keeps reading)."""
        if self.leaving:
            return False
        if any(not _open(s) for s in self.parked):
            kept = deque(s for s in self.parked if _open(s))
            for stream in self.parked:
                if stream not in kept:
                    _close(stream[1])
            self.parked = kept
        self.handed[:] = [s for s in self.handed if _open(s)]
        return bool(self.parked or self.handed)

    def drop_parked(self) -> None:
        for _, writer in self.parked:
            _close(writer)
        self.parked.clear()
        self.arrived.set()  # waiters look again (and find the developer gone)

    def drop_idle(self) -> None:
        """Close the handed connections kept between a client's requests (the developer's side
        then finishes at once); those in a request or a splice close when it ends."""
        for _, writer in self.handed:
            if writer not in self.busy:
                _close(writer)


def _open(stream: Stream) -> bool:
    return not stream[0].at_eof() and not stream[1].is_closing()


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
        self.releasing: dict[str, Route] = {}  # dropped routes with requests still handed there
        self.hosts: dict[str, str] = {}  # `--ingress` subdomain hosts -> route
        self._next = itertools.count()
        self._servers: list[asyncio.AbstractServer] = []
        self.original_requests = 0

    # configuration ---------------------------------------------------------------------------

    def set_routes(self, wanted: Mapping[str, tuple[str, bool]]) -> None:
        """Routes as the session objects say: name -> (token digest, takes all traffic)."""
        for name in list(self.routes):
            if name not in wanted or wanted[name][0] != self.routes[name].digest:
                gone = self.routes.pop(name)
                gone.leaving = True  # its requests in progress close their connections when done
                gone.drop_parked()
                gone.drop_idle()
                self.releasing[name] = gone
        for name, (digest, take_all) in wanted.items():
            route = self.routes.setdefault(name, Route(digest))
            route.take_all = take_all
        for name in [n for n, route in self.releasing.items() if n in self.routes or not route.busy]:
            del self.releasing[name]

    def _route_of(self, name: str) -> Route | None:
        """The route a connection was handed for, also once dropped while requests were on it."""
        return self.routes.get(name) or self.releasing.get(name)

    def released(self, name: str) -> bool:
        """Whether no request is handed to `name`'s developer any more: the route is gone and its
        last request in progress has finished (its connections are then closed by the router)."""
        if name in self.routes:
            return False
        route = self.releasing.get(name)
        if route is not None and route.busy:
            return False
        self.releasing.pop(name, None)
        return True

    def counts(self) -> dict[str, int]:
        return {name: route.requests for name, route in self.routes.items()}

    def _all_route(self) -> str | None:
        return next((name for name, route in sorted(self.routes.items()) if route.take_all), None)

    def _routable(self) -> frozenset[str]:
        """Routes a request may ask for: those whose developer has not said they are leaving."""
        return frozenset(name for name, route in self.routes.items() if not route.leaving)

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
            route.drop_parked()

    async def _park(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
            if line.startswith(routing.LEAVE_MAGIC.encode()):
                await self._leave(line, writer)
                return
            park = routing.parse_park(line)
            why = routing.authorize_park(park, {n: r.digest for n, r in self.routes.items()})
            route = self.routes.get(park.route)
            if why is None and route is not None and len(route.parked) >= MAX_PARKED:
                why = "too many parked connections"
            if why is None and route is not None and route.leaving:
                # a park sent before its developer left arrives after: refused, or requests would
                # be handed to a client that is stopping; a client back later resumes
                if asyncio.get_running_loop().time() - route.left_at < LEAVE_HOLD_S:
                    why = f"route {park.route!r} is leaving"
                else:
                    route.leaving = False
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
        if self.routes.get(park.route) is not route or route.leaving:  # ended meanwhile
            _close(writer)
            return
        route.parked.append((reader, writer))
        route.arrived.set()

    async def _leave(self, line: bytes, writer: asyncio.StreamWriter) -> None:
        """The developer is going: none of their parked connections is handed out from now on,
        so none is closed under a request; their requests go to the original pods."""
        try:
            park = routing.parse_leave(line)
            route = self.routes.get(park.route)
            # the same check as a park: only the holder of this route's token releases it
            why = routing.authorize_park(park, {n: r.digest for n, r in self.routes.items()})
        except ValueError as exc:
            why, route = str(exc), None
        if why is None and route is not None:
            route.leaving = True
            route.left_at = asyncio.get_running_loop().time()
            route.drop_parked()
            route.drop_idle()
            log.info("route %s: its developer is leaving", park.route)
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(b"OK\n" if why is None else f"ERR {why}\n".encode())
            await writer.drain()
        _close(writer)

    async def _developer(self, name: str, peer: str) -> Stream | None:
        """A connection to the developer of route `name`, or None when they are not here (the
        caller sends the request to the original pods). `NoRoute` when they are, but every
        connection of theirs stayed busy for `PARK_WAIT_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PARK_WAIT_S
        while True:
            route = self.routes.get(name)
            if route is None or not route.present():
                return None
            while route.parked:
                reader, writer = route.parked.popleft()
                if not _open((reader, writer)):
                    _close(writer)
                    continue
                # busy from the moment it is taken: the route may be dropped while the GO is
                # written, and "released" must wait for this request too
                route.busy.add(writer)
                try:
                    writer.write(routing.encode_go(peer))
                    await writer.drain()
                except (ConnectionError, OSError):
                    route.busy.discard(writer)
                    _close(writer)
                    continue
                route.handed.append((reader, writer))
                return reader, writer
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NoRoute(f"the developer of route {name} has no free connection parked here")
            route.arrived.clear()
            # woken by a new park or the route's end; else look again whether they are still here
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, PRESENCE_CHECK_S)):
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
                developer = await self._developer(take_all, peer)
                route = self.routes.get(take_all)
                if developer is not None and route is not None:
                    route.connections += 1
                    route.requests += 1
                    route.busy.add(developer[1])
                    try:
                        await splice((reader, writer), developer)
                    finally:
                        route.busy.discard(developer[1])
                    return
                # the developer is gone: the originals take the connection, whatever it speaks
                self.original_requests += 1
                await splice((reader, writer), await self._original(port))
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
            destination = routing.decide(routing.request_route(fields), self._routable(), authority, self.hosts)
        except (ValueError, TimeoutError, hpack.HPACKError) as exc:
            log.info("h2c connection from %s: %s; sent to the original pods", peer, exc)
        upstream = await self._developer(destination.route, peer) if destination.developer else None
        route = self._route_of(destination.route) if upstream is not None else None
        if upstream is not None and route is not None:
            route.requests += 1
            route.busy.add(upstream[1])
        else:
            route = None
            self.original_requests += 1
            upstream = await self._original(port)
        try:
            await splice((reader, writer), upstream, bytes(buffer))
        finally:
            if route is not None:
                route.busy.discard(upstream[1])

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int,
                    buffer: bytearray, peer: str) -> None:
        upstreams: dict[routing.Destination, Stream] = {}
        try:
            while True:
                while (end := buffer.find(b"\r\n\r\n")) < 0:
                    if len(buffer) > http1.MAX_HEAD_BYTES:
                        await _answer(writer, 431, "request head too large")
                        await _linger(reader, writer)
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
                destination = routing.decide(routing.request_route(head.fields), self._routable(),
                                             head.headers.get("host"), self.hosts)
                try:
                    upstream = await self._upstream(upstreams, destination, port, peer)
                    if upstream is None:  # the developer is not here: as a request without the header
                        destination = routing.ORIGINAL
                        upstream = await self._upstream(upstreams, destination, port, peer)
                except NoRoute as exc:
                    await _answer(writer, 502 if destination.developer else 503, str(exc))
                    return
                if upstream is None:
                    return
                route = self._route_of(destination.route) if destination.developer else None
                if route is not None:
                    route.requests += 1
                else:
                    self.original_requests += 1
                if route is not None:
                    route.busy.add(upstream[1])
                try:
                    outcome = await self._exchange(head, raw_head, body, buffer, reader, writer, upstream)
                    if outcome == "upgraded":
                        await splice((reader, writer), upstream, bytes(buffer))
                        return
                finally:
                    if route is not None:
                        route.busy.discard(upstream[1])
                if outcome == "close":
                    return
                if outcome == "upstream-done" or (route is not None and route.leaving):
                    _close(upstream[1])
                    del upstreams[destination]
        finally:
            for _, up_writer in upstreams.values():
                _close(up_writer)

    async def _upstream(self, upstreams: dict[routing.Destination, Stream], destination: routing.Destination,
                        port: int, peer: str) -> Stream | None:
        """The connection a request for `destination` goes on: the one this client connection
        used last for it, else a new one (None: the developer is not here)."""
        upstream = upstreams.get(destination)
        if upstream is not None and _open(upstream):
            return upstream
        if upstream is not None:
            _close(upstream[1])
            del upstreams[destination]
        fresh = await (self._developer(destination.route, peer) if destination.developer else self._original(port))
        if fresh is not None:
            upstreams[destination] = fresh
        return fresh

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

        # most requests have no body: no task for one (a task per request costs a loop round)
        sender = asyncio.create_task(send_body()) if body is not None else None
        if sender is None:
            await up_writer.drain()
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
                if sender is not None:
                    await sender
                return "upgraded"
            if sender is not None:
                if not sender.done():  # answered before the body was sent (an early error)
                    return "close"
                await sender
            if not answer.keep_alive or not head.keep_alive:
                return "close"
            return "upstream-done" if parser.leftover else "keep"
        except http1.ProtocolError:
            return "close"
        finally:
            if sender is not None and not sender.done():
                await cancel_and_wait(sender)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read (and drop) what the client is still sending before closing, as nginx's lingering
    close does: closing a socket with unread input sends a reset, which can destroy the answer
    before the client has read it. Bounded in time and bytes."""
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            left = LINGER_BYTES
            while left > 0 and (data := await reader.read(READ)):
                left -= len(data)


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reasons = {400: "Bad Request", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
               503: "Service Unavailable"}
    body = f"tether router: {message}\n".encode()
    writer.write(f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()
