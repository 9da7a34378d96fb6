"""The Endpoints and EndpointSlice controllers: which pods back each Service with a selector.

Planning is pure (`plan_endpoints`, `plan_slices`); `EndpointsController` is one `Engine` keyed
by Service, fed from the store's change stream (a pod change enqueues the Services selecting it)
and writing through `Operations` like any client.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.engine import Engine
from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.store import Event, WatchOverflow
from tether.objects import Obj

log = logging.getLogger(__name__)

SvcKey = tuple[str, str]
SERVICES = "/services"
PODS = "/pods"
NODES = "/nodes"
ENDPOINTS = "/endpoints"
SLICES = "discovery.k8s.io/endpointslices"
OBSERVED = frozenset({SERVICES, PODS, NODES, ENDPOINTS, SLICES})  # what observe() acts on
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = "endpointslice-controller.k8s.io"
ENDPOINTS_MANAGED_BY_LABEL = "endpoints.kubernetes.io/managed-by"
ENDPOINTS_MANAGER = "endpoint-controller"
ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_ENDPOINTS_PER_SLICE = 100


# pure helpers --------------------------------------------------------------------------------


def selector_of(service: Obj) -> dict[str, str] | None:
    """The Service's selector, or None when it has none (its endpoints are managed by hand)."""
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return None
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not selector:
        return None
    return {str(k): str(v) for k, v in selector.items()}


def selects(selector: Mapping[str, str], labels: Mapping[str, Any] | None) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Obj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def pod_ip(pod: Obj) -> str | None:
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip:
        ips = status.get("podIPs") or []
        ip = ips[0].get("ip") if ips and isinstance(ips[0], dict) else None
    return str(ip) if ip else None


def resolve_target_port(service_port: Obj, pod: Obj) -> int | None:
    """A Service port's targetPort in `pod`: a number, or a named container port looked up."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if isinstance(target, str):
        if target.isdigit():
            return int(target)
        protocol = service_port.get("protocol", "TCP")
        for container in (pod.get("spec") or {}).get("containers") or []:
            for port in (container or {}).get("ports") or []:
                if (isinstance(port, dict) and port.get("name") == target
                        and port.get("protocol", "TCP") == protocol and isinstance(port.get("containerPort"), int)):
                    return int(port["containerPort"])
    return None


@dataclass(frozen=True)
class Port:
    name: str
    port: int
    protocol: str
    app_protocol: str | None = None

    def to_endpoints(self) -> Obj:
        out: Obj = {"port": self.port, "protocol": self.protocol}
        if self.name:
            out = {"name": self.name, **out}
        if self.app_protocol:
            out["appProtocol"] = self.app_protocol
        return out

    def to_slice(self) -> Obj:
        out: Obj = {"name": self.name, "port": self.port, "protocol": self.protocol}
        if self.app_protocol:
            out["appProtocol"] = self.app_protocol
        return out


@dataclass(frozen=True)
class Backend:
    """One pod as an endpoint of one Service."""

    ip: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node_name: str | None
    hostname: str | None
    zone: str | None
    ready: bool
    serving: bool
    terminating: bool
    ports: tuple[Port, ...]

    def target_ref(self) -> Obj:
        return {"kind": "Pod", "namespace": self.pod_namespace, "name": self.pod_name, "uid": self.pod_uid}

    def to_address(self) -> Obj:
        out: Obj = {"ip": self.ip}
        if self.hostname:
            out["hostname"] = self.hostname
        if self.node_name:
            out["nodeName"] = self.node_name
        out["targetRef"] = self.target_ref()
        return out

    def to_slice_endpoint(self) -> Obj:
        out: Obj = {
            "addresses": [self.ip],
            "conditions": {"ready": self.ready, "serving": self.serving, "terminating": self.terminating},
        }
        if self.hostname:
            out["hostname"] = self.hostname
        if self.node_name:
            out["nodeName"] = self.node_name
        out["targetRef"] = self.target_ref()
        if self.zone:
            out["zone"] = self.zone
        return out


def _ip_sort_key(ip: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in ip.split("."))
    except ValueError:
        return (1 << 16,)


def backends_for(service: Obj, pods: Iterable[Obj], zones: Mapping[str, str] | None = None) -> list[Backend]:
    """The pods a Service selects that can serve it (have an IP, are not finished), sorted by IP."""
    selector = selector_of(service)
    if selector is None:
        return []
    zones = zones or {}
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
    service_ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    found: list[Backend] = []
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace") or not selects(selector, pmeta.get("labels")):
            continue
        ip = pod_ip(pod)
        if ip is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ports: list[Port] = []
        for sp in service_ports:
            resolved = resolve_target_port(sp, pod)
            if resolved is not None:
                ports.append(Port(str(sp.get("name") or ""), resolved, str(sp.get("protocol", "TCP")),
                                  sp.get("appProtocol")))
        if service_ports and not ports:
            continue
        pspec = pod.get("spec") or {}
        hostname = None
        if pspec.get("hostname") and pspec.get("subdomain") == meta.get("name"):
            hostname = str(pspec["hostname"])
        node = pspec.get("nodeName") or None
        terminating = bool(pmeta.get("deletionTimestamp"))
        ready = pod_ready(pod)
        found.append(Backend(
            ip=ip, pod_name=str(pmeta.get("name", "")), pod_namespace=str(pmeta.get("namespace", "")),
            pod_uid=str(pmeta.get("uid", "")), node_name=node, hostname=hostname,
            zone=zones.get(node) if node else None,
            ready=publish_not_ready or (ready and not terminating),
            serving=publish_not_ready or ready, terminating=terminating, ports=tuple(ports),
        ))
    found.sort(key=lambda b: (_ip_sort_key(b.ip), b.pod_name))
    return found


def _grouped(backends: Iterable[Backend]) -> list[tuple[tuple[Port, ...], list[Backend]]]:
    groups: dict[tuple[Port, ...], list[Backend]] = {}
    for backend in backends:
        groups.setdefault(tuple(sorted(backend.ports, key=lambda p: (p.name, p.protocol, p.port))), []).append(backend)
    return sorted(groups.items(), key=lambda item: [(p.name, p.protocol, p.port) for p in item[0]])


def plan_endpoints(service: Obj, backends: Iterable[Backend]) -> Obj:
    """The Endpoints object the Service should have (same name; subsets grouped by ports)."""
    meta = service.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels[ENDPOINTS_MANAGED_BY_LABEL] = ENDPOINTS_MANAGER
    subsets: list[Obj] = []
    for ports, members in _grouped(b for b in backends if not b.terminating or b.ready):
        subset: Obj = {}
        ready = [b.to_address() for b in members if b.ready]
        not_ready = [b.to_address() for b in members if not b.ready]
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if ports:
            subset["ports"] = [p.to_endpoints() for p in ports]
        subsets.append(subset)
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "labels": labels},
    }
    if subsets:
        body["subsets"] = subsets
    return body


def slice_labels(service: Obj) -> dict[str, str]:
    meta = service.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels[SERVICE_NAME_LABEL] = str(meta.get("name", ""))
    labels[MANAGED_BY_LABEL] = SLICE_MANAGER
    return labels


def owner_reference(service: Obj) -> Obj:
    meta = service.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Service", "name": meta.get("name", ""), "uid": meta.get("uid", ""),
            "controller": True, "blockOwnerDeletion": True}


def desired_slices(service: Obj, backends: Iterable[Backend], *, max_endpoints: int = MAX_ENDPOINTS_PER_SLICE) -> list[Obj]:
    """Slice bodies (without names): one per port set and chunk; a placeholder when empty."""
    meta = service.get("metadata") or {}
    bodies: list[Obj] = []

    def body(ports: tuple[Port, ...], members: list[Backend]) -> Obj:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "generateName": f"{meta.get('name', '')}-",
                "namespace": meta.get("namespace", ""),
                "labels": slice_labels(service),
                "ownerReferences": [owner_reference(service)],
            },
            "addressType": "IPv4",
            "endpoints": [b.to_slice_endpoint() for b in members],
            "ports": [p.to_slice() for p in ports],
        }

    for ports, members in _grouped(backends):
        for start in range(0, len(members), max_endpoints):
            bodies.append(body(ports, members[start:start + max_endpoints]))
    if not bodies:
        bodies.append(body((), []))
    return bodies


@dataclass(frozen=True)
class SlicePlan:
    create: tuple[Obj, ...] = ()
    update: tuple[Obj, ...] = ()  # existing slices with new contents (resourceVersion kept)
    delete: tuple[str, ...] = ()  # names

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


SLICE_FIELDS = ("addressType", "endpoints", "ports")


def _same_contents(existing: Obj, wanted: Obj) -> bool:
    emeta, wmeta = existing.get("metadata") or {}, wanted["metadata"]
    return (all(existing.get(f) == wanted.get(f) for f in SLICE_FIELDS)
            and (emeta.get("labels") or {}) == wmeta["labels"]
            and (emeta.get("ownerReferences") or []) == wmeta["ownerReferences"])


def _ports_of(slice_obj: Obj) -> list[Any]:
    return sorted(json_key(p) for p in slice_obj.get("ports") or [])


def json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def plan_slices(wanted: list[Obj], existing: Iterable[Obj]) -> SlicePlan:
    """Reuse existing slices (same content first, then same ports, then any), create or delete the rest."""
    free = sorted(existing, key=lambda s: (s.get("metadata") or {}).get("name", ""))
    keep: list[Obj] = []
    unmatched: list[Obj] = []
    for body in wanted:
        match = next((s for s in free if _same_contents(s, body)), None)
        if match is not None:
            free.remove(match)
            keep.append(match)
        else:
            unmatched.append(body)
    updates: list[Obj] = []
    creates: list[Obj] = []
    for body in unmatched:
        match = next((s for s in free if _ports_of(s) == _ports_of(body)), None) or (free[0] if free else None)
        if match is None:
            creates.append(body)
            continue
        free.remove(match)
        updated = copy.deepcopy(match)
        for f in SLICE_FIELDS:
            updated[f] = copy.deepcopy(body[f])
        updated["metadata"]["labels"] = dict(body["metadata"]["labels"])
        updated["metadata"]["ownerReferences"] = copy.deepcopy(body["metadata"]["ownerReferences"])
        updates.append(updated)
    deletes = tuple(str((s.get("metadata") or {}).get("name", "")) for s in free)
    return SlicePlan(create=tuple(creates), update=tuple(updates), delete=deletes)


def endpoints_differ(existing: Obj | None, wanted: Obj) -> bool:
    if existing is None:
        return True
    return (existing.get("subsets") or []) != (wanted.get("subsets") or []) or (
        (existing.get("metadata") or {}).get("labels") or {}) != wanted["metadata"]["labels"]


def services_selecting(services: Iterable[Obj], labels: Mapping[str, Any] | None) -> list[SvcKey]:
    keys = []
    for svc in services:
        selector = selector_of(svc)
        if selector is not None and selects(selector, labels):
            meta = svc["metadata"]
            keys.append((str(meta.get("namespace", "")), str(meta.get("name", ""))))
    return keys


# the controller --------------------------------------------------------------------------------


class EndpointsController:
    def __init__(self, ops: Operations, *, max_endpoints_per_slice: int = MAX_ENDPOINTS_PER_SLICE) -> None:
        self.ops = ops
        self.max_endpoints = max_endpoints_per_slice
        self.engine: Engine[SvcKey] = Engine("endpoints-controller", self._reconcile, workers=2)
        self._opts = WriteOptions(manager=ENDPOINTS_MANAGER, user="system:controller:endpoint-controller")
        self._slice_opts = WriteOptions(manager=SLICE_MANAGER, user="system:controller:endpointslice-controller")

    async def run(self) -> None:
        store = self.ops.store
        watcher, _ = store.watch(None, None, store.revision, resources=OBSERVED)
        for svc in store.list_objects(SERVICES):
            self.engine.enqueue((svc["metadata"].get("namespace", ""), svc["metadata"]["name"]))
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(self._feed(watcher))

    async def _feed(self, watcher: Any) -> None:
        store = self.ops.store
        try:
            while True:
                try:
                    event: Event | None = await watcher.next(None)
                except WatchOverflow:
                    watcher, _ = store.watch(None, None, store.revision, resources=OBSERVED)
                    for svc in store.list_objects(SERVICES):
                        self.engine.enqueue((svc["metadata"].get("namespace", ""), svc["metadata"]["name"]))
                    continue
                if event is not None:
                    self.observe(event)
        finally:
            watcher.close()

    def observe(self, event: Event) -> None:
        if event.resource in (SERVICES, ENDPOINTS):
            self.engine.enqueue((event.namespace, event.name))
        elif event.resource == SLICES:
            name = ((event.obj.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL)
            if name:
                self.engine.enqueue((event.namespace, str(name)))
        elif event.resource == PODS:
            services = self.ops.store.list_objects(SERVICES, event.namespace)
            keys = set(services_selecting(services, (event.obj.get("metadata") or {}).get("labels")))
            if event.prev is not None:
                keys.update(services_selecting(services, (event.prev.get("metadata") or {}).get("labels")))
            for key in keys:
                self.engine.enqueue(key)
        elif event.resource == NODES:
            for svc in self.ops.store.list_objects(SERVICES):
                if selector_of(svc) is not None:
                    self.engine.enqueue((svc["metadata"].get("namespace", ""), svc["metadata"]["name"]))

    def _zones(self) -> dict[str, str]:
        zones = {}
        for node in self.ops.store.list_objects(NODES):
            zone = ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
            if zone:
                zones[node["metadata"]["name"]] = str(zone)
        return zones

    def _owned_slices(self, namespace: str, name: str) -> list[Obj]:
        return [s for s in self.ops.store.list_objects(SLICES, namespace)
                if ((s.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL) == name
                and s["metadata"]["labels"].get(MANAGED_BY_LABEL) == SLICE_MANAGER]

    async def _reconcile(self, key: SvcKey) -> None:
        namespace, name = key
        store = self.ops.store
        service = store.get(SERVICES, namespace, name)
        ep_rt = self.ops.registry.lookup("", "v1", "endpoints")
        slice_rt = self.ops.registry.lookup("discovery.k8s.io", "v1", "endpointslices")
        assert ep_rt is not None and slice_rt is not None
        existing_ep = store.get(ENDPOINTS, namespace, name)
        if service is None or selector_of(service) is None or service["metadata"].get("deletionTimestamp"):
            if service is None and existing_ep is not None and (
                    (existing_ep["metadata"].get("labels") or {}).get(ENDPOINTS_MANAGED_BY_LABEL) == ENDPOINTS_MANAGER):
                self._delete(ep_rt, namespace, name, self._opts)
            if service is None:
                for leftover in self._owned_slices(namespace, name):
                    self._delete(slice_rt, namespace, leftover["metadata"]["name"], self._slice_opts)
            return
        backends = backends_for(service, store.list_objects(PODS, namespace), self._zones())
        wanted_ep = plan_endpoints(service, backends)
        if endpoints_differ(existing_ep, wanted_ep):
            if existing_ep is None:
                self._create(ep_rt, namespace, wanted_ep, self._opts)
            else:
                updated = copy.deepcopy(existing_ep)
                updated["metadata"]["labels"] = wanted_ep["metadata"]["labels"]
                updated.pop("subsets", None)
                if "subsets" in wanted_ep:
                    updated["subsets"] = wanted_ep["subsets"]
                self.ops.update(ep_rt, namespace, name, updated, self._opts)
        plan = plan_slices(desired_slices(service, backends, max_endpoints=self.max_endpoints),
                           self._owned_slices(namespace, name))
        for body in plan.create:
            self._create(slice_rt, namespace, body, self._slice_opts)
        for body in plan.update:
            self.ops.update(slice_rt, namespace, body["metadata"]["name"], body, self._slice_opts)
        for slice_name in plan.delete:
            self._delete(slice_rt, namespace, slice_name, self._slice_opts)

    def _create(self, rt: Any, namespace: str, body: Obj, opts: WriteOptions) -> None:
        try:
            self.ops.create(rt, namespace, body, opts)
        except ApiError as exc:
            if exc.code == 403 or (exc.code == 404 and exc.kind == "namespaces"):
                return  # the namespace is gone or going: nothing to keep
            raise

    def _delete(self, rt: Any, namespace: str, name: str, opts: WriteOptions) -> None:
        try:
            self.ops.delete(rt, namespace, name, {}, opts)
        except ApiError as exc:
            if not exc.not_found:
                raise
