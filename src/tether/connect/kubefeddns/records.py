"""KubeFed's multi-cluster DNS records (pure): a ServiceDNSRecord's or IngressDNSRecord's status
from what the clusters say, and the `DNSEndpoint` ExternalDNS reads from that status.

Names (KubeFed's `pkg/controller/dnsendpoint`), with prefix `<svc>.<ns>.<domainRef>.svc`
(`<externalName>.<ns>.<domainRef>.svc` when `spec.externalName` is set, with label
`serviceName: <record name>`):

- global `<prefix>.<domain>`: A with every cluster's load-balancer addresses;
- region `<prefix>.<region>.<domain>`: A with the addresses of the clusters in that region;
- zone `<prefix>.<zone>.<region>.<domain>`, one per zone of a cluster: A with that zone's;
- a zone or region without addresses is a CNAME to the level above; a global name without any
  addresses is left out; `spec.dnsPrefix` adds `<dnsPrefix>.<domain>` CNAME to the global name;
- endpoints of the same name and type are merged, targets sorted and deduplicated; TTL
  `spec.recordTTL`, 180 when unset.

Where KubeFed fails (issue 872 and its siblings: a ready cluster without region or zones made
the whole status fail, silently, so no record at all appeared), here such a cluster still
contributes to the global name, and to the region name when it has a region: it only lacks the
levels it cannot name.

A cluster's entry in the status: its Service's `status.loadBalancer` when the Service exists and
has a ready endpoint (or `allowServiceWithoutEndpoints`), else an empty load balancer (the
cluster stays listed so the CNAME fallbacks keep working); zones and region from its Cluster.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tether.objects import Obj

GROUP = "multiclusterdns.kubefed.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
DEFAULT_TTL = 180


@dataclass(frozen=True)
class ClusterView:
    """What the record controllers know of a member cluster."""

    name: str
    ready: bool
    region: str = ""
    zones: tuple[str, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    dns_name: str
    record_type: str
    targets: tuple[str, ...]
    ttl: int
    labels: Mapping[str, str] = field(default_factory=dict)

    def as_obj(self) -> Obj:
        out: Obj = {"dnsName": self.dns_name, "recordTTL": self.ttl, "recordType": self.record_type,
                    "targets": list(self.targets)}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


def load_balancer_targets(load_balancer: Obj | None) -> list[str]:
    out: list[str] = []
    for ingress in (load_balancer or {}).get("ingress") or []:
        if ingress.get("ip"):
            out.append(str(ingress["ip"]))
        if ingress.get("hostname"):
            out.append(str(ingress["hostname"]))
    return out


def _has_ready_endpoint(slices: Iterable[Obj]) -> bool:
    for s in slices:
        for endpoint in s.get("endpoints") or []:
            ready = (endpoint.get("conditions") or {}).get("ready")
            if (ready is None or ready) and endpoint.get("addresses"):
                return True
    return False


def service_status(record: Obj, domain: str, clusters: Sequence[ClusterView],
                   services: Mapping[str, Obj | None], slices: Mapping[str, Sequence[Obj]]) -> Obj:
    """`status` of a ServiceDNSRecord: one entry per ready cluster, sorted by name."""
    allow_empty = bool((record.get("spec") or {}).get("allowServiceWithoutEndpoints"))
    dns = []
    for cluster in sorted(clusters, key=lambda c: c.name):
        if not cluster.ready:
            continue
        entry: Obj = {"cluster": cluster.name, "loadBalancer": {}}
        service = services.get(cluster.name)
        if service is not None and (allow_empty or _has_ready_endpoint(slices.get(cluster.name, ()))):
            balancer = ((service.get("status") or {}).get("loadBalancer")) or {}
            if balancer.get("ingress"):
                entry["loadBalancer"] = {"ingress": [{k: v for k, v in i.items() if k in ("ip", "hostname")}
                                                     for i in balancer["ingress"]]}
        if cluster.zones:
            entry["zones"] = list(cluster.zones)
        if cluster.region:
            entry["region"] = cluster.region
        dns.append(entry)
    return {"domain": domain, "dns": dns}


def ingress_status(clusters: Sequence[ClusterView], ingresses: Mapping[str, Obj | None]) -> Obj:
    dns = []
    for cluster in sorted(clusters, key=lambda c: c.name):
        ingress = ingresses.get(cluster.name)
        if not cluster.ready or ingress is None:
            continue
        balancer = ((ingress.get("status") or {}).get("loadBalancer")) or {}
        dns.append({"cluster": cluster.name,
                    "loadBalancer": {"ingress": [{k: v for k, v in i.items() if k in ("ip", "hostname")}
                                                 for i in balancer.get("ingress") or []]}
                    if balancer.get("ingress") else {}})
    return {"dns": dns}


Resolve = Callable[[str], list[str]]


def _resolved(targets: Iterable[str], resolve: Resolve | None) -> list[str]:
    out: set[str] = set()
    for target in targets:
        try:
            ipaddress.ip_address(target)
            out.add(target)
        except ValueError:
            if resolve is not None:
                out.update(resolve(target))  # a load balancer's hostname (AWS ELBs): its addresses
    return sorted(out)


def merge(endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    """Same name and type merged (targets sorted, deduplicated), empty ones dropped, by name."""
    merged: dict[tuple[str, str], Endpoint] = {}
    for e in endpoints:
        targets = [t for t in e.targets if t]
        if not targets:
            continue
        key = (e.dns_name, e.record_type)
        if key in merged:
            old = merged[key]
            merged[key] = Endpoint(e.dns_name, e.record_type, tuple(sorted(set(old.targets) | set(targets))),
                                   old.ttl, old.labels)
        else:
            merged[key] = Endpoint(e.dns_name, e.record_type, tuple(sorted(set(targets))), e.ttl, e.labels)
    # a name with addresses does not also get a CNAME (a CNAME cannot share its name)
    with_a = {name for name, kind in merged if kind == "A"}
    return [merged[k] for k in sorted(merged) if not (k[1] == "CNAME" and k[0] in with_a)]


def service_endpoints(record: Obj, resolve: Resolve | None = None) -> list[Endpoint]:
    meta, spec, status = record.get("metadata") or {}, record.get("spec") or {}, record.get("status") or {}
    domain = str(status.get("domain") or "")
    if not domain:
        return []
    labels: dict[str, str] = {}
    if spec.get("externalName"):
        first = str(spec["externalName"])
        labels["serviceName"] = str(meta.get("name"))
    else:
        first = str(meta.get("name"))
    prefix = ".".join([first, str(meta.get("namespace")), str(spec.get("domainRef") or ""), "svc"])
    ttl = int(spec.get("recordTTL") or DEFAULT_TTL)
    entries = [e for e in status.get("dns") or [] if isinstance(e, dict)]
    global_name = f"{prefix}.{domain}"

    def targets(match: Callable[[Obj], bool]) -> list[str]:
        found: list[str] = []
        for e in entries:
            if match(e):
                found += load_balancer_targets(e.get("loadBalancer"))
        return _resolved(found, resolve)

    def level(name: str, found: list[str], up: str) -> Endpoint:
        if found:
            return Endpoint(name, "A", tuple(found), ttl, labels)
        return Endpoint(name, "CNAME", (up,) if up else (), ttl, labels)

    out: list[Endpoint] = [level(global_name, targets(lambda e: True), "")]
    for e in entries:
        region = str(e.get("region") or "")
        if not region:
            continue  # no region: nothing to name below the global level (KubeFed failed here)
        region_name = f"{prefix}.{region}.{domain}"
        out.append(level(region_name, targets(_in_region(region)), global_name))
        for zone in e.get("zones") or []:
            zone_name = f"{prefix}.{zone}.{region}.{domain}"
            out.append(level(zone_name, targets(_in_zone(region, str(zone))), region_name))
    if spec.get("dnsPrefix"):
        out.append(Endpoint(f"{spec['dnsPrefix']}.{domain}", "CNAME", (global_name,), ttl))
    return merge(out)


def _in_region(region: str) -> Callable[[Obj], bool]:
    return lambda entry: entry.get("region") == region


def _in_zone(region: str, zone: str) -> Callable[[Obj], bool]:
    return lambda entry: entry.get("region") == region and zone in (entry.get("zones") or [])


def ingress_endpoints(record: Obj, resolve: Resolve | None = None) -> list[Endpoint]:
    spec, status = record.get("spec") or {}, record.get("status") or {}
    ttl = int(spec.get("recordTTL") or DEFAULT_TTL)
    found: list[str] = []
    for e in status.get("dns") or []:
        found += load_balancer_targets(e.get("loadBalancer"))
    targets = _resolved(found, resolve)
    return merge(Endpoint(str(host), "A", tuple(targets), ttl) for host in spec.get("hosts") or [])


def dns_endpoint(kind: str, record: Obj, endpoints: Sequence[Endpoint]) -> Obj:
    """KubeFed's DNSEndpoint for a record: `service-<name>` or `ingress-<name>`, owned by it."""
    meta = record.get("metadata") or {}
    return {
        "apiVersion": API_VERSION, "kind": "DNSEndpoint",
        "metadata": {"name": f"{kind}-{meta.get('name')}", "namespace": meta.get("namespace"),
                     "ownerReferences": [{"apiVersion": str(record.get("apiVersion") or API_VERSION),
                                          "kind": str(record.get("kind")), "name": str(meta.get("name")),
                                          "uid": str(meta.get("uid") or ""), "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"endpoints": [e.as_obj() for e in endpoints]},
    }
