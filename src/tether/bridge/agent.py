"""The in-cluster bridge agent: dials for developers, and carries cluster traffic back to them.

`tether bridge agent` runs this in a pod of the tether image. It listens on two ports:

- the **mux port** (`--listen`, default 7700): developers' `MuxChannel`s connect here (through
  the API server's port-forward, the hub's cluster proxy, or directly) and speak `bridge.mux`.
  TCP and UDP opens are dialled from the pod; a client registers reverse routes with a control
  request (`{"op": "register", "route": NAME, "key": SECRET}`); a dropped client's routes stay
  reserved for its key for `ROUTE_RECLAIM_S`.
- the **control port** (`--control`, default 7701), plain HTTP for components in the cluster:
  `GET /healthz` (readiness), `GET /routes` (registered routes, JSON), and
  `POST /v1/reverse/ROUTE?port=N&peer=ADDR` with `Connection: Upgrade`, `Upgrade: tether-reverse`,
  answered `101` and then carrying raw bytes to the developer who registered ROUTE (`404` if
  nobody has, `502` if their end refused). Only loopback callers (a router in the agent's own
  pod) may list routes or open reverse streams: `control_allowed`.

A router in the same process uses `ReverseRoutes.open(route, port, peer)` instead, which returns
the `ByteStream` directly. Dial destinations are checked first: nothing resolves to the agent's
own ports on its own addresses (a loop through the agent), and unspecified addresses are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tether import __version__
from tether.bridge.channel import (
    DEFAULT_DIAL_TIMEOUT_S,
    BridgeError,
    ByteStream,
    ChannelLost,
    DialFailed,
    splice,
    stream_from_asyncio,
)
from tether.bridge.muxconn import MuxConnection, MuxDatagrams, OpenRequest, StreamReset
from tether.net import dnsclient, dnswire, http1
from tether.net.httpserver import HttpServer, Request, Response, UpgradeResponse

log = logging.getLogger(__name__)

DEFAULT_MUX_PORT = 7700
DEFAULT_CONTROL_PORT = 7701
REVERSE_UPGRADE = "tether-reverse"
UDP_IDLE_S = 120.0
ROUTE_NAME_MAX = 253
ROUTE_RECLAIM_S = 60.0  # how long a dropped client's routes stay reserved for it


class RouteNotFound(BridgeError):
    """No client has registered this route (or its client is gone)."""


class RouteTaken(BridgeError):
    """Another client holds this route."""


# ---- destination checks (pure) ------------------------------------------------------------------

def refusal(addresses: Iterable[str], port: int, own_ports: Iterable[int],
            own_addresses: Iterable[str]) -> str | None:
    """Why dialling `port` on these resolved addresses must be refused, or None if it may go ahead."""
    own = {str(ipaddress.ip_address(a)) for a in own_addresses}
    ports = set(own_ports)
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if address.is_unspecified:
            return f"{address} is not a destination"
        if port in ports and (address.is_loopback or str(address) in own):
            return f"{address}:{port} is the bridge agent itself"
    return None


def listen_hosts(host: str, pod_ip: str) -> tuple[str, bool]:
    """Where the mux port listens: (host, also on 127.0.0.1?).

    An explicit host is used as given. Otherwise, where the kubelet gave the pod an address in
    `POD_IP` (local clusters do for every pod; the Deployment tether makes does not ask for it),
    pods may share one network, so the agent takes its own address, and loopback too when free,
    for a kubelet whose port-forward dials localhost. With no `POD_IP` (a real cluster), loopback
    only: the mux port dials anything for whoever connects, so only the kubelet's port-forward
    (which the API server authorises) may reach it, not every pod in the cluster.
    """
    if host:
        return host, False
    if pod_ip:
        return pod_ip, True
    return "127.0.0.1", False


def valid_route(route: str) -> bool:
    return 0 < len(route) <= ROUTE_NAME_MAX and all(c.isalnum() or c in "-._" for c in route)


# ---- reverse routes -----------------------------------------------------------------------------

@dataclass
class _Route:
    connection: MuxConnection
    since: float
    key: str = ""  # the registering client's secret: only it may take the route back
    opened: int = 0


class ReverseRoutes:
    """Which developer connection serves each route; opens reverse streams to it.

    A client registers with a secret `key` of its own. When its connection drops, the route
    stays reserved for `reclaim_s`: only a registration with the same key (the same client,
    reconnected) takes it in that time, so nobody else can grab a route name, and with it the
    traffic meant for that developer, while they reconnect."""

    def __init__(self, *, reclaim_s: float = ROUTE_RECLAIM_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._routes: dict[str, _Route] = {}
        self._reserved: dict[str, tuple[str, float]] = {}  # route -> (key, reserved until)
        self._reclaim_s = reclaim_s
        self._clock = clock

    def register(self, route: str, connection: MuxConnection, key: str = "") -> None:
        if not valid_route(route):
            raise BridgeError(f"route name {route!r} is not valid (letters, digits, '-', '.', '_')")
        current = self._routes.get(route)
        if current is not None and current.connection is not connection and not current.connection.lost:
            raise RouteTaken(f"route {route!r} is served by another client")
        held = (current.key, 0.0) if current is not None and current.connection.lost else self._reserved.get(route)
        if held is not None and held[0] and (current is not None or self._clock() < held[1]) \
                and not hmac.compare_digest(held[0].encode(), key.encode()):
            raise RouteTaken(f"route {route!r} is kept for its client, which is reconnecting")
        self._reserved.pop(route, None)
        self._routes[route] = _Route(connection, time.time(), key)

    def unregister(self, route: str, connection: MuxConnection) -> None:
        current = self._routes.get(route)
        if current is not None and current.connection is connection:
            del self._routes[route]

    def drop_connection(self, connection: MuxConnection) -> None:
        now = self._clock()
        for route in [r for r, entry in self._routes.items() if entry.connection is connection]:
            entry = self._routes.pop(route)
            if entry.key:
                self._reserved[route] = (entry.key, now + self._reclaim_s)
        for route in [r for r, (_, until) in self._reserved.items() if until <= now]:
            del self._reserved[route]

    def describe(self) -> list[dict[str, Any]]:
        return [{"route": route, "client": entry.connection.name, "since": entry.since, "opened": entry.opened}
                for route, entry in sorted(self._routes.items()) if not entry.connection.lost]

    def __contains__(self, route: str) -> bool:
        entry = self._routes.get(route)
        return entry is not None and not entry.connection.lost

    async def open(self, route: str, port: int, peer: str = "", *,
                   timeout_s: float = DEFAULT_DIAL_TIMEOUT_S) -> ByteStream:
        """A stream to the developer serving `route`, for their local `port`.

        `RouteNotFound` if no live client serves it; `DialFailed` if the client refused (nothing
        listens on its port); `ChannelLost` if its connection dropped meanwhile.
        """
        entry = self._routes.get(route)
        if entry is None or entry.connection.lost:
            raise RouteNotFound(f"no client serves route {route!r}")
        stream = await entry.connection.open_reverse(route, port, peer, timeout_s=timeout_s)
        entry.opened += 1
        return stream


# ---- the agent ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class AgentConfig:
    host: str = ""  # "" = every address
    port: int = DEFAULT_MUX_PORT
    control_port: int = DEFAULT_CONTROL_PORT
    dial_timeout_s: float = DEFAULT_DIAL_TIMEOUT_S
    own_addresses: tuple[str, ...] = ()
    # Asked for names the pod's own resolver does not know: where pods share the machine's
    # resolver (rootless local clusters), cluster names resolve only here.
    cluster_dns: tuple[tuple[str, int], ...] = ()


@dataclass
class AgentStats:
    connections: int = 0
    streams: int = 0
    refused: int = 0
    failed_dials: int = 0


def _own_addresses(config: AgentConfig) -> tuple[str, ...]:
    found = set(config.own_addresses)
    for candidate in (config.host, os.environ.get("POD_IP", "")):
        with contextlib.suppress(ValueError):
            found.add(str(ipaddress.ip_address(candidate)))
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(str(info[4][0]))
    return tuple(sorted(found))


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.sink: MuxDatagrams | None = None  # set once the open is accepted; earlier replies drop
        self.last = time.monotonic()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.last = time.monotonic()
        if self.sink is not None:
            with contextlib.suppress(BridgeError):
                self.sink.send_nowait(data)


@dataclass
class BridgeAgent:
    config: AgentConfig = field(default_factory=AgentConfig)
    routes: ReverseRoutes = field(default_factory=ReverseRoutes)
    stats: AgentStats = field(default_factory=AgentStats, init=False)
    _servers: list[asyncio.Server] = field(default_factory=list, init=False)
    _control: HttpServer | None = field(default=None, init=False)
    _connections: set[MuxConnection] = field(default_factory=set, init=False)
    _own: tuple[str, ...] = field(default=(), init=False)

    @property
    def port(self) -> int:
        if not self._servers or not self._servers[0].sockets:
            return self.config.port
        return int(self._servers[0].sockets[0].getsockname()[1])

    @property
    def control_port(self) -> int:
        return self._control.port if self._control is not None else self.config.control_port

    async def start(self) -> None:
        self._own = _own_addresses(self.config)
        pod_ip = os.environ.get("POD_IP", "")
        host, loopback_too = listen_hosts(self.config.host, pod_ip)
        self._servers.append(await asyncio.start_server(self._on_mux_connection, host,
                                                        self.config.port, reuse_address=True))
        if loopback_too:
            try:
                self._servers.append(await asyncio.start_server(self._on_mux_connection, "127.0.0.1",
                                                                self.port, reuse_address=True))
            except OSError as exc:  # the pods share one network: another pod holds it, and nobody needs it
                log.info("not listening on 127.0.0.1:%d too: %s", self.port, exc)
        # the control port answers the kubelet's probes and routers in other pods: not loopback only
        self._control = HttpServer(self._on_control_request, host=self.config.host or pod_ip or "0.0.0.0",
                                   port=self.config.control_port)
        await self._control.start()
        log.info("bridge agent %s: mux on %s:%d, control on %d", __version__, host,
                 self.port, self.control_port)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, tell clients we are going, give open streams `grace_s`, then close."""
        for server in self._servers:
            server.close()
        # GOAWAY makes clients drop this connection and reconnect (to the pod replacing this
        # one); give them `grace_s` to do so before closing what is left.
        for connection in list(self._connections):
            connection.session.goaway("agent shutting down")
            connection._kick()
        waits = [asyncio.ensure_future(c.wait_lost()) for c in self._connections]
        if waits:
            await asyncio.wait(waits, timeout=grace_s)
            for waiting in waits:
                waiting.cancel()
        for connection in list(self._connections):
            await connection.aclose("agent shutting down")
        if self._control is not None:
            await self._control.close(grace_s=1.0)

    # -- mux side

    async def _on_mux_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        name = f"client {peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "client"
        connection = MuxConnection(stream_from_asyncio(reader, writer), "agent", on_open=self._on_open,
                                   on_control=self._on_mux_control, name=name,
                                   hello={"agent": __version__, "pod": os.environ.get("POD_NAME", "")})
        self.stats.connections += 1
        self._connections.add(connection)
        try:
            await connection.start()
            await connection.wait_lost()
            log.info("%s: %s", name, connection.lost_reason)
        except ChannelLost as exc:
            log.info("%s", exc)
        finally:
            self.routes.drop_connection(connection)
            self._connections.discard(connection)
            await connection.aclose()

    async def _on_mux_control(self, connection: MuxConnection, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        route = str(message.get("route", ""))
        if op == "register":
            self.routes.register(route, connection, str(message.get("key", "")))
            log.info("%s registered route %s", connection.name, route)
            return {"ok": True}
        if op == "unregister":
            self.routes.unregister(route, connection)
            return {"ok": True}
        if op == "status":
            return {"ok": True, "version": __version__, "routes": self.routes.describe(),
                    "connections": len(self._connections), "streams": self.stats.streams}
        return {"ok": False, "error": f"unknown control operation {op!r}"}

    async def _resolve(self, host: str, port: int, kind: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=kind)
        except (OSError, UnicodeError) as exc:
            found = await self._ask_cluster_dns(host)
            if not found:
                raise DialFailed(f"cannot resolve {host}: {exc}") from None
            return found
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def _ask_cluster_dns(self, host: str) -> list[str]:
        if not self.config.cluster_dns or len(host) > 253:
            return []
        name = host.rstrip(".")
        candidates = [name] if name.count(".") >= 4 else [name, f"{name}.svc.cluster.local",
                                                          f"{name}.cluster.local"]
        for candidate in candidates:
            try:
                query = dnswire.make_query(int.from_bytes(os.urandom(2), "big"), candidate, dnswire.TYPE_A)
                reply = dnswire.parse_message(await dnsclient.exchange(query, self.config.cluster_dns))
            except (dnsclient.DnsClientError, ValueError):
                continue
            found = [r.rdata.address for r in reply.answers if isinstance(r.rdata, dnswire.A)]
            if found:
                return found
        return []

    async def _checked(self, host: str, port: int, kind: int) -> list[str]:
        addresses = await self._resolve(host, port, kind)
        reason = refusal(addresses, port, (self.port, self.control_port), self._own)
        if reason is not None:
            self.stats.refused += 1
            raise DialFailed(f"refused: {reason}")
        return addresses

    async def _on_open(self, request: OpenRequest) -> None:
        opened = request.opened
        self.stats.streams += 1
        if opened.kind == "tcp":
            await self._open_tcp(request)
        elif opened.kind == "udp":
            await self._open_udp(request)
        else:
            request.reject(f"the agent does not accept {opened.kind} streams")

    async def _open_tcp(self, request: OpenRequest) -> None:
        host, port = request.opened.host, request.opened.port
        try:
            addresses = await self._checked(host, port, socket.SOCK_STREAM)
            target = await self._dial(addresses, port)
        except DialFailed as exc:
            self.stats.failed_dials += 1
            request.reject(str(exc))
            return
        try:
            await splice(request.accept(), target)
        except* (BridgeError, OSError):
            pass  # one side went away mid-stream (the client's connection dropped): the stream is over

    async def _dial(self, addresses: list[str], port: int) -> ByteStream:
        last: BaseException | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(self.config.dial_timeout_s):
                    reader, writer = await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return stream_from_asyncio(reader, writer)
        raise DialFailed(f"dial {addresses[0] if addresses else '?'}:{port}: {last or 'timed out'}")

    async def _open_udp(self, request: OpenRequest) -> None:
        host, port = request.opened.host, request.opened.port
        loop = asyncio.get_running_loop()
        try:
            addresses = await self._checked(host, port, socket.SOCK_DGRAM)
            transport, protocol = await loop.create_datagram_endpoint(_UdpProtocol, remote_addr=(addresses[0], port))
        except DialFailed as exc:
            self.stats.failed_dials += 1
            request.reject(str(exc))
            return
        except OSError as exc:
            request.reject(f"udp {host}:{port}: {exc}")
            return
        datagrams = request.accept_datagrams()
        protocol.sink = datagrams
        try:
            while True:
                try:
                    async with asyncio.timeout(UDP_IDLE_S):
                        payload = await datagrams.receive()
                except TimeoutError:
                    if time.monotonic() - protocol.last < UDP_IDLE_S:
                        continue
                    break
                transport.sendto(payload)
        except (StreamReset, ChannelLost):
            pass
        finally:
            transport.close()
            await datagrams.aclose()

    # -- control port

    async def _on_control_request(self, request: Request) -> Response | UpgradeResponse:
        if request.method == "GET" and request.path in ("/healthz", "/readyz"):
            return Response(200, b"ok", content_type="text/plain")
        if not control_allowed(_peer_of(request)):
            return _status(403, "Forbidden", "route listing and reverse opens are served to this pod only "
                                             "(a router in the agent's pod)")
        if request.method == "GET" and request.path == "/routes":
            return Response(200, json.dumps({"routes": self.routes.describe()}).encode())
        prefix = "/v1/reverse/"
        if request.method == "POST" and request.path.startswith(prefix):
            return await self._reverse_upgrade(request, request.path[len(prefix):])
        return _status(404, "NotFound", f"no such endpoint: {request.method} {request.path}")

    async def _reverse_upgrade(self, request: Request, route: str) -> Response | UpgradeResponse:
        if request.header("upgrade").lower() != REVERSE_UPGRADE:
            return _status(400, "BadRequest", f"send Connection: Upgrade and Upgrade: {REVERSE_UPGRADE}")
        try:
            port = int(request.param("port"))
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            return _status(400, "BadRequest", "port must be a number between 1 and 65535")
        peer = request.param("peer") or _peer_of(request)
        try:
            stream = await self.routes.open(route, port, peer, timeout_s=self.config.dial_timeout_s)
        except RouteNotFound as exc:
            return _status(404, "NotFound", str(exc))
        except BridgeError as exc:
            return _status(502, "BadGateway", str(exc))

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await splice(stream_from_asyncio(reader, writer), stream)

        async def abandon() -> None:
            await stream.aclose()

        return UpgradeResponse([("Connection", "Upgrade"), ("Upgrade", REVERSE_UPGRADE)], relay, abandon=abandon)


def control_allowed(peer: str) -> bool:
    """Whether a control-port caller may list routes and open reverse streams: only from inside
    the agent's own pod (loopback). The port also answers the kubelet's probes, so it listens on
    the pod IP, where any pod in the cluster could otherwise reach developers' machines."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _peer_of(request: Request) -> str:
    peer = request.writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""


def _status(code: int, reason: str, message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return Response(code, json.dumps(body).encode())


async def dial_reverse(host: str, control_port: int, route: str, port: int, peer: str = "", *,
                       timeout_s: float = DEFAULT_DIAL_TIMEOUT_S) -> ByteStream:
    """From a router in another pod: a stream to the developer serving `route`, through the agent's
    control port (`RouteNotFound` if nobody serves it, `DialFailed` for any other refusal)."""
    target = f"/v1/reverse/{urllib.parse.quote(route, safe='')}?" + urllib.parse.urlencode(
        {"port": str(port), **({"peer": peer} if peer else {})})
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, control_port)
            writer.write(http1.encode_request("POST", target, http1.authority(host, control_port),
                                              [("Connection", "Upgrade"), ("Upgrade", REVERSE_UPGRADE)], b""))
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, _, fields = head[:-4].partition(b"\r\n")
            parts = status_line.split(b" ", 2)
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            if code == 101:
                with contextlib.suppress(OSError):
                    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return stream_from_asyncio(reader, writer)
            length = http1.content_length(http1.parse_fields(fields).get("content-length", "0") or "0")
            body = await reader.readexactly(min(length, 64 * 1024))
            writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        raise DialFailed(f"bridge agent at {host}:{control_port}: {exc or 'timed out'}") from None
    try:
        message = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    if code == 404:
        raise RouteNotFound(message or f"no client serves route {route!r}")
    raise DialFailed(f"bridge agent refused route {route!r} (HTTP {code}): {message}")


async def run_agent(config: AgentConfig, stop: asyncio.Event, *, grace_s: float = 5.0,
                    routes: ReverseRoutes | None = None) -> None:
    """Serve until `stop` is set, then shut down within about `grace_s`."""
    agent = BridgeAgent(config, routes or ReverseRoutes())
    await agent.start()
    try:
        await stop.wait()
    finally:
        await agent.stop(grace_s)
