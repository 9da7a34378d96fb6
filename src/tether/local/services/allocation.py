"""Service registry admission: ClusterIPs and NodePorts, allocated as kube-apiserver does.

`plan_allocation` is pure: given the new and current spec, what is in use and a random source,
it returns the fields to set or the causes of a 422. `ServiceAllocator` is the admission plugin
around it; its in-use sets are a cache rebuilt from the stored Services at start and repaired
(`rebuild`) by the registry component, so a restart, a dry run or a failed write loses nothing.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether.local.errors import Cause, invalid
from tether.local.network import ClusterNetwork
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.objects import Obj

SvcKey = tuple[str, str]  # (namespace, name)
SERVICES = "/services"
NODE_PORT_MIN = 30000
NODE_PORT_MAX = 32767
IP_TYPES = frozenset({"ClusterIP", "NodePort", "LoadBalancer"})
NODE_PORT_TYPES = frozenset({"NodePort", "LoadBalancer"})


def needs_cluster_ip(spec: Obj) -> bool:
    return spec.get("type", "ClusterIP") in IP_TYPES


def needs_node_ports(spec: Obj) -> bool:
    return spec.get("type", "ClusterIP") in NODE_PORT_TYPES


def service_ips(spec: Obj) -> list[str]:
    """The allocated (non-headless) ClusterIPs of a Service spec."""
    ips = list(spec.get("clusterIPs") or [])
    if not ips and spec.get("clusterIP"):
        ips = [spec["clusterIP"]]
    return [str(ip) for ip in ips if ip and ip != "None"]


def service_node_ports(spec: Obj) -> list[int]:
    return [int(p["nodePort"]) for p in spec.get("ports") or []
            if isinstance(p, dict) and isinstance(p.get("nodePort"), int) and p["nodePort"]]


@dataclass(frozen=True)
class Allocation:
    cluster_ip: str | None  # None: no ClusterIP (ExternalName); "None": headless
    node_ports: tuple[int | None, ...]  # per spec.ports entry; None drops the field
    causes: tuple[Cause, ...] = ()


@dataclass(frozen=True)
class Pools:
    cidr: ipaddress.IPv4Network
    reserved: frozenset[str] = frozenset()  # never picked at random (may still be requested)
    port_min: int = NODE_PORT_MIN
    port_max: int = NODE_PORT_MAX


def _ip_causes(requested: str, pools: Pools, taken: bool) -> list[Cause]:
    shown = f'[]string{{"{requested}"}}'
    try:
        addr = ipaddress.IPv4Address(requested)
    except ValueError:
        return [Cause("FieldValueInvalid", f"Invalid value: {shown}: must be a valid IP address",
                      "spec.clusterIPs")]
    if addr not in pools.cidr or addr in (pools.cidr.network_address, pools.cidr.broadcast_address):
        return [Cause("FieldValueInvalid",
                      f"Invalid value: {shown}: failed to allocate IP {requested}: provided IP is not in "
                      f"the valid range. The range of valid IPs is {pools.cidr}", "spec.clusterIPs")]
    if taken:
        return [Cause("FieldValueInvalid",
                      f"Invalid value: {shown}: failed to allocate IP {requested}: provided IP is "
                      "already allocated", "spec.clusterIPs")]
    return []


def _pick_ip(pools: Pools, used: set[str] | frozenset[str], rng: random.Random) -> str | None:
    size = pools.cidr.num_addresses - 2  # no network or broadcast address
    if size <= 0:
        return None
    start = rng.randrange(size)
    base = int(pools.cidr.network_address) + 1
    for step in range(size):
        candidate = str(ipaddress.IPv4Address(base + (start + step) % size))
        if candidate not in used and candidate not in pools.reserved:
            return candidate
    return None


def _pick_port(pools: Pools, used: set[int] | frozenset[int], rng: random.Random) -> int | None:
    size = pools.port_max - pools.port_min + 1
    start = rng.randrange(size)
    for step in range(size):
        candidate = pools.port_min + (start + step) % size
        if candidate not in used:
            return candidate
    return None


def _port_key(port: Obj) -> tuple[Any, ...]:
    return (port.get("name") or "", port.get("protocol", "TCP"), port.get("port"))


def plan_allocation(
    spec: Obj,
    current: Obj | None,
    *,
    used_ips: set[str] | frozenset[str],
    used_ports: set[int] | frozenset[int],
    pools: Pools,
    rng: random.Random,
) -> Allocation:
    """What to set on `spec` (a new or updated Service spec); `used_*` excludes this Service."""
    causes: list[Cause] = []
    old = current or {}
    service_type = spec.get("type", "ClusterIP")
    requested = spec.get("clusterIP") or ""
    requested_list = [str(ip) for ip in spec.get("clusterIPs") or [] if ip]
    old_ip = (old.get("clusterIP") or "") if needs_cluster_ip(old) else ""
    if old_ip and requested_list and requested and old_ip in (requested, requested_list[0]):
        # An update that changed one of the pair: report the change, not the mismatch.
        requested = requested if requested != old_ip else requested_list[0]
    elif requested_list and requested and requested_list[0] != requested:
        causes.append(Cause("FieldValueInvalid", f'Invalid value: []string{{"{requested_list[0]}"}}: must '
                            "match `clusterIP` when both are specified", "spec.clusterIPs[0]"))
    requested = requested or (requested_list[0] if requested_list else "")

    cluster_ip: str | None = None
    if needs_cluster_ip(spec):
        if old_ip and not requested:
            requested = old_ip  # an update that left the field out keeps it (patchAllocatedValues)
        if old_ip and requested != old_ip:
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{requested}": field is immutable',
                                "spec.clusterIP"))
            cluster_ip = old_ip
        elif requested == "None":
            if service_type != "ClusterIP":
                causes.append(Cause("FieldValueInvalid", f'Invalid value: "None": may not be set to '
                                    f"'None' for {service_type} services", "spec.clusterIPs[0]"))
            cluster_ip = "None"
        elif requested:
            if requested != old_ip:
                causes += _ip_causes(requested, pools, requested in used_ips)
            cluster_ip = requested
        else:
            cluster_ip = _pick_ip(pools, used_ips, rng)
            if cluster_ip is None:
                causes.append(Cause("FieldValueInvalid", "Invalid value: []string{}: failed to allocate "
                                    f"IP: range is full ({pools.cidr})", "spec.clusterIPs"))

    ports = [p if isinstance(p, dict) else {} for p in spec.get("ports") or []]
    node_ports: list[int | None] = []
    if needs_node_ports(spec):
        old_ports: dict[tuple[Any, ...], Any] = {}
        if needs_node_ports(old):
            old_ports = {_port_key(p): p.get("nodePort") for p in old.get("ports") or [] if isinstance(p, dict)}
        own_old = {v for v in old_ports.values() if isinstance(v, int)}
        taken = set(used_ports)
        for i, port in enumerate(ports):
            wanted = port.get("nodePort") or old_ports.get(_port_key(port)) or 0
            if not isinstance(wanted, int) or isinstance(wanted, bool):
                causes.append(Cause("FieldValueInvalid", f"Invalid value: {wanted!r}: must be an integer",
                                    f"spec.ports[{i}].nodePort"))
                node_ports.append(None)
                continue
            if wanted:
                if not pools.port_min <= wanted <= pools.port_max:
                    causes.append(Cause("FieldValueInvalid", f"Invalid value: {wanted}: provided port is not "
                                        "in the valid range. The range of valid ports is "
                                        f"{pools.port_min}-{pools.port_max}", f"spec.ports[{i}].nodePort"))
                elif wanted in taken and wanted not in own_old:
                    causes.append(Cause("FieldValueInvalid", f"Invalid value: {wanted}: provided port is "
                                        "already allocated", f"spec.ports[{i}].nodePort"))
                node_ports.append(wanted)
                taken.add(wanted)
                continue
            picked = _pick_port(pools, taken, rng)
            if picked is None:
                causes.append(Cause("FieldValueInvalid", "Invalid value: 0: failed to allocate a node port: "
                                    "range is full", f"spec.ports[{i}].nodePort"))
            else:
                taken.add(picked)
            node_ports.append(picked)
    else:
        node_ports = [None] * len(ports)
    return Allocation(cluster_ip=cluster_ip, node_ports=tuple(node_ports), causes=tuple(causes))


def apply_allocation(spec: Obj, allocation: Allocation) -> None:
    if allocation.cluster_ip is None:
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
    else:
        spec["clusterIP"] = allocation.cluster_ip
        spec["clusterIPs"] = [allocation.cluster_ip]
    for port, node_port in zip(spec.get("ports") or [], allocation.node_ports, strict=False):
        if not isinstance(port, dict):
            continue
        if node_port is None:
            port.pop("nodePort", None)
        else:
            port["nodePort"] = node_port


@dataclass
class InUse:
    """Which Service holds each ClusterIP and NodePort: a cache of what the store says."""

    ips: dict[str, SvcKey] = field(default_factory=dict)
    ports: dict[int, SvcKey] = field(default_factory=dict)

    @classmethod
    def from_services(cls, services: Iterable[Obj]) -> InUse:
        found = cls()
        for svc in services:
            found.record(_key(svc), svc.get("spec") or {})
        return found

    def record(self, key: SvcKey, spec: Obj) -> None:
        for ip in service_ips(spec):
            self.ips[ip] = key
        for port in service_node_ports(spec):
            self.ports[port] = key

    def release(self, key: SvcKey, spec: Obj | None = None) -> None:
        """Forget what `key` holds (only what `spec` lists, when given)."""
        keep_ips = set(service_ips(spec)) if spec is not None else set()
        keep_ports = set(service_node_ports(spec)) if spec is not None else set()
        for ip in [ip for ip, k in self.ips.items() if k == key and ip not in keep_ips]:
            del self.ips[ip]
        for port in [p for p, k in self.ports.items() if k == key and p not in keep_ports]:
            del self.ports[port]


def _key(svc: Obj) -> SvcKey:
    meta = svc.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class ServiceAllocator:
    """The admission plugin (append to `ops.admission`)."""

    def __init__(self, store: Store, network: ClusterNetwork, *, seed: int | None = None) -> None:
        self.store = store
        self.pools = Pools(cidr=network.service_cidr,
                           reserved=frozenset({network.api_service_ip, network.dns_service_ip}))
        self.rng = random.Random(seed)
        self.in_use = InUse()
        self.rebuild()

    def rebuild(self) -> None:
        """The repair step: the in-use sets again from the stored Services."""
        self.in_use = InUse.from_services(self.store.list_objects(SERVICES))

    def _holder_still_has(self, holder: SvcKey, ip: str | None = None, port: int | None = None) -> bool:
        svc = self.store.get(SERVICES, *holder)
        if svc is None:
            return False
        spec = svc.get("spec") or {}
        return ip in service_ips(spec) if ip is not None else port in service_node_ports(spec)

    def _used(self, key: SvcKey) -> tuple[set[str], set[int]]:
        # Stale entries (a Service deleted since) must not block a request for that value.
        for ip, holder in list(self.in_use.ips.items()):
            if holder != key and not self._holder_still_has(holder, ip=ip):
                del self.in_use.ips[ip]
        for port, holder in list(self.in_use.ports.items()):
            if holder != key and not self._holder_still_has(holder, port=port):
                del self.in_use.ports[port]
        ips = {ip for ip, holder in self.in_use.ips.items() if holder != key}
        ports = {p for p, holder in self.in_use.ports.items() if holder != key}
        return ips, ports

    def __call__(self, rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        if rt.group != "" or rt.kind != "Service":
            return
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        key = _key(obj)
        used_ips, used_ports = self._used(key)
        allocation = plan_allocation(spec, (current or {}).get("spec"), used_ips=used_ips,
                                     used_ports=used_ports, pools=self.pools, rng=self.rng)
        if allocation.causes:
            raise invalid("Service", key[1], list(allocation.causes))
        apply_allocation(spec, allocation)
        self.in_use.release(key, spec)
        self.in_use.record(key, spec)
