"""A userspace service proxy (kube-proxy's original mode): one TCP listener per Service port.

Each Service's ClusterIP:port is bound directly (in rootless mode ClusterIPs are loopback
addresses, which any process may bind; in netns mode the sockets come from the cluster's fabric,
inside its router namespace) and each NodePort on `node_port_host`. A connection goes
to the next ready endpoint (round-robin, or the client's previous one with ClientIP affinity); a
refused or slow connect tries the next; no endpoint at all resets the client. `plan_routes` is
pure; the component is one TaskGroup holding the sync loop, the accept loops and the relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.local.netns import HostFabric
from tether.local.network import ClusterNetwork
from tether.local.services.allocation import SERVICES, needs_cluster_ip, needs_node_ports
from tether.local.services.endpoints import SERVICE_NAME_LABEL, SLICES
from tether.local.services.watch import start_signals
from tether.local.store import Store
from tether.objects import Obj

log = logging.getLogger(__name__)

SvcKey = tuple[str, str]
Address = tuple[str, int]
DEFAULT_AFFINITY_TIMEOUT_S = 10800.0


@dataclass(frozen=True)
class ProxyConfig:
    connect_timeout_s: float = 2.0
    max_connections: int = 256  # per listener; more are reset
    resync_s: float = 5.0  # also retries listeners that could not bind
    settle_s: float = 0.05  # batch bursts of changes
    close_timeout_s: float = 1.0
    backlog: int = 128
    buffer_bytes: int = 65536
    node_port_host: str = "127.0.0.1"
    max_affinity_entries: int = 10_000
    served_elsewhere: frozenset[str] = frozenset()  # ClusterIPs a component serves itself (kube-dns)


@dataclass(frozen=True)
class Route:
    service: SvcKey
    port_name: str
    backends: tuple[Address, ...]
    affinity_timeout_s: float | None = None  # None: no ClientIP session affinity


def _ready(endpoint: Obj) -> bool:
    ready = (endpoint.get("conditions") or {}).get("ready")
    return ready is None or bool(ready)  # an unset condition means ready (discovery/v1)


def plan_routes(services: Iterable[Obj], slices: Iterable[Obj], *, node_port_host: str = "127.0.0.1") -> dict[Address, Route]:
    """Which listener address routes to which ready endpoints, for every TCP Service port."""
    by_service: dict[SvcKey, list[Obj]] = {}
    for s in slices:
        meta = s.get("metadata") or {}
        name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if name and s.get("addressType", "IPv4") == "IPv4":
            by_service.setdefault((str(meta.get("namespace", "")), str(name)), []).append(s)
    routes: dict[Address, Route] = {}
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        cluster_ip = spec.get("clusterIP")
        if not needs_cluster_ip(spec) or not cluster_ip or cluster_ip == "None":
            continue
        affinity = None
        if spec.get("sessionAffinity") == "ClientIP":
            config = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {})
            affinity = float(config.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT_S)
        for port in spec.get("ports") or []:
            if not isinstance(port, dict) or port.get("protocol", "TCP") != "TCP" or not isinstance(port.get("port"), int):
                continue
            name = str(port.get("name") or "")
            backends: set[Address] = set()
            for s in by_service.get(key, []):
                numbers = [p.get("port") for p in s.get("ports") or []
                           if str(p.get("name") or "") == name and p.get("protocol", "TCP") == "TCP"]
                if not numbers or not isinstance(numbers[0], int):
                    continue
                for endpoint in s.get("endpoints") or []:
                    if _ready(endpoint):
                        backends.update((str(a), numbers[0]) for a in endpoint.get("addresses") or [])
            route = Route(key, name, tuple(sorted(backends)), affinity)
            routes[(str(cluster_ip), port["port"])] = route
            if needs_node_ports(spec) and isinstance(port.get("nodePort"), int):
                routes[(node_port_host, port["nodePort"])] = route
    return routes


def order_backends(route: Route, turn: int, preferred: Address | None) -> list[Address]:
    """Backends to try in order: the affinity choice first, else round-robin from `turn`."""
    backends = list(route.backends)
    if not backends:
        return []
    start = turn % len(backends)
    ordered = backends[start:] + backends[:start]
    if preferred in ordered:
        assert preferred is not None
        ordered.remove(preferred)
        ordered.insert(0, preferred)
    return ordered


def reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as kube-proxy does when a Service has no endpoints."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@dataclass
class Listener:
    address: Address
    sock: socket.socket
    route: Route
    turn: int = 0
    active: int = 0
    affinity: dict[str, tuple[Address, float]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class ServiceProxy:
    def __init__(self, store: Store, config: ProxyConfig | None = None, *,
                 fabric: HostFabric | None = None) -> None:
        self.store = store
        self.config = config or ProxyConfig()
        # Where listeners are made and backends dialled (the host, or the cluster's namespaces).
        self.fabric = fabric or HostFabric(ClusterNetwork.rootless(0))
        self.listeners: dict[Address, Listener] = {}
        self._failed: dict[Address, str] = {}  # address -> why it could not bind (logged once)
        self._changed = asyncio.Event()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                start_signals(group, self.store, (SERVICES, SLICES), self._changed)
                group.create_task(self._sync_loop(group))
        finally:
            for address in list(self.listeners):
                self._close(address)

    async def _sync_loop(self, group: asyncio.TaskGroup) -> None:
        while True:
            self.sync(group)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can drop a cancellation that
            # arrives as the event is set, and the loop would never stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.resync_s):
                    await self._changed.wait()
            await asyncio.sleep(self.config.settle_s)
            self._changed.clear()

    def sync(self, group: asyncio.TaskGroup) -> None:
        routes = plan_routes(self.store.list_objects(SERVICES), self.store.list_objects(SLICES),
                             node_port_host=self.config.node_port_host)
        for address in [a for a in routes if a[0] in self.config.served_elsewhere]:
            del routes[address]
        for address in [a for a in self.listeners if a not in routes]:
            self._close(address)
        for address in [a for a in self._failed if a not in routes]:
            del self._failed[address]
        for address, route in routes.items():
            listener = self.listeners.get(address)
            if listener is not None:
                if listener.route.service != route.service:  # another Service took this address
                    self._close(address)
                else:
                    listener.route = route
                    continue
            sock = self._bind(address)
            if sock is None:
                continue
            listener = Listener(address, sock, route)
            self.listeners[address] = listener
            task = group.create_task(self._accept(group, listener))
            listener.tasks.add(task)
            task.add_done_callback(listener.tasks.discard)

    def _bind(self, address: Address) -> socket.socket | None:
        try:
            sock = self.fabric.socket(socket.AF_INET, socket.SOCK_STREAM)
        except Exception as exc:
            log.warning("service proxy: no socket for %s:%d: %s", address[0], address[1], exc)
            return None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(self.config.backlog)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            why = errno.errorcode.get(exc.errno or 0, str(exc))
            if self._failed.get(address) != why:
                self._failed[address] = why
                log.warning("service proxy: cannot listen on %s:%d (%s); retrying every %.0fs",
                            address[0], address[1], why, self.config.resync_s)
            return None
        self._failed.pop(address, None)
        log.debug("service proxy: listening on %s:%d", *address)
        return sock

    def _close(self, address: Address) -> None:
        listener = self.listeners.pop(address, None)
        if listener is None:
            return
        for task in list(listener.tasks):
            task.cancel()
        listener.sock.close()

    async def _accept(self, group: asyncio.TaskGroup, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listener.sock)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await asyncio.sleep(0.1)
                    continue
                raise
            if listener.active >= self.config.max_connections or not listener.route.backends:
                reset(conn)
                continue
            conn.setblocking(False)
            # Relayed responses often arrive in pieces: without NODELAY the second waits ~40 ms
            # for the client's delayed ACK (asyncio only sets it on IPPROTO_TCP sockets it made).
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            listener.active += 1
            task = group.create_task(self._serve(listener, conn, peer[0]))
            listener.tasks.add(task)
            task.add_done_callback(listener.tasks.discard)

    def _preferred(self, listener: Listener, client: str) -> Address | None:
        if listener.route.affinity_timeout_s is None:
            return None
        entry = listener.affinity.get(client)
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def _remember(self, listener: Listener, client: str, backend: Address) -> None:
        timeout = listener.route.affinity_timeout_s
        if timeout is None:
            return
        now = time.monotonic()
        if len(listener.affinity) >= self.config.max_affinity_entries:
            for ip in [ip for ip, (_, due) in listener.affinity.items() if due < now]:
                del listener.affinity[ip]
            if len(listener.affinity) >= self.config.max_affinity_entries:
                listener.affinity.pop(next(iter(listener.affinity)))
        listener.affinity[client] = (backend, now + timeout)

    async def _connect(self, listener: Listener, client: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        ordered = order_backends(listener.route, listener.turn, self._preferred(listener, client))
        listener.turn += 1
        for backend in ordered:
            try:
                streams = await self.fabric.open_connection(*backend, timeout_s=self.config.connect_timeout_s)
            except (OSError, TimeoutError) as exc:
                log.debug("service proxy: %s:%d -> %s:%d failed: %s", *listener.address, *backend, exc)
                continue
            self._remember(listener, client, backend)
            return streams
        return None

    async def _serve(self, listener: Listener, conn: socket.socket, client: str) -> None:
        upstream: asyncio.StreamWriter | None = None
        downstream: asyncio.StreamWriter | None = None
        try:
            connected = await self._connect(listener, client)
            if connected is None:
                reset(conn)
                return
            up_reader, upstream = connected
            down_reader, downstream = await asyncio.open_connection(sock=conn)
            async with asyncio.TaskGroup() as relay:
                relay.create_task(self._pipe(down_reader, upstream, downstream))
                relay.create_task(self._pipe(up_reader, downstream, upstream))
        finally:
            listener.active -= 1
            for writer in (upstream, downstream):
                if writer is not None:
                    writer.close()
            if downstream is None:
                conn.close()
            for writer in (upstream, downstream):
                if writer is not None:
                    with contextlib.suppress(OSError, TimeoutError):
                        await asyncio.wait_for(writer.wait_closed(), self.config.close_timeout_s)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    other: asyncio.StreamWriter) -> None:
        """Copy until EOF, then half-close the far side; an error aborts both directions."""
        try:
            while data := await reader.read(self.config.buffer_bytes):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            writer.transport.abort()
            other.transport.abort()
