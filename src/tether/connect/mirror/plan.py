"""What the local cluster should hold for a mirrored or global Service, and the steps to get there.

Pure functions only: `desired_mirror` and `desired_global` turn what the source clusters say
into the local objects (Service, Endpoints, EndpointSlices); `plan` compares them with what
exists and returns ordered `Step`s. The runners observe, call these, and apply the steps.

Mirrors are selector-less Services in the mirror namespace. Ports are copied without `nodePort`
(a remote NodePort or LoadBalancer Service mirrors as ClusterIP); a headless Service mirrors as
headless and its endpoints keep their hostnames. A change between headless and ClusterIP cannot
be made in place (`clusterIP` is immutable), so the Service is recreated. Endpoints come from
the remote's EndpointSlices: each one becomes a local slice, and an Endpoints object with the
same addresses is written for clients that still read Endpoints (labelled so a real cluster's
EndpointSliceMirroring controller leaves it alone).

Freshness (the stale-endpoint policy) changes only the endpoints: `not-ready` marks every
endpoint not ready, `withdrawn` removes them; `fresh` and `unreachable` (kept) copy them as they
are.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.connect import names
from tether.connect.mirror import labels as L
from tether.objects import Obj

Freshness = Literal["fresh", "unreachable", "not-ready", "withdrawn"]
MAX_ENDPOINTS_ADDRESSES = 1000  # what the Endpoints API holds; more is truncated, as upstream

SERVICE = ("v1", "Service")
ENDPOINTS = ("v1", "Endpoints")
SLICE = ("discovery.k8s.io/v1", "EndpointSlice")


@dataclass(frozen=True)
class Step:
    """`create`/`update` carry the full object; `delete` names it (`obj` has kind and name)."""

    action: Literal["create", "update", "delete"]
    obj: Obj

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))

    def __str__(self) -> str:
        return f"{self.action} {self.kind} {self.name}"


@dataclass(frozen=True)
class Desired:
    service: Obj
    endpoints: Obj
    slices: tuple[Obj, ...]


@dataclass(frozen=True)
class Existing:
    service: Obj | None = None
    endpoints: Obj | None = None
    slices: tuple[Obj, ...] = ()


@dataclass(frozen=True)
class Contribution:
    """One cluster's Service (and its slices) behind a global Service."""

    cluster: str
    service: Obj
    slices: tuple[Obj, ...]
    local: bool = False
    freshness: Freshness = "fresh"


@dataclass(frozen=True)
class GlobalDesired:
    desired: Desired | None  # None: no cluster has the Service any more
    clusters: tuple[str, ...]  # contributing, in precedence order
    conflicts: tuple[str, ...] = ()  # why a cluster's Service was left out or differs
    kept_clusters: frozenset[str] = frozenset()  # unsynced: their existing slices stay as they are


@dataclass(frozen=True)
class Source:
    """Where a mirror comes from: remote cluster `cluster` (prefix `prefix`), Service ns/name."""

    cluster: str
    prefix: str
    namespace: str
    name: str

    @property
    def mirror(self) -> str:
        return names.mirror_name(self.prefix, self.namespace, self.name)


def source_annotations(cluster: str, namespace: str, name: str) -> dict[str, str]:
    out = {names.SOURCE_NAMESPACE: namespace, names.SOURCE_NAME: name}
    if cluster:
        out[names.SOURCE_CLUSTER] = cluster
    return out


# ports ---------------------------------------------------------------------------------------


def service_ports(service: Obj) -> list[Obj]:
    """A Service's ports as a mirror carries them: no nodePort, defaults spelt out."""
    out: list[Obj] = []
    for port in (service.get("spec") or {}).get("ports") or []:
        if isinstance(port, dict):
            out.append(_service_port(port))
    return out


def _service_port(port: Mapping[str, Any]) -> Obj:
    number = port.get("port")
    item: Obj = {"protocol": str(port.get("protocol") or "TCP"), "port": number}
    if port.get("name"):
        item = {"name": str(port["name"]), **item}
    target = port.get("targetPort")
    item["targetPort"] = target if target not in (None, "", 0) else number
    if port.get("appProtocol"):
        item["appProtocol"] = port["appProtocol"]
    return item


def _slice_port(port: Mapping[str, Any]) -> Obj:
    item: Obj = {"name": str(port.get("name") or ""), "protocol": str(port.get("protocol") or "TCP")}
    if port.get("port") is not None:
        item["port"] = port["port"]
    if port.get("appProtocol"):
        item["appProtocol"] = port["appProtocol"]
    return item


def is_headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def mirrorable(service: Obj) -> bool:
    """ExternalName Services have no endpoints to mirror."""
    return (service.get("spec") or {}).get("type") != "ExternalName"


# endpoints -----------------------------------------------------------------------------------


def _ready(endpoint: Mapping[str, Any]) -> bool:
    ready = (endpoint.get("conditions") or {}).get("ready")
    return ready is None or bool(ready)  # unset means ready (discovery/v1)


def _copy_endpoint(endpoint: Mapping[str, Any], freshness: Freshness, *, zone: str | None = None,
                   hints: Sequence[str] | None = None) -> Obj:
    out: Obj = {"addresses": list(endpoint.get("addresses") or [])}
    conditions = dict(endpoint.get("conditions") or {})
    if freshness == "not-ready":
        conditions["ready"] = False
    if conditions:
        out["conditions"] = conditions
    for key in ("hostname", "nodeName", "targetRef"):
        if endpoint.get(key):
            out[key] = copy.deepcopy(endpoint[key])
    if zone is not None:
        out["zone"] = zone
    elif endpoint.get("zone"):
        out["zone"] = endpoint["zone"]
    if hints is not None:
        out["hints"] = {"forZones": [{"name": z} for z in hints]}
    return out


def _slice(name: str, namespace: str, service_name: str, labels: Mapping[str, str],
           annotations: Mapping[str, str], remote: Obj, endpoints: list[Obj]) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace,
                 "labels": {**labels, L.SERVICE_NAME: service_name, L.MANAGED_BY: L.MANAGER},
                 "annotations": dict(annotations)}
    trigger = ((remote.get("metadata") or {}).get("annotations") or {}).get(L.LAST_CHANGE)
    if trigger:
        meta["annotations"][L.LAST_CHANGE] = trigger
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": str(remote.get("addressType") or "IPv4"),
        "endpoints": endpoints,
        "ports": [_slice_port(p) for p in remote.get("ports") or [] if isinstance(p, dict)],
    }


def endpoints_from_slices(name: str, namespace: str, labels: Mapping[str, str],
                          annotations: Mapping[str, str], slices: Iterable[Obj]) -> Obj:
    """The Endpoints object matching `slices`: one subset per port set, ready endpoints as
    addresses, not-ready ones (unless terminating) as notReadyAddresses, at most 1000 in all."""
    groups: dict[str, tuple[list[Obj], list[Obj], list[Obj]]] = {}
    for item in slices:
        ports = [{k: v for k, v in _slice_port(p).items() if not (k == "name" and v == "")}
                 for p in item.get("ports") or [] if isinstance(p, dict) and p.get("port") is not None]
        ports.sort(key=lambda p: (str(p.get("name", "")), str(p.get("protocol")), int(p.get("port") or 0)))
        key = json.dumps(ports, sort_keys=True)
        ready, not_ready = groups.setdefault(key, (ports, [], []))[1:]
        for endpoint in item.get("endpoints") or []:
            if not isinstance(endpoint, dict):
                continue
            conditions = endpoint.get("conditions") or {}
            is_ready = _ready(endpoint)
            if not is_ready and conditions.get("terminating"):
                continue
            for ip in endpoint.get("addresses") or []:
                address: Obj = {"ip": str(ip)}
                for k in ("hostname", "nodeName", "targetRef"):
                    if endpoint.get(k):
                        address[k] = copy.deepcopy(endpoint[k])
                (ready if is_ready else not_ready).append(address)
    subsets: list[Obj] = []
    budget = MAX_ENDPOINTS_ADDRESSES
    truncated = False
    for key in sorted(groups):
        ports, ready, not_ready = groups[key]
        ready.sort(key=_address_key)
        not_ready.sort(key=_address_key)
        if len(ready) + len(not_ready) > budget:
            truncated = True
            ready = ready[:budget]
            not_ready = not_ready[:max(0, budget - len(ready))]
        budget -= len(ready) + len(not_ready)
        subset: Obj = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if subset and ports:
            subset["ports"] = ports
        if subset:
            subsets.append(subset)
    notes = dict(annotations)
    if truncated:
        notes[L.OVER_CAPACITY] = "truncated"
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": {**labels, L.SKIP_MIRROR: L.TRUE},
                     "annotations": notes},
    }
    if subsets:
        body["subsets"] = subsets
    return body


def _address_key(address: Mapping[str, Any]) -> tuple[int, str]:
    ip = str(address.get("ip", ""))
    return (1 if ":" in ip else 0, ip.zfill(39) if ":" in ip else ".".join(p.zfill(3) for p in ip.split(".")))


# per-cluster mirrors -------------------------------------------------------------------------


def desired_mirror(source: Source, service: Obj | None, slices: Iterable[Obj], mirror_namespace: str,
                   freshness: Freshness = "fresh") -> Desired | None:
    """The mirror of remote `service` (None when it is gone or cannot be mirrored)."""
    if service is None or not mirrorable(service):
        return None
    name = source.mirror
    own_labels = {L.MIRRORED_SVC: L.TRUE, L.PREFIX_SYNC: source.prefix}
    notes = source_annotations(source.cluster, source.namespace, source.name)
    spec: Obj = {"type": "ClusterIP", "ports": service_ports(service)}
    if is_headless(service):
        spec["clusterIP"] = "None"
    if (service.get("spec") or {}).get("publishNotReadyAddresses"):
        spec["publishNotReadyAddresses"] = True
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": mirror_namespace, "labels": dict(own_labels),
                     "annotations": dict(notes)},
        "spec": spec,
    }
    local_slices: list[Obj] = []
    if freshness != "withdrawn":
        for remote in sorted(slices, key=lambda s: str((s.get("metadata") or {}).get("name", ""))):
            slice_name = names.mirror_slice_name(name, source.name, str((remote.get("metadata") or {}).get("name", "")))
            endpoints = [_copy_endpoint(e, freshness) for e in remote.get("endpoints") or [] if isinstance(e, dict)]
            local_slices.append(_slice(slice_name, mirror_namespace, name, own_labels, notes, remote, endpoints))
    endpoints_obj = endpoints_from_slices(name, mirror_namespace, own_labels, notes, local_slices)
    return Desired(body, endpoints_obj, tuple(local_slices))


# global services -----------------------------------------------------------------------------


def desired_global(namespace: str, name: str, contributions: Sequence[Contribution], mirror_namespace: str, *,
                   zones: Sequence[str], routed: Mapping[str, bool] | None = None,
                   kept_clusters: frozenset[str] = frozenset()) -> GlobalDesired:
    """The global Service for `namespace/name` from every cluster's Service carrying the global
    label, in precedence order (the local cluster first, then the remotes as configured).

    The first contribution decides ports and headlessness; a cluster whose Service disagrees
    on headlessness is left out (its endpoints could not be served by the other kind), one that
    disagrees on ports still contributes endpoints; both are reported as conflicts. `routed`
    says which clusters' Services ask for local-first routing (the routing-strategy label).
    """
    usable = [c for c in contributions if mirrorable(c.service)]
    if not usable:
        return GlobalDesired(None, (), (), kept_clusters)
    first = usable[0]
    headless = is_headless(first.service)
    ports = service_ports(first.service)
    included: list[Contribution] = []
    conflicts: list[str] = []
    for c in usable:
        if is_headless(c.service) != headless:
            conflicts.append(f"{c.cluster}: {'headless' if not headless else 'not headless'} while "
                             f"{first.cluster}'s is {'headless' if headless else 'not headless'}; left out")
            continue
        if c is not first and service_ports(c.service) != ports:
            conflicts.append(f"{c.cluster}: ports differ from {first.cluster}'s; {first.cluster}'s are used")
        included.append(c)
    gname = names.global_name(namespace, name)
    clusters = tuple(c.cluster for c in included)
    notes = {**source_annotations("", namespace, name), L.GLOBAL_CLUSTERS: ",".join(sorted(clusters))}
    if any((routed or {}).get(c.cluster) for c in included):
        notes[L.TOPOLOGY_HINTS] = "auto"
        notes[L.TOPOLOGY_MODE] = "Auto"
    spec: Obj = {"type": "ClusterIP", "ports": ports}
    if headless:
        spec["clusterIP"] = "None"
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": gname, "namespace": mirror_namespace, "labels": {L.GLOBAL_SVC: L.TRUE},
                     "annotations": notes},
        "spec": spec,
    }
    slices: list[Obj] = []
    for c in included:
        if c.freshness == "withdrawn":
            continue
        slice_labels = {L.MIRRORED_SLICE: L.TRUE, L.SLICE_SYNC_NAME: c.cluster}
        slice_notes = source_annotations(c.cluster, namespace, name)
        for remote in sorted(c.slices, key=lambda s: str((s.get("metadata") or {}).get("name", ""))):
            if c.local:
                endpoints = [_copy_endpoint(e, c.freshness, hints=zones)
                             for e in remote.get("endpoints") or [] if isinstance(e, dict)]
            else:
                endpoints = [_copy_endpoint(e, c.freshness, zone=L.REMOTE_ZONE, hints=[L.REMOTE_ZONE])
                             for e in remote.get("endpoints") or [] if isinstance(e, dict)]
            slice_name = names.global_slice_name(str((remote.get("metadata") or {}).get("name", "")))
            slices.append(_slice(slice_name, mirror_namespace, gname, slice_labels, slice_notes, remote, endpoints))
    endpoints_obj = endpoints_from_slices(gname, mirror_namespace, {L.GLOBAL_SVC: L.TRUE},
                                          source_annotations("", namespace, name), slices)
    return GlobalDesired(Desired(service, endpoints_obj, tuple(slices)), clusters, tuple(conflicts), kept_clusters)


# comparing and planning ----------------------------------------------------------------------


def _owned_meta_differs(existing: Obj, wanted: Obj) -> bool:
    emeta, wmeta = existing.get("metadata") or {}, wanted.get("metadata") or {}
    for part in ("labels", "annotations"):
        have = emeta.get(part) or {}
        if any(have.get(k) != v for k, v in (wmeta.get(part) or {}).items()):
            return True
    return False


def _with_owned_meta(existing: Obj, wanted: Obj) -> Obj:
    updated = copy.deepcopy(existing)
    meta = updated.setdefault("metadata", {})
    for part in ("labels", "annotations"):
        merged = dict(meta.get(part) or {})
        merged.update((wanted.get("metadata") or {}).get(part) or {})
        if merged:
            meta[part] = merged
    meta.pop("managedFields", None)
    return updated


def _service_differs(existing: Obj, wanted: Obj) -> bool:
    espec, wspec = existing.get("spec") or {}, wanted.get("spec") or {}
    return (service_ports(existing) != wspec.get("ports")
            or str(espec.get("type") or "ClusterIP") != wspec.get("type")
            or bool(espec.get("selector"))
            or bool(espec.get("publishNotReadyAddresses")) != bool(wspec.get("publishNotReadyAddresses"))
            or _owned_meta_differs(existing, wanted))


def _service_update(existing: Obj, wanted: Obj) -> Obj:
    updated = _with_owned_meta(existing, wanted)
    spec = updated.setdefault("spec", {})
    wspec = wanted["spec"]
    spec["ports"] = copy.deepcopy(wspec["ports"])
    spec["type"] = wspec["type"]
    spec.pop("selector", None)
    for key in ("externalTrafficPolicy", "healthCheckNodePort", "loadBalancerIP", "allocateLoadBalancerNodePorts",
                "loadBalancerSourceRanges", "loadBalancerClass"):
        spec.pop(key, None)  # only valid on the types a mirror never has
    if wspec.get("publishNotReadyAddresses"):
        spec["publishNotReadyAddresses"] = True
    else:
        spec.pop("publishNotReadyAddresses", None)
    return updated


def _normal_endpoints(endpoints: Any) -> list[Any]:
    return [json.dumps(e, sort_keys=True) for e in endpoints or []]


def _slice_differs(existing: Obj, wanted: Obj) -> bool:
    return (_normal_endpoints(existing.get("endpoints")) != _normal_endpoints(wanted.get("endpoints"))
            or [_slice_port(p) for p in existing.get("ports") or []] != wanted.get("ports")
            or _owned_meta_differs(existing, wanted))


def _slice_update(existing: Obj, wanted: Obj) -> Obj:
    updated = _with_owned_meta(existing, wanted)
    updated["endpoints"] = copy.deepcopy(wanted["endpoints"])
    updated["ports"] = copy.deepcopy(wanted["ports"])
    return updated


def _endpoints_differ(existing: Obj, wanted: Obj) -> bool:
    return ((existing.get("subsets") or []) != (wanted.get("subsets") or [])
            or _owned_meta_differs(existing, wanted))


def _endpoints_update(existing: Obj, wanted: Obj) -> Obj:
    updated = _with_owned_meta(existing, wanted)
    updated.pop("subsets", None)
    if wanted.get("subsets"):
        updated["subsets"] = copy.deepcopy(wanted["subsets"])
    return updated


def _ref(api_version_kind: tuple[str, str], obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version_kind[0], "kind": api_version_kind[1],
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
                         "uid": meta.get("uid", "")}}


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...] = ()
    recreated: bool = False  # the Service is deleted and made again (headless <-> ClusterIP)
    notes: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.steps


def plan(desired: Desired | None, existing: Existing, *, keep_slices: Iterable[str] = ()) -> Plan:
    """Steps from `existing` to `desired` (None: remove everything). Slices named in
    `keep_slices` are left alone (they belong to a source whose state is unknown)."""
    kept = set(keep_slices)
    steps: list[Step] = []
    if desired is None:
        steps += [Step("delete", _ref(SLICE, s)) for s in _sorted(existing.slices)
                  if _name(s) not in kept]
        if kept & {_name(s) for s in existing.slices}:
            return Plan(tuple(steps))  # a source may still have it: keep the Service
        if existing.endpoints is not None:
            steps.append(Step("delete", _ref(ENDPOINTS, existing.endpoints)))
        if existing.service is not None:
            steps.append(Step("delete", _ref(SERVICE, existing.service)))
        return Plan(tuple(steps))
    recreated = False
    if existing.service is None:
        steps.append(Step("create", desired.service))
    elif is_headless(existing.service) != is_headless(desired.service):
        recreated = True
        steps.append(Step("delete", _ref(SERVICE, existing.service)))
        steps.append(Step("create", desired.service))
    elif _service_differs(existing.service, desired.service):
        steps.append(Step("update", _service_update(existing.service, desired.service)))
    have = {_name(s): s for s in existing.slices}
    for wanted in desired.slices:
        current = have.pop(_name(wanted), None)
        if current is None:
            steps.append(Step("create", wanted))
        elif current.get("addressType") != wanted.get("addressType"):  # immutable
            steps.append(Step("delete", _ref(SLICE, current)))
            steps.append(Step("create", wanted))
        elif _slice_differs(current, wanted):
            steps.append(Step("update", _slice_update(current, wanted)))
    steps += [Step("delete", _ref(SLICE, s)) for s in _sorted(have.values()) if _name(s) not in kept]
    # slices first: kube-proxy reads them; Endpoints follow for the clients that still read those
    if existing.endpoints is None:
        steps.append(Step("create", desired.endpoints))
    elif _endpoints_differ(existing.endpoints, desired.endpoints):
        steps.append(Step("update", _endpoints_update(existing.endpoints, desired.endpoints)))
    return Plan(tuple(steps), recreated)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _sorted(objs: Iterable[Obj]) -> list[Obj]:
    return sorted(objs, key=_name)


def plan_unsynced(existing: Existing, freshness: Freshness) -> Plan:
    """A remote that has not been listed since start: nothing is known of its Services, so the
    mirrors stay; only the stale policy applies to the endpoints they hold."""
    if existing.service is None or freshness in ("fresh", "unreachable"):
        return Plan()
    steps: list[Step] = []
    if freshness == "withdrawn":
        steps += [Step("delete", _ref(SLICE, s)) for s in _sorted(existing.slices)]
        if existing.endpoints is not None and existing.endpoints.get("subsets"):
            steps.append(Step("update", _endpoints_update(existing.endpoints, {"metadata": {}})))
        return Plan(tuple(steps))
    for current in _sorted(existing.slices):
        endpoints = [_copy_endpoint(e, "not-ready") for e in current.get("endpoints") or [] if isinstance(e, dict)]
        if _normal_endpoints(endpoints) != _normal_endpoints(current.get("endpoints")):
            updated = copy.deepcopy(current)
            updated["endpoints"] = endpoints
            steps.append(Step("update", updated))
    if existing.endpoints is not None:
        subsets = []
        for subset in existing.endpoints.get("subsets") or []:
            moved = dict(subset)
            addresses = list(moved.pop("addresses", None) or []) + list(moved.pop("notReadyAddresses", None) or [])
            if addresses:
                moved["notReadyAddresses"] = addresses
            subsets.append(moved)
        if subsets != (existing.endpoints.get("subsets") or []):
            updated = copy.deepcopy(existing.endpoints)
            updated["subsets"] = subsets
            steps.append(Step("update", updated))
    return Plan(tuple(steps))
