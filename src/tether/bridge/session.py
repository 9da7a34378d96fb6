"""A `tether connect` session: every Service of the chosen namespaces on a local address.

`ConnectSession.run()` watches Services (one informer per cluster and namespace), and after each
change reconciles: listeners for new Services (`mapping.allocate` picks the address), listeners
of removed or changed ones closed, then the hosts-file block, the local DNS table and the state
file rewritten to match. It runs until cancelled and undoes all of it on the way out (also when
a step fails), so a foreground session ended by Ctrl-C or SIGTERM leaves nothing behind; a
session killed with SIGKILL is cleaned by the next `connect` or `quit` from its state file.

Linux routes every 127.0.0.0/8 address to the loopback device, so listening on 127.1.x.y needs no
address to be added (and the addresses answer ping). Binding a Service port below 1024 needs
root (or a lower `net.ipv4.ip_unprivileged_port_start`); without it the port is mapped to a free
one on the same address and the announcement says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.bridge import hostsfile, routes, sessionstate
from tether.bridge.channel import BridgeError, ClusterChannel
from tether.bridge.envresolve import ServiceAddress
from tether.bridge.forward import BindFailed, Counters, Listener
from tether.bridge.localdns import LocalDns, Table, Zone
from tether.bridge.mapping import (
    Allocation,
    Naming,
    PortMap,
    ServiceInfo,
    ServiceKey,
    allocate,
    host_names,
    mark_unusable,
    skipped_reason,
)
from tether.kube import Forbidden, Informer, KubeClient, KubeError
from tether.net.daemon import alive

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 60.0
STATE_TICK_S = 2.0
DNS_ADDRESS = "127.1.0.53"
MAX_BIND_RETRIES = 64


class SessionError(BridgeError):
    """The session cannot start (Services not readable, and the like)."""


@dataclass
class ClusterSpec:
    """One cluster of a session: how to read it, how to reach into it, which namespaces."""

    name: str
    client: KubeClient
    channel: ClusterChannel
    namespaces: tuple[str, ...]
    context: str = ""
    kubeconfig: str = ""
    agent: str = ""  # "namespace/name" of the bridge agent the session uses, for status
    agent_session: str = ""  # the agent's session label, for `tether quit` after a kill


@dataclass(frozen=True)
class SessionOptions:
    hosts_file: Path | None = None
    dns: bool = False
    dns_address: str = DNS_ADDRESS
    dns_port: int = 53
    env_only: bool = False
    state_root: Path | None = None
    cluster_domain: str = "cluster.local"
    routes: bool = False  # root on Linux: pod and Service ranges through a transparent proxy


@dataclass
class Mapped:
    """One Service made local."""

    info: ServiceInfo
    address: str
    names: tuple[str, ...]
    listeners: list[Listener] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)

    @property
    def key(self) -> ServiceKey:
        return self.info.key

    @property
    def ports(self) -> tuple[PortMap, ...]:
        return tuple(PortMap(lst.protocol, lst.target_port, lst.port) for lst in self.listeners)

    @property
    def env_host(self) -> str:
        return self.names[0] if self.names else self.address

    def describe(self) -> str:
        ports = ", ".join(f"{self.address}:{p.local_port}" + ("/udp" if p.protocol == "UDP" else "")
                          + (f" (Service port {p.port})" if p.port != p.local_port else "") for p in self.ports)
        return ports


class ConnectSession:
    def __init__(self, clusters: list[ClusterSpec], options: SessionOptions,
                 announce: Callable[[str], None] = print) -> None:
        if not clusters:
            raise ValueError("a session needs at least one cluster")
        names = [c.name for c in clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"each cluster may appear once: {names}")
        self.clusters = clusters
        self.options = options
        self.announce = announce
        self.naming = Naming(clusters[0].name, clusters[0].namespaces[0], len(clusters) > 1,
                             options.cluster_domain)
        self.pid = os.getpid()
        self.mapped: dict[ServiceKey, Mapped] = {}
        self.ready = asyncio.Event()
        self.dns: LocalDns | None = None
        self.started = time.time()
        self._allocation = Allocation()
        self._infos: dict[ServiceKey, ServiceInfo] = {}
        self._informers: list[tuple[ClusterSpec, Informer]] = []
        self._changed = asyncio.Event()
        self._skipped: set[ServiceKey] = set()
        self._cluster_dns: dict[str, str] = {}
        self._state_written = ""
        self.proxy: routes.TransparentProxy | None = None
        self._relays: dict[tuple[str, str, int], Listener] = {}  # (cluster, ClusterIP, port) -> UDP relay
        self._range_sources: dict[str, tuple[list[Any], list[Any]]] = {}
        self._table_loaded = ""

    # queries -----------------------------------------------------------------------------

    def display_name(self, key: ServiceKey) -> str:
        if key.cluster == self.naming.primary_cluster and key.namespace == self.naming.primary_namespace:
            return key.name
        if key.cluster == self.naming.primary_cluster:
            return f"{key.name}.{key.namespace}"
        return f"{key.name}.{key.namespace}.{key.cluster}"

    def addresses(self, cluster: str | None = None) -> dict[tuple[str, str], ServiceAddress]:
        """One cluster's mappings (the first's by default) as `tether.bridge.environment` takes them."""
        wanted = cluster or self.clusters[0].name
        return {(m.key.namespace, m.key.name):
                ServiceAddress(m.key.namespace, m.key.name, self._env_host(m),
                               {p.port: p.local_port for p in m.ports})
                for m in self.mapped.values() if m.key.cluster == wanted}

    def _env_host(self, m: Mapped) -> str:
        return m.address if self.options.env_only else m.env_host

    # running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled; everything is undone on the way out."""
        try:
            await self._start()
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STATE_TICK_S):
                        await self._changed.wait()
                if self._changed.is_set():
                    self._changed.clear()
                    await self._reconcile()
                self._write_state()
        finally:
            await asyncio.shield(self._teardown())

    async def _start(self) -> None:
        self._reap_stale()
        if self.options.dns and not self.options.env_only:
            self.dns = LocalDns(self.options.dns_address, self.options.dns_port)
            await self.dns.start()
        for cluster in self.clusters:
            await self._find_cluster_dns(cluster)
            for namespace in cluster.namespaces:
                informer = Informer(cluster.client, "v1", "Service", namespace,
                                    on_event=lambda _event: self._changed.set())
                self._informers.append((cluster, informer))
        if self.options.routes:
            await self._start_routes()
        self._tasks = [asyncio.get_running_loop().create_task(inf.run(), name=f"services {c.name}/{inf.namespace}")
                       for c, inf in self._informers]
        for cluster, informer in self._informers:
            try:
                await informer.wait_synced(SYNC_TIMEOUT_S)
            except TimeoutError:
                error = informer.last_error
                raise SessionError(f"cannot list Services in {informer.namespace} of {cluster.name}"
                                + (f": {error}" if error else "")) from None
        self._changed.clear()
        await self._reconcile()
        if self.dns is not None:
            self.announce(f"DNS for these names on {self.dns.host} port {self.dns.port}, e.g. "
                          f"`dig @{self.dns.host} -p {self.dns.port} {self._example_name()}`; "
                          f"resolvectl or /etc/resolver can send {self.options.cluster_domain} there")
        self.ready.set()
        self._write_state()

    def _example_name(self) -> str:
        for m in self.mapped.values():
            if m.names:
                return m.names[0]
        return f"kubernetes.default.svc.{self.options.cluster_domain}"

    async def _find_cluster_dns(self, cluster: ClusterSpec) -> None:
        try:
            svc = await cluster.client.get_or_none("v1", "Service", "kube-dns", "kube-system")
        except (Forbidden, KubeError):
            svc = None
        ip = str(((svc or {}).get("spec") or {}).get("clusterIP") or "")
        if ip and ip != "None":
            self._cluster_dns[cluster.name] = ip

    def _forwarder(self, cluster: ClusterSpec) -> Any:
        server = self._cluster_dns.get(cluster.name)
        if not server:
            return None

        async def forward(query: bytes) -> bytes:
            association = await cluster.channel.open_udp(server, 53)
            try:
                await association.send(query)
                return await association.receive()
            finally:
                await association.aclose()

        return forward

    async def _reconcile(self) -> None:
        infos = {info.key: info for cluster, informer in self._informers for svc in informer.list()
                 if (info := ServiceInfo.of(cluster.name, svc)) is not None}
        for key in sorted(self.mapped):
            current = self.mapped[key]
            if infos.get(key) != current.info:
                await self._unmap(current)
        self._infos = infos
        self._allocation = allocate([c.name for c in self.clusters], infos.values(), self._allocation)
        for key in sorted(infos):
            if key not in self.mapped:
                await self._map(infos[key])
        self._update_names()
        if self.proxy is not None:
            await self._update_routes()

    async def _map(self, info: ServiceInfo) -> None:
        cluster = next(c for c in self.clusters if c.name == info.key.cluster)
        for _ in range(MAX_BIND_RETRIES):
            address = self._allocation.assigned.get(info.key)
            if address is None:
                self.announce(f"Service '{self.display_name(info.key)}' not mapped: no free address left")
                return
            mapped = Mapped(info, address, host_names(info.key, self.naming))
            try:
                for protocol, port in info.ports:
                    listener = Listener(cluster.channel, address, port, info.cluster_ip, port, protocol,
                                        mapped.counters)
                    try:
                        await listener.start()
                    except BindFailed as exc:
                        if not exc.denied:
                            raise
                        listener.port = 0  # a privileged port without the privilege: any free one
                        await listener.start()
                    mapped.listeners.append(listener)
            except BindFailed as exc:
                for listener in mapped.listeners:
                    await listener.aclose()
                if not exc.in_use:
                    self.announce(f"Service '{self.display_name(info.key)}' not mapped: {exc}")
                    return
                self._allocation = mark_unusable(self._allocation, address)  # another session's
                self._allocation = allocate([c.name for c in self.clusters], self._infos.values(),
                                            self._allocation)
                continue
            self.mapped[info.key] = mapped
            self.announce(f"Service '{self.display_name(info.key)}' is available on {mapped.describe()}")
            if not mapped.names and info.key not in self._skipped:
                self._skipped.add(info.key)
                self.announce(f"Service '{info.key.namespace}/{info.key.name}' gets no host name: "
                              f"{skipped_reason(info.key)}")
            return
        self.announce(f"Service '{self.display_name(info.key)}' not mapped: every address tried was busy")

    async def _unmap(self, mapped: Mapped) -> None:
        for listener in mapped.listeners:
            await listener.aclose()
        del self.mapped[mapped.key]
        self.announce(f"Service '{self.display_name(mapped.key)}' is no longer available")

    def _entries(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(m.address, m.names) for m in sorted(self.mapped.values(), key=lambda m: m.key)]

    def _update_names(self) -> None:
        if self.options.env_only:
            return
        if self.options.hosts_file is not None:
            block = hostsfile.render_block(self.pid, self._entries())
            hostsfile.update(self.options.hosts_file, self.pid, block, alive)
        if self.dns is not None:
            table = {name.lower(): m.address for m in self.mapped.values() for name in m.names}
            zones = [Zone(self.options.cluster_domain, self._forwarder(self.clusters[0]))]
            zones += [Zone(c.name, self._forwarder(c)) for c in self.clusters[1:] if self.naming.multi_cluster]
            self.dns.table = Table(table, tuple(zones))

    # routes ------------------------------------------------------------------------------

    @property
    def table(self) -> str:
        return routes.table_name(self.pid) if self.options.routes else ""

    async def _start_routes(self) -> None:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            raise SessionError("--routes needs root (it loads an nftables table)")
        for cluster in self.clusters:
            self._range_sources[cluster.name] = await routes.learn_ranges(cluster.client)
        self.proxy = routes.TransparentProxy({c.name: c.channel for c in self.clusters})
        await self.proxy.start()

    async def _update_routes(self) -> None:
        assert self.proxy is not None
        wanted: set[tuple[str, str, int]] = set()
        for cluster in self.clusters:
            dns = self._cluster_dns.get(cluster.name)
            if dns:
                wanted.add((cluster.name, dns, 53))
        for key, info in self._infos.items():
            wanted |= {(key.cluster, info.cluster_ip, port) for protocol, port in info.ports if protocol == "UDP"}
        for gone in set(self._relays) - wanted:
            await self._relays.pop(gone).aclose()
        for cluster_name, ip, port in sorted(wanted - set(self._relays)):
            channel = next(c.channel for c in self.clusters if c.name == cluster_name)
            relay = Listener(channel, "127.0.0.1", 0, ip, port, "UDP", self.proxy.counters)
            await relay.start()
            self._relays[(cluster_name, ip, port)] = relay
        all_ranges: list[str] = []
        for cluster in self.clusters:
            nodes, cidrs = self._range_sources.get(cluster.name, ([], []))
            ips = [i.cluster_ip for k, i in self._infos.items() if k.cluster == cluster.name]
            ips += [self._cluster_dns[cluster.name]] if cluster.name in self._cluster_dns else []
            ranges = routes.cluster_ranges(nodes, cidrs, ips)
            self.proxy.set_ranges(cluster.name, ranges)
            all_ranges += ranges
        udp = [routes.UdpRedirect(ip, port, relay.port) for (_, ip, port), relay in sorted(self._relays.items())]
        script = routes.render_table(self.table, all_ranges, self.proxy.port, udp)
        if script != self._table_loaded:
            await routes.load(script)
            self._table_loaded = script
            self.announce(f"routes: {', '.join(all_ranges) or 'nothing yet'} through the bridge "
                          f"(nftables table ip {self.table})")

    # state -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "started": self.started,
            "ready": self.ready.is_set(),
            "hostsFile": str(self.options.hosts_file) if self.options.hosts_file and not self.options.env_only else "",
            "dns": f"{self.dns.host}:{self.dns.port}" if self.dns else "",
            "envOnly": self.options.env_only,
            "nftTable": self.table,
            "routes": {"ranges": {c: [str(n) for n in nets] for c, nets in self.proxy.ranges.items()},
                       "bytesOut": self.proxy.counters.bytes_out, "bytesIn": self.proxy.counters.bytes_in,
                       "connections": self.proxy.counters.connections,
                       "failures": self.proxy.counters.failures} if self.proxy else None,
            "clusters": [{"name": c.name, "context": c.context, "kubeconfig": c.kubeconfig,
                          "namespaces": list(c.namespaces), "agent": c.agent, "agentSession": c.agent_session,
                          "channel": type(c.channel).__name__,
                          "connected": getattr(c.channel, "connected", None),
                          "connects": getattr(c.channel, "connects", None)} for c in self.clusters],
            "mappings": [{"cluster": m.key.cluster, "namespace": m.key.namespace, "name": m.key.name,
                          "display": self.display_name(m.key), "address": m.address, "clusterIP": m.info.cluster_ip,
                          "names": list(m.names), "envHost": self._env_host(m),
                          "ports": [{"protocol": p.protocol, "port": p.port, "localPort": p.local_port}
                                    for p in m.ports],
                          "bytesOut": m.counters.bytes_out, "bytesIn": m.counters.bytes_in,
                          "connections": m.counters.connections, "failures": m.counters.failures}
                         for m in sorted(self.mapped.values(), key=lambda m: m.key)],
        }

    def _write_state(self) -> None:
        if self.options.state_root is None:
            return
        doc = self.state()
        text = repr(doc)
        if text == self._state_written:
            return
        sessionstate.write(sessionstate.path_for(self.options.state_root, self.pid), doc)
        self._state_written = text

    def write_early_state(self) -> None:
        """Record the session before it sets anything up, so a kill at any point can be undone."""
        self._reap_stale()
        self._write_state()

    def _reap_stale(self) -> None:
        """Clean up after sessions that were killed (their pid is gone)."""
        if self.options.state_root is None:
            return
        for record in sessionstate.read_all(self.options.state_root):
            if record.pid != self.pid and not alive(record.pid):
                for line in sessionstate.clean_local(record, alive, routes.delete_table_sync):
                    self.announce(f"cleaned up after session {record.pid}, which is gone: {line}")

    async def _teardown(self) -> None:
        for task in getattr(self, "_tasks", []):
            task.cancel()
        for mapped in list(self.mapped.values()):
            for listener in mapped.listeners:
                with contextlib.suppress(Exception):
                    await listener.aclose()
        self.mapped.clear()
        for relay in self._relays.values():
            with contextlib.suppress(Exception):
                await relay.aclose()
        if self.proxy is not None:
            await self.proxy.aclose()
        if self._table_loaded:
            await routes.delete_table(self.table)
        if self.dns is not None:
            await self.dns.aclose()
        if self.options.hosts_file is not None and not self.options.env_only:
            with contextlib.suppress(hostsfile.HostsFileError):
                hostsfile.update(self.options.hosts_file, self.pid, "", alive)
        for cluster in self.clusters:
            with contextlib.suppress(Exception):
                await cluster.channel.aclose()
        if self.options.state_root is not None:
            with contextlib.suppress(FileNotFoundError):
                sessionstate.path_for(self.options.state_root, self.pid).unlink()
