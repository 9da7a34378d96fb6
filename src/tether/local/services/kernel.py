"""Netns mode: Service routing in the kernel, like kube-proxy's nftables mode, in every node.

Each node namespace gets one nftables table, `ip tether-services`, rewritten whole in one `nft -f`
transaction whenever Services, EndpointSlices or Nodes change (so a packet sees the old rules or
the new ones, never a mix):

- `service-ips`, a verdict map `ClusterIP . protocol . port : goto svc-<n>`, looked up in the nat
  prerouting hook (what the node's pods send) and output hook (the node's own and hostNetwork
  processes); `service-nodeports`, `protocol . port : goto ext-<n>`, for packets to one of the
  node's own addresses (`fib daddr type local`);
- `svc-<n>` picks an endpoint chain with `numgen random` (ClientIP affinity first: a dynamic set
  per endpoint, refreshed on every new connection, with the Service's timeout); `ep-<n>-<k>`
  DNATs to the endpoint. conntrack does the rest, so the endpoint sees the client's own address;
  only NodePort traffic and a pod reaching itself through its Service (hairpin) are masqueraded,
  as kube-proxy does;
- `internalTrafficPolicy: Local`: only endpoints on this node; with none, the ClusterIP traffic
  is dropped (`no-endpoints` set in the filter hooks), as kube-proxy does.

A Service port with no ready endpoint, or with an endpoint this layer cannot reach by routing (a
loopback address, as the `kubernetes` Service's), is left out: its packets go on to the router
namespace, where the userspace proxy (`tether.local.services.proxy`) answers for it (RST without
endpoints). The router keeps the proxy for everything that does not come from a node: the host's
ClusterIP routes (`hostroutes`) and the cluster's own components.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.local.netns import HostFabric, NetnsError
from tether.local.nft import NftError, apply_ruleset
from tether.local.services.allocation import SERVICES, needs_cluster_ip, needs_node_ports
from tether.local.services.endpoints import NODES, SERVICE_NAME_LABEL, SLICES
from tether.local.services.watch import start_signals
from tether.local.store import Store
from tether.objects import Obj

log = logging.getLogger(__name__)

TABLE = "tether-services"
MASQUERADE_MARK = 0x4000
DEFAULT_AFFINITY_TIMEOUT_S = 10800
PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int
    node: str


@dataclass(frozen=True)
class ServicePort:
    key: str  # namespace/name:port-name, for comments and chain names
    protocol: str  # nft's name: tcp, udp, sctp
    cluster_ips: tuple[str, ...]
    port: int
    node_port: int | None
    endpoints: tuple[Endpoint, ...]
    local_only: bool = False  # internalTrafficPolicy: Local
    affinity_s: int | None = None  # ClientIP session affinity timeout


@dataclass(frozen=True)
class NodeRules:
    """What one node's table holds (pure; `render` turns it into nft text)."""

    ports: tuple[ServicePort, ...] = field(default=())


def _ready(endpoint: Obj) -> bool:
    ready = (endpoint.get("conditions") or {}).get("ready")
    return ready is None or bool(ready)


def _routable(address: str) -> bool:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return parsed.version == 4 and not parsed.is_loopback and not parsed.is_unspecified


def service_ports(services: Iterable[Obj], slices: Iterable[Obj]) -> list[ServicePort]:
    """Every Service port the kernel routes, with its ready endpoints (sorted, stable)."""
    by_service: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        meta = s.get("metadata") or {}
        name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if name and s.get("addressType", "IPv4") == "IPv4":
            by_service.setdefault((str(meta.get("namespace", "")), str(name)), []).append(s)
    found: list[ServicePort] = []
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        ips = tuple(str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]
                    if ip and ip != "None" and _routable(str(ip)))
        if not needs_cluster_ip(spec) or not ips:
            continue
        affinity = None
        if spec.get("sessionAffinity") == "ClientIP":
            config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
            affinity = int(config.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT_S)
        for port in spec.get("ports") or []:
            protocol = PROTOCOLS.get(str(port.get("protocol", "TCP"))) if isinstance(port, dict) else None
            if protocol is None or not isinstance(port.get("port"), int):
                continue
            port_name = str(port.get("name") or "")
            endpoints: set[Endpoint] = set()
            unreachable = False
            for s in by_service.get((namespace, name), []):
                numbers = [p.get("port") for p in s.get("ports") or []
                           if str(p.get("name") or "") == port_name
                           and PROTOCOLS.get(str(p.get("protocol", "TCP"))) == protocol]
                if not numbers or not isinstance(numbers[0], int):
                    continue
                for endpoint in s.get("endpoints") or []:
                    if not _ready(endpoint):
                        continue
                    for address in endpoint.get("addresses") or []:
                        unreachable = unreachable or not _routable(str(address))
                        endpoints.add(Endpoint(str(address), numbers[0], str(endpoint.get("nodeName") or "")))
            if unreachable:
                continue  # the userspace proxy in the router reaches it
            node_port = port.get("nodePort") if needs_node_ports(spec) and isinstance(port.get("nodePort"), int) else None
            found.append(ServicePort(
                key=f"{namespace}/{name}:{port_name or port['port']}", protocol=protocol, cluster_ips=ips,
                port=int(port["port"]), node_port=node_port,
                endpoints=tuple(sorted(endpoints, key=lambda e: (ipaddress.IPv4Address(e.ip), e.port))),
                local_only=spec.get("internalTrafficPolicy") == "Local", affinity_s=affinity))
    return sorted(found, key=lambda p: (p.key, p.protocol))


def _comment(text: str) -> str:
    return '"' + re.sub(r'[^A-Za-z0-9_./:-]', "_", text)[:120] + '"'


def _pick_chain(chain: str, port: ServicePort, n: int, every: list[Endpoint], chosen: list[Endpoint]) -> str:
    """A chain that sends a new connection to one of `chosen` (the client's earlier one first,
    with ClientIP affinity), numbered as in `every`."""
    indexes = [every.index(e) for e in chosen]
    rules = [f"        ip saddr @aff-{n}-{k} goto ep-{n}-{k}" for k in indexes] if port.affinity_s else []
    spread = ", ".join(f"{i} : goto ep-{n}-{k}" for i, k in enumerate(indexes))
    rules.append(f"        numgen random mod {len(indexes)} vmap {{ {spread} }}")
    return f"    chain {chain} {{\n        comment {_comment(port.key)}\n" + "\n".join(rules) + "\n    }"


def render(ports: Iterable[ServicePort], node: str) -> str:
    """The nft script that replaces node `node`'s table (one transaction: create, flush by
    deleting, define)."""
    lines = [f"table ip {TABLE} {{}}", f"delete table ip {TABLE}", f"table ip {TABLE} {{"]
    chains: list[str] = []
    service_ips: list[str] = []
    node_ports: list[str] = []
    no_endpoints: list[str] = []
    sets: list[str] = []
    for n, port in enumerate(ports):
        cluster_endpoints = [e for e in port.endpoints if e.node == node] if port.local_only else list(port.endpoints)
        external_endpoints = list(port.endpoints)
        if port.local_only and not cluster_endpoints and port.endpoints:
            no_endpoints += [f"{ip} . {port.protocol} . {port.port}" for ip in port.cluster_ips]
        if not port.endpoints:
            continue  # on to the router: the userspace proxy resets
        body = [f"    chain ep-{n}-{k} {{\n"
                + (f"        update @aff-{n}-{k} {{ ip saddr }}\n" if port.affinity_s else "")
                + f"        ip saddr {e.ip} meta mark set meta mark | {MASQUERADE_MARK:#x}\n"
                + f"        meta l4proto {port.protocol} dnat to {e.ip}:{e.port}\n    }}"
                for k, e in enumerate(external_endpoints)]
        chains += body
        if port.affinity_s:
            sets += [f"    set aff-{n}-{k} {{ type ipv4_addr; flags dynamic,timeout; timeout {port.affinity_s}s; }}"
                     for k in range(len(external_endpoints))]

        if cluster_endpoints:
            chains.append(_pick_chain(f"svc-{n}", port, n, external_endpoints, cluster_endpoints))
            service_ips += [f"{ip} . {port.protocol} . {port.port} : goto svc-{n}" for ip in port.cluster_ips]
        if port.node_port is not None:
            chains.append(f"    chain ext-{n} {{\n        meta mark set meta mark | {MASQUERADE_MARK:#x}\n"
                          f"        goto ext-pick-{n}\n    }}")
            chains.append(_pick_chain(f"ext-pick-{n}", port, n, external_endpoints, external_endpoints))
            node_ports.append(f"{port.protocol} . {port.node_port} : goto ext-{n}")

    def elements(items: list[str]) -> str:
        return f" elements = {{ {', '.join(items)} }};" if items else ""

    lines += [
        "    map service-ips { type ipv4_addr . inet_proto . inet_service : verdict;"
        + elements(service_ips) + " }",
        "    map service-nodeports { type inet_proto . inet_service : verdict;" + elements(node_ports) + " }",
        "    set no-endpoints { type ipv4_addr . inet_proto . inet_service;" + elements(no_endpoints) + " }",
        *sets,
        "    chain services {",
        "        ip daddr . meta l4proto . th dport vmap @service-ips",
        "        fib daddr type local meta l4proto . th dport vmap @service-nodeports",
        "    }",
        "    chain nat-prerouting { type nat hook prerouting priority -100; policy accept; jump services; }",
        "    chain nat-output { type nat hook output priority -100; policy accept; jump services; }",
        "    chain nat-postrouting {",
        "        type nat hook postrouting priority 100; policy accept;",
        f"        meta mark & {MASQUERADE_MARK:#x} == {MASQUERADE_MARK:#x} masquerade",
        "    }",
        "    chain filter-forward {",
        "        type filter hook forward priority -10; policy accept;",
        "        ct state new ip daddr . meta l4proto . th dport @no-endpoints drop",
        "    }",
        "    chain filter-output {",
        "        type filter hook output priority -10; policy accept;",
        "        ct state new ip daddr . meta l4proto . th dport @no-endpoints drop",
        "    }",
        *chains,
        "}",
    ]
    return "\n".join(lines) + "\n"


def node_names_by_ip(nodes: Iterable[Obj]) -> Mapping[str, str]:
    """InternalIP -> node name."""
    found: dict[str, str] = {}
    for node in nodes:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                found[str(address.get("address"))] = str((node.get("metadata") or {}).get("name", ""))
    return found


class KernelServices:
    """Keeps every node namespace's `tether-services` table in step with the Services."""

    def __init__(self, store: Store, fabric: HostFabric, *, resync_s: float = 10.0, settle_s: float = 0.05,
                 served_elsewhere: frozenset[str] = frozenset()) -> None:
        self.store = store
        self.fabric = fabric
        # ClusterIPs a component answers on itself (the cluster DNS on kube-dns's): never DNATed
        self.served_elsewhere = served_elsewhere
        self.resync_s = resync_s
        self.settle_s = settle_s
        self._changed = asyncio.Event()
        self._applied: dict[str, str] = {}  # node namespace -> the script it holds
        self._failed = ""

    async def sync(self) -> None:
        ports = [p for p in service_ports(self.store.list_objects(SERVICES), self.store.list_objects(SLICES))
                 if not set(p.cluster_ips) & self.served_elsewhere]
        names = node_names_by_ip(self.store.list_objects(NODES))
        for node_ip, namespace in self.fabric.node_namespaces().items():
            script = render(ports, names.get(node_ip, ""))
            if self._applied.get(namespace) == script:
                continue
            try:
                await apply_ruleset(namespace, script)
            except (NftError, NetnsError) as exc:
                if str(exc) != self._failed:
                    log.warning("kernel service routing in %s: %s", namespace, exc)
                self._failed = str(exc)
                continue
            self._applied[namespace] = script

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            start_signals(group, self.store, (SERVICES, SLICES, NODES), self._changed)
            while True:
                await self.sync()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_s):  # wait_for may drop a cancel (3.11)
                        await self._changed.wait()
                await asyncio.sleep(self.settle_s)
                self._changed.clear()
