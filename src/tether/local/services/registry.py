"""The Service registry's background part: the `kubernetes` Service and the allocation repair loop.

The `kubernetes` Service in `default` gets the first address of the service range and port 443;
its Endpoints and EndpointSlice point at the API server's real address, read from the cluster
once it serves (the port may change between restarts, so it is checked at every start).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether.local.errors import ApiError
from tether.local.network import ClusterNetwork
from tether.local.operations import Operations, WriteOptions
from tether.local.services.allocation import SERVICES, ServiceAllocator
from tether.local.services.endpoints import ENDPOINTS, SERVICE_NAME_LABEL, SLICES
from tether.local.store import WatchOverflow
from tether.objects import Obj

log = logging.getLogger(__name__)

MANAGER = "kube-apiserver"
API_PORT_NAME = "https"


@dataclass(frozen=True)
class MasterService:
    """What the `kubernetes` Service and its endpoints should say."""

    cluster_ip: str
    host: str
    port: int

    def service(self) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": self.cluster_ip,
                "clusterIPs": [self.cluster_ip],
                "sessionAffinity": "None",
                "ports": [{"name": API_PORT_NAME, "port": 443, "protocol": "TCP", "targetPort": self.port}],
            },
        }

    def endpoints(self) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": self.host}],
                         "ports": [{"name": API_PORT_NAME, "port": self.port, "protocol": "TCP"}]}],
        }

    def endpoint_slice(self) -> Obj:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.host],
                           "conditions": {"ready": True, "serving": True, "terminating": False}}],
            "ports": [{"name": API_PORT_NAME, "port": self.port, "protocol": "TCP"}],
        }


def plan_master_update(existing: Obj | None, wanted: Obj, fields: tuple[str, ...]) -> Obj | None:
    """The object to write (existing with `fields` replaced), or None when nothing differs."""
    if existing is None:
        return copy.deepcopy(wanted)
    updated = copy.deepcopy(existing)
    for name in fields:
        if name == "metadata.labels":
            labels = dict(updated["metadata"].get("labels") or {})
            labels.update(wanted["metadata"].get("labels") or {})
            updated["metadata"]["labels"] = labels
        elif name == "spec":
            spec = dict(updated.get("spec") or {})
            spec.update(wanted["spec"])
            updated["spec"] = spec
        else:
            updated[name] = copy.deepcopy(wanted[name])
    return None if updated == existing else updated


class ServiceRegistry:
    """Ensures the `kubernetes` Service; keeps the allocator's in-use sets in step with the store."""

    def __init__(self, ops: Operations, network: ClusterNetwork, allocator: ServiceAllocator,
                 api_address: Callable[[], tuple[str, int]], wait_started: Callable[[], Awaitable[Any]], *,
                 repair_interval_s: float = 60.0, start_timeout_s: float = 120.0) -> None:
        self.ops = ops
        self.network = network
        self.allocator = allocator
        self.api_address = api_address
        self.wait_started = wait_started
        self.repair_interval_s = repair_interval_s
        self.start_timeout_s = start_timeout_s
        self._opts = WriteOptions(manager=MANAGER, user="system:apiserver")

    async def run(self) -> None:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that arrives
        # as the awaited event fires, and a cluster stopped right after it started then hangs.
        async with asyncio.timeout(self.start_timeout_s):
            await self.wait_started()
        self.allocator.rebuild()
        self.ensure_master()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._repair())
            group.create_task(self._follow_deletes())

    def ensure_master(self) -> None:
        host, port = self.api_address()
        master = MasterService(self.network.api_service_ip, host, port)
        for (group, resource, key), body, fields in (
            (("", "services", SERVICES), master.service(), ("metadata.labels", "spec")),
            (("", "endpoints", ENDPOINTS), master.endpoints(), ("metadata.labels", "subsets")),
            (("discovery.k8s.io", "endpointslices", SLICES), master.endpoint_slice(),
             ("metadata.labels", "addressType", "endpoints", "ports")),
        ):
            rt = self.ops.registry.lookup(group, "v1", resource)
            assert rt is not None
            existing = self.ops.store.get(key, "default", "kubernetes")
            write = plan_master_update(existing, body, fields)
            if write is None:
                continue
            try:
                if existing is None:
                    self.ops.create(rt, "default", write, self._opts)
                else:
                    self.ops.update(rt, "default", "kubernetes", write, self._opts)
            except ApiError as exc:
                log.warning("could not write the kubernetes %s: %s", resource, exc)

    async def _repair(self) -> None:
        while True:
            await asyncio.sleep(self.repair_interval_s)
            self.allocator.rebuild()
            self.ensure_master()

    async def _follow_deletes(self) -> None:
        store = self.ops.store
        watcher, _ = store.watch(SERVICES, None, store.revision)
        try:
            while True:
                try:
                    event = await watcher.next(None)
                except WatchOverflow:
                    watcher, _ = store.watch(SERVICES, None, store.revision)
                    self.allocator.rebuild()
                    continue
                if event is not None and event.type == "DELETED":
                    self.allocator.in_use.release((event.namespace, event.name))
                    if (event.namespace, event.name) == ("default", "kubernetes"):
                        self.ensure_master()
        finally:
            watcher.close()
