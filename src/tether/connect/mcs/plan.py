"""How ServiceExports across a clusterset become one ServiceImport (pure).

`merge(exports)` applies the KEP's rules (KEP-1645, "Constraints and Conflict Resolution"):

- an export is *valid* when its Service exists (`Valid=False`, reason `NoService`) and is not an
  ExternalName Service (`InvalidServiceType`);
- properties that cannot be merged (headless or not, session affinity and its config) come from
  the oldest export (`creationTimestamp`, then cluster id for a tie); an export that disagrees
  gets `Conflict=True` with reason `TypeConflict`, `SessionAffinityConflict` or
  `SessionAffinityConfigConflict` (several reasons joined with commas);
- likewise from the oldest export: the ServiceImport's labels and annotations (v1beta1
  `spec.exportedLabels` / `spec.exportedAnnotations`, copied onto the import's metadata; an
  export whose maps differ gets `LabelsConflict` / `AnnotationsConflict`), and the Service's
  `internalTrafficPolicy` (`InternalTrafficPolicyConflict`), `trafficDistribution`
  (`TrafficDistributionConflict`) and `ipFamilies` (`IPFamilyConflict`; a Service that does not
  say is not compared);
- ports are the union, merged first by name, then by (protocol, port); a port that would give two
  ports one name, or one (protocol, port) two names, loses to the older export's and marks its
  export `PortConflict`;
- every valid export contributes its endpoints, conflicting or not (the KEP resolves properties,
  it does not drop backends).

`import_object`, `derived_service` and `imported_slices` turn the result into what each member
gets: a ServiceImport, the selector-less "derived" Service that gives it a ClusterIP the
member's kube-proxy serves (the clusterset IP of that member), and one EndpointSlice per source
slice, labelled `multicluster.kubernetes.io/service-name` and `.../source-cluster` as well as
`kubernetes.io/service-name` of the derived Service.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tether.objects import Obj

MCS_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
MCS_SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"
SERVICE_NAME = "kubernetes.io/service-name"
SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGER = "mcs-controller.connect.tether.io"
MANAGED_BY = "connect.tether.io/managed-by"  # on ServiceImports and derived Services we write
MANAGED_BY_VALUE = "tether-mcs"
IMPORT_LABEL = "connect.tether.io/service-import"  # derived Service -> its ServiceImport's name
HASH_ANNOTATION = "connect.tether.io/mcs-hash"
DERIVED_PREFIX = "derived-"
LABEL_MAX = 63


@dataclass(frozen=True)
class Export:
    cluster: str  # the cluster id
    export: Obj
    service: Obj | None
    slices: tuple[Obj, ...] = ()

    @property
    def created(self) -> str:
        return str((self.export.get("metadata") or {}).get("creationTimestamp") or "")


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str

    def as_obj(self, generation: int | None = None) -> Obj:
        out: Obj = {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message}
        if generation is not None:
            out["observedGeneration"] = generation
        return out


@dataclass(frozen=True)
class Merged:
    namespace: str
    name: str
    headless: bool
    ports: tuple[Obj, ...]
    session_affinity: str
    session_affinity_config: Obj | None
    clusters: tuple[str, ...]  # clusters with a valid export, oldest first
    conditions: Mapping[str, tuple[Condition, ...]] = field(default_factory=dict)  # cluster -> its export's
    exports: tuple[Export, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # the oldest export's exportedLabels
    annotations: Mapping[str, str] = field(default_factory=dict)  # ... and exportedAnnotations
    internal_traffic_policy: str = "Cluster"
    traffic_distribution: str = ""
    ip_families: tuple[str, ...] = ()

    @property
    def type(self) -> str:
        return "Headless" if self.headless else "ClusterSetIP"


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def _headless(service: Obj) -> bool:
    return _spec(service).get("clusterIP") == "None"


def _port(p: Obj) -> Obj:
    out: Obj = {"name": str(p.get("name") or ""), "protocol": str(p.get("protocol") or "TCP"),
                "port": int(p.get("port") or 0)}
    if p.get("appProtocol"):
        out["appProtocol"] = str(p["appProtocol"])
    return out


def _string_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass(frozen=True)
class _Global:
    """What one export says about the properties the oldest export decides."""

    labels: dict[str, str]
    annotations: dict[str, str]
    internal_traffic_policy: str
    traffic_distribution: str
    ip_families: tuple[str, ...]

    @staticmethod
    def of(e: Export) -> _Global:
        wanted, spec = _spec(e.export), _spec(e.service)
        return _Global(_string_map(wanted.get("exportedLabels")), _string_map(wanted.get("exportedAnnotations")),
                       str(spec.get("internalTrafficPolicy") or "Cluster"), str(spec.get("trafficDistribution") or ""),
                       tuple(str(f) for f in spec.get("ipFamilies") or ()))

    def conflicts(self, oldest: _Global, cluster: str) -> list[tuple[str, str]]:
        """(reason, message) for every property that differs from the oldest export's."""
        found: list[tuple[str, str]] = []
        if self.labels != oldest.labels:
            found.append(("LabelsConflict", f"exportedLabels differ from the oldest export's (cluster {cluster}), "
                                            "whose labels the ServiceImport carries"))
        if self.annotations != oldest.annotations:
            found.append(("AnnotationsConflict", f"exportedAnnotations differ from the oldest export's (cluster "
                                                 f"{cluster}), whose annotations the ServiceImport carries"))
        if self.internal_traffic_policy != oldest.internal_traffic_policy:
            found.append(("InternalTrafficPolicyConflict",
                          f"internalTrafficPolicy {self.internal_traffic_policy} differs from the oldest export's "
                          f"({oldest.internal_traffic_policy})"))
        if self.traffic_distribution != oldest.traffic_distribution:
            found.append(("TrafficDistributionConflict",
                          f"trafficDistribution {self.traffic_distribution or '(none)'} differs from the oldest "
                          f"export's ({oldest.traffic_distribution or '(none)'})"))
        if self.ip_families and oldest.ip_families and set(self.ip_families) != set(oldest.ip_families):
            found.append(("IPFamilyConflict", f"ipFamilies {','.join(self.ip_families)} differ from the oldest "
                                              f"export's ({','.join(oldest.ip_families)})"))
        return found


def merge(namespace: str, name: str, exports: Iterable[Export]) -> Merged:
    conditions: dict[str, list[Condition]] = {}
    valid: list[Export] = []
    for e in sorted(exports, key=lambda x: (x.created, x.cluster)):
        if e.service is None:
            conditions[e.cluster] = [Condition("Valid", "False", "NoService",
                                               f"Service {namespace}/{name} does not exist in this cluster")]
            continue
        if _spec(e.service).get("type") == "ExternalName":
            conditions[e.cluster] = [Condition("Valid", "False", "InvalidServiceType",
                                               "ExternalName Services cannot be exported")]
            continue
        valid.append(e)
    if not valid:
        return Merged(namespace, name, False, (), "None", None, (),
                      {c: tuple(v) for c, v in conditions.items()}, ())
    oldest = valid[0]
    headless = _headless(oldest.service or {})
    affinity = str(_spec(oldest.service).get("sessionAffinity") or "None")
    affinity_config = _spec(oldest.service).get("sessionAffinityConfig") if affinity == "ClientIP" else None
    decided = _Global.of(oldest)
    ports: list[Obj] = []
    by_name: dict[str, Obj] = {}
    by_number: dict[tuple[str, int], Obj] = {}
    for e in valid:
        reasons: list[str] = []
        messages: list[str] = []
        spec = _spec(e.service)
        if _headless(e.service or {}) != headless:
            reasons.append("TypeConflict")
            messages.append(f"type {'Headless' if not headless else 'ClusterSetIP'} differs from the oldest "
                            f"export's (cluster {oldest.cluster}): {'Headless' if headless else 'ClusterSetIP'} is used")
        mine = str(spec.get("sessionAffinity") or "None")
        if mine != affinity:
            reasons.append("SessionAffinityConflict")
            messages.append(f"sessionAffinity {mine} differs from the oldest export's ({affinity})")
        elif affinity == "ClientIP" and spec.get("sessionAffinityConfig") != affinity_config:
            reasons.append("SessionAffinityConfigConflict")
            messages.append("sessionAffinityConfig differs from the oldest export's")
        port_conflict = False
        for raw in spec.get("ports") or []:
            if not isinstance(raw, dict):
                continue
            p = _port(raw)
            same_name = by_name.get(p["name"])
            same_number = by_number.get((p["protocol"], p["port"]))
            if same_name is not None or same_number is not None:
                if same_name is not same_number or (same_name is not None and same_name.get("appProtocol")
                                                    != p.get("appProtocol")):
                    port_conflict = True
                    messages.append(f"port {p['name'] or '(unnamed)'} {p['port']}/{p['protocol']} conflicts with "
                                    "an older export's port")
                continue
            ports.append(p)
            by_name[p["name"]] = p
            by_number[(p["protocol"], p["port"])] = p
        if port_conflict:
            reasons.insert(0, "PortConflict")
        for reason, message in _Global.of(e).conflicts(decided, oldest.cluster):
            reasons.append(reason)
            messages.append(message)
        found = [Condition("Valid", "True", "Valid", "the Service is exported"),
                 Condition("Ready", "True", "Exported", f"exported as ServiceImport {namespace}/{name}")]
        if reasons:
            found.append(Condition("Conflict", "True", ",".join(reasons), "; ".join(messages)))
        else:
            found.append(Condition("Conflict", "False", "NoConflicts", "no conflicts with other exports"))
        conditions[e.cluster] = found
    return Merged(namespace, name, headless, tuple(ports), affinity, affinity_config,
                  tuple(e.cluster for e in valid), {c: tuple(v) for c, v in conditions.items()}, tuple(valid),
                  decided.labels, decided.annotations, decided.internal_traffic_policy,
                  decided.traffic_distribution, decided.ip_families)


# what each member gets ---------------------------------------------------------------------------


def digest(text: str, chars: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def derived_name(namespace: str, name: str) -> str:
    """The derived Service of an import: `derived-<hash>` (stable, a DNS label, no clash with a
    user's Service of the same name)."""
    return f"{DERIVED_PREFIX}{digest(f'{namespace}/{name}')}"


def content_hash(obj: Obj) -> str:
    return digest(json.dumps(obj, sort_keys=True, separators=(",", ":")), 16)


def import_object(api_version: str, merged: Merged, ips: Sequence[str]) -> Obj:
    spec: Obj = {"type": merged.type, "ports": [dict(p) for p in merged.ports]}
    if not merged.headless and ips:
        spec["ips"] = list(ips)
    if merged.session_affinity != "None":
        spec["sessionAffinity"] = merged.session_affinity
        if merged.session_affinity_config:
            spec["sessionAffinityConfig"] = merged.session_affinity_config
    if merged.internal_traffic_policy != "Cluster":
        spec["internalTrafficPolicy"] = merged.internal_traffic_policy
    if merged.traffic_distribution:
        spec["trafficDistribution"] = merged.traffic_distribution
    if merged.ip_families:
        spec["ipFamilies"] = list(merged.ip_families)
    meta: Obj = {"name": merged.name, "namespace": merged.namespace,
                 "labels": {**merged.labels, MANAGED_BY: MANAGED_BY_VALUE}}  # ours decides who may rewrite it
    if merged.annotations:
        meta["annotations"] = {k: v for k, v in merged.annotations.items() if k != HASH_ANNOTATION}
    return {"apiVersion": api_version, "kind": "ServiceImport", "metadata": meta, "spec": spec}


def import_status(api_version: str, merged: Merged) -> Obj:
    return {"apiVersion": api_version, "kind": "ServiceImport",
            "metadata": {"name": merged.name, "namespace": merged.namespace},
            "status": {"clusters": [{"cluster": c} for c in merged.clusters],
                       "conditions": [{**Condition("Ready", "True", "Ready",
                                                   f"imported from {', '.join(merged.clusters)}").as_obj()}]}}


def owner(import_obj: Obj) -> Obj:
    meta = import_obj.get("metadata") or {}
    return {"apiVersion": str(import_obj.get("apiVersion")), "kind": "ServiceImport", "name": str(meta.get("name")),
            "uid": str(meta.get("uid") or ""), "controller": False, "blockOwnerDeletion": False}


def derived_service(merged: Merged, import_obj: Obj) -> Obj:
    ports = [{**p, "targetPort": p["port"]} for p in merged.ports]
    for i, p in enumerate(ports):
        if not p["name"] and len(ports) > 1:
            p["name"] = f"port-{i}"  # a Service with several ports needs every one named
    spec: Obj = {"type": "ClusterIP", "ports": ports, "sessionAffinity": merged.session_affinity}
    if merged.headless:
        spec["clusterIP"] = "None"
    if merged.session_affinity_config and merged.session_affinity == "ClientIP":
        spec["sessionAffinityConfig"] = merged.session_affinity_config
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": derived_name(merged.namespace, merged.name), "namespace": merged.namespace,
                         "labels": {MANAGED_BY: MANAGED_BY_VALUE, IMPORT_LABEL: merged.name},
                         "ownerReferences": [owner(import_obj)]},
            "spec": spec}


def _endpoint(endpoint: Obj) -> Obj:
    out: Obj = {"addresses": list(endpoint.get("addresses") or []),
                "conditions": dict(endpoint.get("conditions") or {})}
    ref = endpoint.get("targetRef") or {}
    hostname = endpoint.get("hostname") or (ref.get("name") if ref.get("kind") == "Pod" else None)
    if hostname and len(str(hostname)) <= LABEL_MAX:
        out["hostname"] = str(hostname)
    if endpoint.get("zone"):
        out["zone"] = endpoint["zone"]
    return out


def imported_slices(merged: Merged, import_obj: Obj) -> list[Obj]:
    """One EndpointSlice per source slice of every valid export, in the import's namespace."""
    derived = derived_name(merged.namespace, merged.name)
    out: list[Obj] = []
    for e in merged.exports:
        for s in e.slices:
            source_name = str((s.get("metadata") or {}).get("name") or "")
            body: Obj = {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{derived}-{digest(f'{e.cluster}/{source_name}', 12)}",
                             "namespace": merged.namespace,
                             "labels": {SERVICE_NAME: derived, MCS_SERVICE_NAME: merged.name,
                                        MCS_SOURCE_CLUSTER: e.cluster, SLICE_MANAGED_BY: MANAGER},
                             "ownerReferences": [owner(import_obj)]},
                "addressType": s.get("addressType") or "IPv4",
                "endpoints": [_endpoint(x) for x in s.get("endpoints") or [] if isinstance(x, dict)],
                "ports": [dict(p) for p in s.get("ports") or [] if isinstance(p, dict)],
            }
            out.append(body)
    return out


def export_status(api_version: str, export: Obj, conditions: Sequence[Condition]) -> Obj:
    meta = export.get("metadata") or {}
    generation = meta.get("generation")
    return {"apiVersion": api_version, "kind": "ServiceExport",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "status": {"conditions": [c.as_obj(generation if isinstance(generation, int) else None)
                                      for c in conditions]}}


def conditions_changed(current: Obj | None, wanted: Sequence[Condition]) -> bool:
    existing = {c.get("type"): c for c in ((current or {}).get("status") or {}).get("conditions") or []
                if isinstance(c, dict)}
    for c in wanted:
        have = existing.get(c.type)
        if have is None or (have.get("status"), have.get("reason"), have.get("message")) != (
                c.status, c.reason, c.message):
            return True
    return False
