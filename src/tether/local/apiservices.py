"""APIServices (apiregistration.k8s.io/v1): the local API groups as kube-apiserver registers them,
and an `Available` condition on every APIService.

Every group/version the cluster serves itself (built-in, custom resources' and metrics.k8s.io) has
an APIService `<version>.<group>` (`v1.` for the core group) with `spec.service: null`, its
group's priorities and `Available=True`, reason `Local`; they come and go with the CRDs that
serve them. An APIService that names a Service is stored and given `Available=False` with the
reason kube-aggregator would give (`ServiceNotFound`, `MissingEndpoints`); when the Service has
endpoints the reason is `FailedDiscoveryCheck`, because local clusters do not proxy aggregated
APIs: the group is not served.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.engine import Engine
from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import Registry, ResourceType, group_priority
from tether.local.store import follow
from tether.objects import Obj, times

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

log = logging.getLogger(__name__)

APISERVICES = "apiregistration.k8s.io/apiservices"
SERVICES = "/services"
ENDPOINTS = "/endpoints"
CRDS = "apiextensions.k8s.io/customresourcedefinitions"
OBSERVED = (APISERVICES, SERVICES, ENDPOINTS, CRDS)
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
BUILTIN_MARK = "onstart"  # registered when the server starts (built-in groups)
CUSTOM_MARK = "true"  # registered while a CRD serves the group
MANAGER = "kube-apiserver"
SYNC_LOCAL = ""  # the engine key that reconciles the set of local APIServices


def apiservice_name(group: str, version: str) -> str:
    return f"{version}.{group}"


def local_apiservices(registry: Registry) -> dict[str, Obj]:
    """name -> the APIService kube-apiserver registers for each group/version it serves."""
    out: dict[str, Obj] = {}
    for group, versions in registry.group_versions().items():
        group_minimum, version_priority = group_priority(group)
        custom = any(rt.crd for v in versions for rt in registry.in_group_version(group, v))
        for version in versions:
            name = apiservice_name(group, version)
            out[name] = {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name, "labels": {AUTOMANAGED: CUSTOM_MARK if custom else BUILTIN_MARK}},
                "spec": {"service": None, "group": group, "version": version,
                         "groupPriorityMinimum": group_minimum, "versionPriority": version_priority},
            }
    return out


@dataclass(frozen=True)
class Availability:
    status: str
    reason: str
    message: str


LOCAL = Availability("True", "Local", "Local APIServices are always available")


def availability(spec: Obj, service: Obj | None, endpoints: Obj | None) -> Availability:
    """The Available condition kube-aggregator's availability controller would set."""
    reference = spec.get("service")
    if not isinstance(reference, dict):
        return LOCAL
    namespace, name = str(reference.get("namespace", "")), str(reference.get("name", ""))
    if service is None:
        return Availability("False", "ServiceNotFound", f'service/{name} in "{namespace}" is not present')
    port = reference.get("port", 443)
    ports = [p for p in (service.get("spec") or {}).get("ports") or [] if isinstance(p, dict)]
    match = next((p for p in ports if p.get("port") == port), None)
    if (service.get("spec") or {}).get("type") != "ExternalName" and match is None:
        return Availability("False", "ServicePortError", f"service/{name} in \"{namespace}\" is not listening "
                            f"on port {port}")
    port_name = str((match or {}).get("name", ""))
    addresses = [a for subset in (endpoints or {}).get("subsets") or [] if isinstance(subset, dict)
                 if any(str(p.get("name", "")) == port_name for p in subset.get("ports") or [])
                 for a in subset.get("addresses") or []]
    if not addresses:
        return Availability("False", "MissingEndpoints", f'endpoints for service/{name} in "{namespace}" have no '
                            f'addresses with port name "{port_name}"')
    group, version = spec.get("group", ""), spec.get("version", "")
    return Availability("False", "FailedDiscoveryCheck",
                        f"failing or missing response from https://{name}.{namespace}.svc:{port}/apis/{group}/"
                        f"{version}: tether local clusters do not proxy aggregated APIs")


def with_condition(status: Any, wanted: Availability, now: str) -> Obj:
    """`status` with its Available condition set to `wanted` (transition time kept if unchanged)."""
    current = status if isinstance(status, dict) else {}
    conditions = [c for c in current.get("conditions") or [] if isinstance(c, dict)]
    old = next((c for c in conditions if c.get("type") == "Available"), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == wanted.status else None
    condition = {"type": "Available", "status": wanted.status, "lastTransitionTime": since or now,
                 "reason": wanted.reason, "message": wanted.message}
    return {**current, "conditions": [condition if c is old else c for c in conditions] if old is not None
            else [*conditions, condition]}


class APIServiceController:
    """Keeps the local APIServices registered and every APIService's Available condition true to
    what the cluster can serve."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.engine: Engine[str] = Engine("apiservices", self._reconcile)
        self._opts = WriteOptions(manager=MANAGER, user="system:apiserver")

    def _rt(self) -> ResourceType:
        rt = self.ops.registry.lookup("apiregistration.k8s.io", "v1", "apiservices")
        assert rt is not None
        return rt

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(follow(self.ops.store, None, None, resources=OBSERVED, resync=self._resync,
                                     on_event=lambda e: self._observe(e.resource, e.namespace, e.name)))

    def _resync(self) -> None:
        self.engine.enqueue(SYNC_LOCAL)
        for item in self.ops.store.list_objects(APISERVICES):
            self.engine.enqueue(item["metadata"]["name"])

    def _observe(self, resource: str, namespace: str, name: str) -> None:
        if resource == APISERVICES:
            self.engine.enqueue(name)
            self.engine.enqueue(SYNC_LOCAL)  # a deleted local one comes back, as upstream's do
        elif resource == CRDS:
            self.engine.enqueue(SYNC_LOCAL)
        else:  # a Service or its Endpoints: the APIServices that name it
            for item in self.ops.store.list_objects(APISERVICES):
                reference = (item.get("spec") or {}).get("service")
                if isinstance(reference, dict) and (reference.get("namespace"), reference.get("name")) == (
                        namespace, name):
                    self.engine.enqueue(item["metadata"]["name"])

    async def _reconcile(self, key: str) -> None:
        if key == SYNC_LOCAL:
            self._sync_local()
        else:
            self._sync_status(key)

    def _sync_local(self) -> None:
        rt = self._rt()
        desired = local_apiservices(self.ops.registry)
        for name, obj in desired.items():
            if self.ops.find(rt, "", name) is None:
                try:
                    self.ops.create(rt, "", copy.deepcopy(obj), self._opts)
                except ApiError as exc:
                    if exc.code != 409:
                        raise
        for item in self.ops.store.list_objects(APISERVICES):
            meta = item["metadata"]
            if meta["name"] not in desired and (meta.get("labels") or {}).get(AUTOMANAGED) == CUSTOM_MARK:
                try:
                    self.ops.delete(rt, "", meta["name"], {}, self._opts)
                except ApiError as exc:
                    if not exc.not_found:
                        raise

    def _sync_status(self, name: str) -> None:
        rt = self._rt()
        current = self.ops.find(rt, "", name)
        if current is None:
            return
        spec = current.get("spec") or {}
        reference = spec.get("service")
        service = endpoints = None
        if isinstance(reference, dict):
            where = (str(reference.get("namespace", "")), str(reference.get("name", "")))
            service = self.ops.store.get(SERVICES, *where)
            endpoints = self.ops.store.get(ENDPOINTS, *where)
        status = with_condition(current.get("status"), availability(spec, service, endpoints), times.now_rfc3339())
        if status == current.get("status"):
            return
        updated = copy.deepcopy(current)
        updated["status"] = status
        try:
            self.ops.update(rt, "", name, updated, self._opts, subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
            self.engine.enqueue(name)


def build(cluster: LocalCluster) -> list[Component]:
    return [APIServiceController(cluster.ops)]
