"""What the dashboard shows: a pure function of the hub's caches, no I/O.

`HubSnapshot` is what the server copies out of the hub (Cluster and Work informers, the
federated sources' informers, pull members' Leases, the health controller's latest probes, the
tunnel server's counters, MirrorPolicies, the DNSEndpoints of KubeFed's multi-cluster DNS); `build(snapshot)` turns it into a `Dashboard` of
frozen dataclasses that `to_json` serialises for the page. Timestamps are epoch seconds: the page
computes ages against `now`, so a snapshot only changes when a fact does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.federation import report as fed_report
from tether.federation._util import items, mapping, nested
from tether.federation.model import ResourceRef
from tether.objects import Obj
from tether.objects.times import seconds_of

READY = "Ready"
MESH_READY = "MeshReady"  # written on Clusters by `tether mesh` (connect.mesh.status)
MIRROR_FRESH = "ServiceMirrorEndpointsFresh"  # written on Clusters by the hub's mirror


# inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeSeen:
    """The health controller's latest probe of a push member."""

    at_s: float
    healthy: bool
    detail: str = ""


@dataclass(frozen=True)
class SourceEntry:
    """One propagated object: its source (None once deleted) and its Works."""

    dialect: str  # "kubefed" | "karmada"
    ref: ResourceRef
    source: Obj | None
    works: tuple[Obj, ...]


@dataclass(frozen=True)
class TunnelFacts:
    agents: tuple[str, ...]
    established: int
    pending_dials: int
    bytes_to_agents: int
    bytes_from_agents: int
    connects_refused: int
    dial_failures: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class HubSnapshot:
    now_s: float
    clusters: tuple[Obj, ...] = ()
    leases: Mapping[str, float] = dataclasses.field(default_factory=dict)  # cluster → renewTime
    probes: Mapping[str, ProbeSeen] = dataclasses.field(default_factory=dict)
    sources: tuple[SourceEntry, ...] = ()
    tunnel: TunnelFacts | None = None
    mirror_policies: tuple[Obj, ...] = ()
    dns_endpoints: tuple[Obj, ...] = ()  # KubeFed's DNSEndpoints the hub wrote


# the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConditionView:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class ClusterView:
    name: str
    mode: str  # Push | Pull
    ready: str  # True | False | Unknown
    ready_reason: str
    ready_message: str
    ready_since_s: float | None
    version: str
    created_s: float | None
    heartbeat_s: float | None  # Pull: the agent's last heartbeat; Push: the hub's last probe
    heartbeat_kind: str  # "lease" | "probe" | ""
    probe_error: str
    nodes_ready: int | None
    nodes_total: int | None
    allocatable: tuple[tuple[str, str], ...]  # cpu, memory, pods
    endpoint: str
    region: str
    zones: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    taints: tuple[str, ...]
    conditions: tuple[ConditionView, ...]  # the others (mesh, mirror freshness, ...)


@dataclass(frozen=True)
class PlacementView:
    cluster: str
    applied: str  # yes | no | pending
    reason: str
    message: str
    observed: str
    latency_s: float | None


@dataclass(frozen=True)
class FederatedView:
    dialect: str
    api_version: str
    kind: str
    namespace: str
    name: str
    condition: ConditionView | None
    placements: tuple[PlacementView, ...]


@dataclass(frozen=True)
class MirrorView:
    name: str
    ready: str
    reason: str
    message: str
    clusters: tuple[tuple[str, tuple[str, ...]], ...]  # member → the members it mirrors


@dataclass(frozen=True)
class MeshPeerView:
    cluster: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class DnsRecordView:
    endpoint: str  # the DNSEndpoint, namespace/name
    dns_name: str
    record_type: str
    targets: tuple[str, ...]
    ttl: int | None


@dataclass(frozen=True)
class Dashboard:
    now_s: float
    clusters: tuple[ClusterView, ...]
    objects: tuple[FederatedView, ...]
    tunnel: TunnelFacts | None  # as the tunnel server counted them, sorted
    mirrors: tuple[MirrorView, ...]
    mesh: tuple[MeshPeerView, ...]
    dns: tuple[DnsRecordView, ...] = ()


def _condition(raw: Any) -> ConditionView:
    c = mapping(raw)
    return ConditionView(str(c.get("type") or ""), str(c.get("status") or "Unknown"),
                         str(c.get("reason") or ""), str(c.get("message") or ""))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cluster_view(cluster: Obj, *, lease_s: float | None, probe: ProbeSeen | None) -> ClusterView:
    meta, spec, status = (mapping(cluster.get(k)) for k in ("metadata", "spec", "status"))
    conditions = [mapping(c) for c in items(status.get("conditions"))]
    ready = next((c for c in conditions if c.get("type") == READY), {})
    mode = str(spec.get("syncMode") or "Push")
    heartbeat: float | None
    kind = ""
    probe_error = ""
    if mode == "Pull":
        beats = [s for s in (lease_s, seconds_of(status.get("lastHeartbeatTime"))) if s is not None]
        heartbeat = max(beats) if beats else None
        kind = "lease" if heartbeat is not None else ""
    else:
        heartbeat = probe.at_s if probe is not None else None
        kind = "probe" if probe is not None else ""
        if probe is not None and not probe.healthy:
            probe_error = probe.detail or "unhealthy"
    if not probe_error and ready.get("status") not in (None, "True"):
        probe_error = str(ready.get("message") or "")
    nodes = mapping(status.get("nodeSummary"))
    allocatable = mapping(nested(status, "resourceSummary", "allocatable"))
    taints = []
    for taint in items(spec.get("taints")):
        t = mapping(taint)
        value = f"={t['value']}" if t.get("value") else ""
        taints.append(f"{t.get('key', '')}{value}:{t.get('effect', '')}")
    return ClusterView(
        name=str(meta.get("name") or ""),
        mode=mode,
        ready=str(ready.get("status") or "Unknown"),
        ready_reason=str(ready.get("reason") or ""),
        ready_message=str(ready.get("message") or ""),
        ready_since_s=seconds_of(ready.get("lastTransitionTime")),
        version=str(status.get("kubernetesVersion") or ""),
        created_s=seconds_of(meta.get("creationTimestamp")),
        heartbeat_s=heartbeat,
        heartbeat_kind=kind,
        probe_error=probe_error,
        nodes_ready=_int_or_none(nodes.get("readyNum")),
        nodes_total=_int_or_none(nodes.get("totalNum")),
        allocatable=tuple((k, str(allocatable[k])) for k in ("cpu", "memory", "pods")
                          if k in allocatable),
        endpoint=str(spec.get("apiEndpoint") or ""),
        region=str(spec.get("region") or ""),
        zones=tuple(str(z) for z in items(spec.get("zones"))),
        labels=tuple(sorted((str(k), str(v)) for k, v in mapping(meta.get("labels")).items())),
        taints=tuple(taints),
        conditions=tuple(_condition(c) for c in conditions if c.get("type") != READY),
    )


def federated_view(entry: SourceEntry) -> FederatedView:
    report = fed_report.report_of(entry.ref, entry.source, entry.works)
    placements = tuple(
        PlacementView(row.cluster, "pending" if row.applied is None else ("yes" if row.applied else "no"),
                      row.reason, row.message if row.applied is not True else "", row.observed,
                      row.latency_s)
        for row in report.rows)
    ref = entry.ref
    return FederatedView(entry.dialect, ref.api_version, ref.kind, ref.namespace, ref.name,
                         _condition(report.condition) if report.condition else None, placements)


def mirror_view(policy: Obj) -> MirrorView:
    status = mapping(policy.get("status"))
    ready = next((mapping(c) for c in items(status.get("conditions"))
                  if mapping(c).get("type") == READY), {})
    clusters = tuple(sorted(
        (str(mapping(c).get("name") or ""), tuple(str(m) for m in items(mapping(c).get("mirrors"))))
        for c in items(status.get("clusters"))))
    return MirrorView(str(nested(policy, "metadata", "name") or ""), str(ready.get("status") or "Unknown"),
                      str(ready.get("reason") or ""), str(ready.get("message") or ""), clusters)


def mesh_peers(clusters: Iterable[ClusterView]) -> tuple[MeshPeerView, ...]:
    return tuple(MeshPeerView(c.name, cond.status, cond.reason, cond.message)
                 for c in clusters for cond in c.conditions if cond.type == MESH_READY)


def dns_records(endpoint: Obj) -> list[DnsRecordView]:
    meta = mapping(endpoint.get("metadata"))
    where = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    out = []
    for entry in items(nested(endpoint, "spec", "endpoints")):
        e = mapping(entry)
        out.append(DnsRecordView(where, str(e.get("dnsName") or ""), str(e.get("recordType") or "A"),
                                 tuple(sorted(str(t) for t in items(e.get("targets")))),
                                 _int_or_none(e.get("recordTTL"))))
    return out


def build(snapshot: HubSnapshot) -> Dashboard:
    clusters = tuple(sorted(
        (cluster_view(c, lease_s=snapshot.leases.get(name), probe=snapshot.probes.get(name))
         for c in snapshot.clusters
         if (name := str(nested(c, "metadata", "name") or ""))),
        key=lambda c: c.name))
    objects = tuple(sorted((federated_view(s) for s in snapshot.sources),
                           key=lambda o: (o.namespace, o.kind, o.name, o.dialect)))
    tunnel = None
    if snapshot.tunnel is not None:
        t = snapshot.tunnel
        tunnel = dataclasses.replace(t, agents=tuple(sorted(t.agents)),
                                     dial_failures=tuple(sorted(t.dial_failures)))
    mirrors = tuple(sorted((mirror_view(p) for p in snapshot.mirror_policies), key=lambda m: m.name))
    dns = tuple(sorted((r for e in snapshot.dns_endpoints for r in dns_records(e)),
                       key=lambda r: (r.dns_name, r.record_type, r.endpoint)))
    return Dashboard(snapshot.now_s, clusters, objects, tunnel, mirrors, mesh_peers(clusters), dns)


def to_data(model: Dashboard) -> dict[str, Any]:
    return dataclasses.asdict(model)


def to_json(model: Dashboard) -> str:
    return json.dumps(to_data(model), separators=(",", ":"), sort_keys=True)


def facts_json(model: Dashboard) -> str:
    """The model without its clock: equal exactly when nothing the page shows has changed."""
    return to_json(dataclasses.replace(model, now_s=0.0))
