"""Which names `tether dns` answers, built from Kubernetes objects (pure).

Two families of names, both read from the cluster the server serves:

MCS (`clusterset.local`, the Multi-Cluster Services DNS specification, schema 1.0.0), from
ServiceImports and the EndpointSlices labelled `multicluster.kubernetes.io/service-name`:

- `dns-version.clusterset.local` TXT "1.0.0"
- ClusterSetIP import: `<svc>.<ns>.svc.clusterset.local` A/AAAA with `spec.ips`; SRV
  `_<port>._<proto>.<svc>.<ns>.svc.clusterset.local` per named port, target the service name.
  No per-cluster name (`<clusterid>.<svc>...` does not exist).
- Headless import: `<svc>.<ns>.svc.clusterset.local` A/AAAA per ready endpoint of every cluster
  (no ready endpoint: the name does not exist, NXDOMAIN); `<hostname>.<clusterid>.<svc>.<ns>...`
  per ready endpoint (hostname: the endpoint's `hostname`, else its Pod's name, else its address
  with dashes; cluster id: the slice's `multicluster.kubernetes.io/source-cluster`); SRV per named
  port and endpoint (N x M records) targeting those names; PTR for the endpoint addresses.

Semaphore (`cluster.<prefix>` and `cluster.global`), from the Services semaphore-service-mirror
(or `tether mirror`) writes and their EndpointSlices:

- mirror `<prefix>-<ns>-73736d-<svc>` (label `mirror-svc-prefix-sync=<prefix>`):
  `<svc>.<ns>.svc.cluster.<prefix>` A with its ClusterIP (headless: the ready endpoints, and
  `<hostname>.<svc>.<ns>.svc.cluster.<prefix>` each), SRV per named port;
- global `gl-<ns>-73736d-<svc>`: the same under `cluster.global`.

The source namespace and name come from the `connect.tether.io/source-*` annotations when present
(names too long for 63 characters are hashed and cannot be split), else from the name itself.
This is what Semaphore's CoreDNS `rewrite` stanza does, without the regex and for hashed names too.

`build_table` returns a `Table`: records by lower-case name, every name that exists (empty
non-terminals included, so they answer NODATA rather than NXDOMAIN), and the zones the server is
authoritative for; anything outside them is forwarded.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.connect.mirror.labels import (
    GLOBAL_SVC,
    MIRRORED_SLICE,
    MIRRORED_SVC,
    PREFIX_SYNC,
    SERVICE_NAME,
)
from tether.connect.names import GLOBAL_PREFIX, SOURCE_NAME, SOURCE_NAMESPACE, split_mirror_name
from tether.net import dnswire as w
from tether.objects import Obj

__all__ = ["CLUSTERSET_ZONE", "GLOBAL_SVC", "GLOBAL_ZONE", "MCS_SERVICE_NAME", "MIRRORED_SLICE", "MIRRORED_SVC",
           "Table", "build_table", "split_name"]

CLUSTERSET_ZONE = "clusterset.local"
GLOBAL_ZONE = "cluster.global"
SCHEMA_VERSION = "1.0.0"
VERSION_TTL = 28800  # the specification's example
DEFAULT_TTL = 5  # what Semaphore's users see (`drill` shows 5) and CoreDNS's kubernetes default

MCS_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
MCS_SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"


@dataclass(frozen=True)
class Table:
    records: Mapping[str, tuple[w.Record, ...]]
    names: frozenset[str]
    zones: tuple[str, ...]  # authoritative zones, longest first
    soas: Mapping[str, w.Record]
    ttl: int = DEFAULT_TTL

    def zone_of(self, name: str) -> str | None:
        for zone in self.zones:
            if name == zone or name.endswith("." + zone):
                return zone
        return None

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.records.values())


def soa_record(zone: str, serial: int, ttl: int) -> w.Record:
    return w.Record.of(zone, ttl, w.SOA(f"ns.dns.{zone}", f"hostmaster.{zone}", serial, 7200, 1800, 86400, ttl))


def reverse_name(address: str) -> str:
    return ipaddress.ip_address(address).reverse_pointer


def _ready(endpoint: Obj) -> bool:
    ready = (endpoint.get("conditions") or {}).get("ready")
    return ready is None or bool(ready)


def _dashed(address: str) -> str:
    return address.replace(".", "-").replace(":", "-")


def endpoint_hostname(endpoint: Obj, address: str) -> str:
    if endpoint.get("hostname"):
        return str(endpoint["hostname"]).lower()
    ref = endpoint.get("targetRef") or {}
    if ref.get("kind") == "Pod" and ref.get("name"):
        return str(ref["name"]).lower()
    return _dashed(address)


def _address_record(name: str, address: str, ttl: int) -> w.Record | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return w.Record.of(name, ttl, w.A(str(ip)) if ip.version == 4 else w.AAAA(str(ip)))


@dataclass
class _Builder:
    ttl: int
    records: dict[str, list[w.Record]] = field(default_factory=dict)

    def add(self, record: w.Record | None) -> None:
        if record is None:
            return
        bucket = self.records.setdefault(record.name, [])
        if record not in bucket:
            bucket.append(record)

    def address(self, name: str, address: str) -> None:
        self.add(_address_record(name, address, self.ttl))

    def srv(self, name: str, port: int, target: str, weight: int = 100) -> None:
        self.add(w.Record.of(name, self.ttl, w.SRV(0, weight, port, target)))


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _labels(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _named_ports(ports: Iterable[Obj]) -> list[tuple[str, str, int]]:
    out = []
    for port in ports:
        if isinstance(port, dict) and port.get("name") and isinstance(port.get("port"), int):
            out.append((str(port["name"]).lower(), str(port.get("protocol") or "TCP").lower(), int(port["port"])))
    return out


def _slice_port(slice_: Obj, name: str) -> int | None:
    for port in slice_.get("ports") or []:
        if str(port.get("name") or "").lower() == name and isinstance(port.get("port"), int):
            return int(port["port"])
    return None


def _ready_endpoints(slices: Iterable[Obj]) -> list[tuple[Obj, Obj, str]]:
    """(slice, endpoint, address) for every ready endpoint address."""
    out: list[tuple[Obj, Obj, str]] = []
    for s in slices:
        for endpoint in s.get("endpoints") or []:
            if isinstance(endpoint, dict) and _ready(endpoint):
                out.extend((s, endpoint, str(a)) for a in endpoint.get("addresses") or [])
    return out


# MCS ------------------------------------------------------------------------------------------


def _mcs(b: _Builder, imports: Iterable[Obj], slices: Iterable[Obj]) -> None:
    zone = CLUSTERSET_ZONE
    b.add(w.Record.of(f"dns-version.{zone}", VERSION_TTL, w.TXT((SCHEMA_VERSION,))))
    by_import: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        name = _labels(s).get(MCS_SERVICE_NAME)
        if name:
            by_import.setdefault((str(_meta(s).get("namespace", "")), name), []).append(s)
    for imp in imports:
        meta, spec = _meta(imp), imp.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")).lower(), str(meta.get("name", "")).lower()
        if not namespace or not name:
            continue
        fqdn = f"{name}.{namespace}.svc.{zone}"
        ports = _named_ports(spec.get("ports") or [])
        if spec.get("type") != "Headless":
            for ip in spec.get("ips") or []:
                b.address(fqdn, str(ip))
            if spec.get("ips"):
                for port_name, proto, number in ports:
                    b.srv(f"_{port_name}._{proto}.{fqdn}", number, fqdn)
            continue
        endpoints = _ready_endpoints(by_import.get((str(meta.get("namespace", "")), str(meta.get("name", ""))), []))
        targets: list[tuple[str, Obj]] = []
        for s, endpoint, address in endpoints:
            cluster = str(_labels(s).get(MCS_SOURCE_CLUSTER) or "").lower()
            b.address(fqdn, address)
            if not cluster:
                continue
            host = f"{endpoint_hostname(endpoint, address)}.{cluster}.{fqdn}"
            b.address(host, address)
            b.add(_ptr(address, host, b.ttl))
            if (host, s) not in targets:
                targets.append((host, s))
        for port_name, proto, _ in ports:
            for host, s in targets:
                found = _slice_port(s, port_name)
                if found is not None:
                    b.srv(f"_{port_name}._{proto}.{fqdn}", found, host, max(1, 100 // len(targets)))


def _ptr(address: str, target: str, ttl: int) -> w.Record | None:
    try:
        return w.Record.of(reverse_name(address), ttl, w.PTR(target))
    except ValueError:
        return None


# Semaphore ------------------------------------------------------------------------------------


def split_name(name: str, prefix: str) -> tuple[str, str] | None:
    """(namespace, service) of `<prefix>-<namespace>-73736d-<service>`, else None."""
    return split_mirror_name(name, prefix)


def _source(svc: Obj, prefix: str) -> tuple[str, str] | None:
    annotations = _meta(svc).get("annotations") or {}
    namespace, name = annotations.get(SOURCE_NAMESPACE), annotations.get(SOURCE_NAME)
    if namespace and name:
        return str(namespace).lower(), str(name).lower()
    split = split_name(str(_meta(svc).get("name", "")), prefix)
    return (split[0].lower(), split[1].lower()) if split else None


def _semaphore(b: _Builder, services: Iterable[Obj], slices: Iterable[Obj], zones: set[str]) -> None:
    by_service: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        name = _labels(s).get(SERVICE_NAME)
        if name:
            by_service.setdefault((str(_meta(s).get("namespace", "")), name), []).append(s)
    for svc in services:
        labels, meta, spec = _labels(svc), _meta(svc), svc.get("spec") or {}
        if labels.get(GLOBAL_SVC) == "true":
            prefix, zone = GLOBAL_PREFIX, GLOBAL_ZONE
        elif labels.get(MIRRORED_SVC) == "true" and labels.get(PREFIX_SYNC):
            prefix = str(labels[PREFIX_SYNC])
            zone = f"cluster.{prefix}".lower()
        else:
            continue
        zones.add(zone)
        source = _source(svc, prefix)
        if source is None:
            continue
        fqdn = f"{source[1]}.{source[0]}.svc.{zone}"
        ports = _named_ports(spec.get("ports") or [])
        cluster_ip = spec.get("clusterIP")
        own = by_service.get((str(meta.get("namespace", "")), str(meta.get("name", ""))), [])
        if cluster_ip and cluster_ip != "None":
            for ip in spec.get("clusterIPs") or [cluster_ip]:
                b.address(fqdn, str(ip))
            for port_name, proto, number in ports:
                b.srv(f"_{port_name}._{proto}.{fqdn}", number, fqdn)
            continue
        endpoints = _ready_endpoints(own)
        targets: list[tuple[str, Obj]] = []
        for s, endpoint, address in endpoints:
            host = f"{endpoint_hostname(endpoint, address)}.{fqdn}"
            b.address(fqdn, address)
            b.address(host, address)
            if (host, s) not in targets:
                targets.append((host, s))
        for port_name, proto, _ in ports:
            for host, s in targets:
                found = _slice_port(s, port_name)
                if found is not None:
                    b.srv(f"_{port_name}._{proto}.{fqdn}", found, host, max(1, 100 // len(targets)))


# the table ------------------------------------------------------------------------------------


def build_table(*, imports: Iterable[Obj] = (), mcs_slices: Iterable[Obj] = (), mirrors: Iterable[Obj] = (),
                mirror_slices: Iterable[Obj] = (), prefixes: Iterable[str] = (), ttl: int = DEFAULT_TTL,
                serial: int = 1, semaphore: bool = True) -> Table:
    b = _Builder(ttl)
    zones = {CLUSTERSET_ZONE}
    _mcs(b, imports, mcs_slices)
    if semaphore:
        zones.add(GLOBAL_ZONE)
        zones.update(f"cluster.{p}".lower() for p in prefixes)
        _semaphore(b, mirrors, mirror_slices, zones)
    ordered = tuple(sorted(zones, key=lambda z: (-len(z), z)))
    names: set[str] = set(ordered)
    for name in b.records:
        zone = next((z for z in ordered if name == z or name.endswith("." + z)), None)
        if zone is None:  # reverse names: only the name itself exists here
            names.add(name)
            continue
        labels = name.split(".")
        for i in range(len(labels)):
            suffix = ".".join(labels[i:])
            names.add(suffix)
            if suffix == zone:
                break
    for zone in ordered:
        names.add(f"svc.{zone}")
    return Table({k: tuple(v) for k, v in b.records.items()}, frozenset(names), ordered,
                 {z: soa_record(z, serial, ttl) for z in ordered}, ttl)
