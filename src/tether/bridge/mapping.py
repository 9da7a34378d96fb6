"""What `tether connect` maps where: Services to loopback addresses and the names they answer to.

Pure logic, no I/O. Each cluster of a session gets its own block of loopback addresses: the first
cluster 127.1.1.1-127.1.8.254, the second 127.1.9.1-..., and so on (eight /24s each, `.0` and
`.255` never used, 127.1.1.0 reserved as Bridge to Kubernetes reserves it). A Service keeps its
address while it exists; a new one takes the lowest free address of its cluster's block, so the
first Services of a namespace come out as B2K prints them (`127.1.1.1`, `127.1.1.2`, ...).

Names follow cluster DNS: `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`, and `svc` alone
for the session's first namespace. With more than one cluster the first cluster keeps those and
every cluster's Services also answer as `svc.ns.<cluster>`, the only name of the others' Services.
A name part that is not a DNS label (RFC 1123) is not turned into a host name: the Service is
still mapped by address, and `skipped_names` says why it has no name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.objects import Obj

BLOCK_OCTETS = 8  # /24s per cluster
CLUSTER_DOMAIN = "cluster.local"
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_dns_label(text: str) -> bool:
    return bool(_LABEL.match(text))


def block(index: int) -> list[str]:
    """Every usable address of cluster `index`'s block, in allocation order."""
    first = 1 + BLOCK_OCTETS * index
    if first + BLOCK_OCTETS - 1 > 254:
        raise ValueError(f"no loopback block left for cluster number {index + 1}")
    return [f"127.1.{third}.{fourth}" for third in range(first, first + BLOCK_OCTETS) for fourth in range(1, 255)]


@dataclass(frozen=True, order=True)
class ServiceKey:
    cluster: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" + (f" in {self.cluster}" if self.cluster else "")


@dataclass(frozen=True)
class PortMap:
    protocol: str  # TCP or UDP
    port: int  # the Service's port, which the local address listens on when it can
    local_port: int  # where it listens (differs only when the Service's port could not be bound)


@dataclass(frozen=True)
class ServiceInfo:
    """What a Service says about how to reach it (from its spec)."""

    key: ServiceKey
    cluster_ip: str  # "" for a headless Service
    ports: tuple[tuple[str, int], ...]  # (protocol, port)

    @classmethod
    def of(cls, cluster: str, svc: Obj) -> ServiceInfo | None:
        """None for a Service with nothing to map (ExternalName, no ports, no cluster IP)."""
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return None
        cluster_ip = str(spec.get("clusterIP") or "")
        if cluster_ip == "None":
            cluster_ip = ""
        ports: list[tuple[str, int]] = []
        for port in spec.get("ports") or ():
            protocol = str(port.get("protocol") or "TCP").upper()
            number = int(port.get("port") or 0)
            if protocol in ("TCP", "UDP") and 0 < number < 65536 and (protocol, number) not in ports:
                ports.append((protocol, number))
        if not ports or not cluster_ip:
            return None
        return cls(ServiceKey(cluster, str(meta.get("namespace", "")), str(meta.get("name", ""))),
                   cluster_ip, tuple(ports))


@dataclass(frozen=True)
class Naming:
    """How names are made for one session."""

    primary_cluster: str
    primary_namespace: str
    multi_cluster: bool = False
    cluster_domain: str = CLUSTER_DOMAIN


def host_names(key: ServiceKey, naming: Naming) -> tuple[str, ...]:
    """The names `key` answers to, most specific last; () when a part is not a DNS label."""
    if not (is_dns_label(key.name) and is_dns_label(key.namespace)):
        return ()
    names: list[str] = []
    if key.cluster == naming.primary_cluster:
        if key.namespace == naming.primary_namespace:
            names.append(key.name)
        qualified = f"{key.name}.{key.namespace}"
        names += [qualified, f"{qualified}.svc", f"{qualified}.svc.{naming.cluster_domain}"]
    if naming.multi_cluster and is_dns_label(key.cluster):
        names.append(f"{key.name}.{key.namespace}.{key.cluster}")
    return tuple(names)


def skipped_reason(key: ServiceKey) -> str:
    bad = [part for part in (key.name, key.namespace) if not is_dns_label(part)]
    return f"{bad[0]!r} is not a valid host name label" if bad else ""


@dataclass(frozen=True)
class Allocation:
    """Address assignments that stay put while their Services exist."""

    assigned: Mapping[ServiceKey, str] = field(default_factory=dict)
    unusable: frozenset[str] = frozenset()  # addresses found busy (another session holds them)


def allocate(clusters: list[str], services: Iterable[ServiceInfo], previous: Allocation) -> Allocation:
    """Keep the addresses of Services still present, give new ones the lowest free address.

    New Services are taken in (namespace, name) order so that one listing gives a stable result.
    """
    present = sorted({info.key for info in services})
    kept = {key: address for key, address in previous.assigned.items() if key in present}
    taken = set(kept.values()) | set(previous.unusable)
    result = dict(kept)
    free: dict[str, list[str]] = {}
    for key in present:
        if key in result:
            continue
        if key.cluster not in free:
            free[key.cluster] = [a for a in block(clusters.index(key.cluster)) if a not in taken]
        pool = free[key.cluster]
        if not pool:
            continue  # more Services than the block holds: left unmapped (reported by the caller)
        result[key] = pool.pop(0)
    return Allocation(result, previous.unusable)


def mark_unusable(allocation: Allocation, address: str) -> Allocation:
    """`address` turned out to be busy: drop its Service's assignment so it gets another one."""
    assigned = {key: value for key, value in allocation.assigned.items() if value != address}
    return Allocation(assigned, allocation.unusable | {address})

