"""The hub's ClusterTaintPolicy and WorkloadRebalancer controllers, and `tether rebalance`.

- ClusterTaintPolicyController (Karmada's cluster-taint-policy-controller): reconciles a Cluster
  when its conditions change or a ClusterTaintPolicy is created or changed, applying every policy
  that targets it (`taints.apply_taint_policies`) and patching `spec.taints` with the Cluster's
  resourceVersion (a concurrent write by the health controller makes it try again).
- WorkloadRebalancerController (apps.karmada.io/v1alpha1 WorkloadRebalancer): for each new
  generation, asks the Karmada sync controller for a fresh schedule of every listed workload
  (`KarmadaController.rebalance`: Divided replicas are divided again over today's clusters, and a
  template that failed over to a backup `clusterAffinities` group tries its first group again),
  then writes `status.observedWorkloads` (result Successful or Failed, reason
  `ReferencedBindingNotFound` when the workload does not exist or no policy claims it),
  `observedGeneration` and `finishTime`; with `ttlSecondsAfterFinished` it deletes the
  rebalancer that long after it finished.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.engine import Engine, RequeueAfter
from tether.kube import Conflict, Informer, KubeClient, NotFound, WatchEvent
from tether.objects import Obj
from tether.objects.times import rfc3339, seconds_of

from ._util import as_int, items, mapping, nested
from .affinity import cluster_matches_affinity
from .crds import CLUSTER_API_VERSION, KARMADA_APPS_GROUP, KARMADA_POLICY_GROUP
from .propagation import HubInformers, KarmadaController, cluster_info
from .taints import apply_taint_policies

log = logging.getLogger(__name__)
FIELD_MANAGER = "tether-failover"
TAINT_POLICY_API = f"{KARMADA_POLICY_GROUP}/v1alpha1"
REBALANCER_API = f"{KARMADA_APPS_GROUP}/v1alpha1"
REBALANCE_WAIT_S = 60.0
NOT_FOUND = "ReferencedBindingNotFound"


@dataclass
class ClusterTaintPolicyController:
    host: KubeClient
    shared: HubInformers
    clock: Callable[[], float] = time.time
    policies: Informer = field(init=False)
    engine: Engine[str] = field(init=False)
    _conditions: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.engine = Engine("cluster-taint-policy", self.reconcile, workers=2)
        self.policies = Informer(self.host, TAINT_POLICY_API, "ClusterTaintPolicy",
                                 on_event=self._on_policy)
        self.shared.cluster_handlers.append(self._on_cluster)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.policies.run())
            group.create_task(self.engine.run())

    @property
    def synced(self) -> bool:
        return self.policies.synced

    def _on_cluster(self, event: WatchEvent) -> None:
        name = event.key.name
        if event.type == "DELETED":
            self._conditions.pop(name, None)
            return
        conditions = nested(event.object, "status", "conditions")
        if self._conditions.get(name) != conditions:
            self._conditions[name] = conditions
            self.engine.enqueue(name)

    def _on_policy(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            return  # Karmada leaves the taints a deleted policy added
        for cluster in self.shared.clusters.list():
            self.engine.enqueue(str(nested(cluster, "metadata", "name")))

    def _targeting(self, cluster: Obj) -> list[Obj]:
        info = cluster_info(cluster)
        if info is None:
            return []
        chosen = [p for p in self.policies.list()
                  if nested(p, "spec", "targetClusters") is None
                  or cluster_matches_affinity(info, nested(p, "spec", "targetClusters"))]
        return sorted(chosen, key=lambda p: (str(nested(p, "metadata", "creationTimestamp")),
                                             str(nested(p, "metadata", "name"))))

    async def reconcile(self, name: str) -> None:
        cluster = self.shared.clusters.get(None, name)
        if cluster is None:
            return
        policies = self._targeting(cluster)
        if not policies:
            return
        current = [mapping(t) for t in items(nested(cluster, "spec", "taints"))]
        wanted = apply_taint_policies(current, items(nested(cluster, "status", "conditions")),
                                      policies, self.clock())
        if wanted == [dict(t) for t in current]:
            return
        body = {"metadata": {"resourceVersion": nested(cluster, "metadata", "resourceVersion")},
                "spec": {"taints": wanted}}
        try:
            await self.host.request("PATCH", f"/apis/{CLUSTER_API_VERSION}/clusters/{name}",
                                    body=body, content_type="application/merge-patch+json",
                                    params={"fieldManager": FIELD_MANAGER})
        except Conflict:
            raise RequeueAfter(0.2) from None  # the informer brings the newer Cluster
        except NotFound:
            return
        log.info("cluster %s: taints now %s", name, wanted)


@dataclass
class WorkloadRebalancerController:
    host: KubeClient
    karmada: KarmadaController
    clock: Callable[[], float] = time.time
    wait_s: float = REBALANCE_WAIT_S
    rebalancers: Informer = field(init=False)
    engine: Engine[str] = field(init=False)

    def __post_init__(self) -> None:
        self.engine = Engine("workload-rebalancer", self.reconcile, workers=2)
        self.rebalancers = Informer(self.host, REBALANCER_API, "WorkloadRebalancer",
                                    on_event=lambda e: self.engine.enqueue(e.key.name))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.rebalancers.run())
            group.create_task(self.engine.run())

    @property
    def synced(self) -> bool:
        return self.rebalancers.synced

    async def reconcile(self, name: str) -> None:
        obj = self.rebalancers.get(None, name)
        if obj is None or nested(obj, "metadata", "deletionTimestamp"):
            return
        status = mapping(obj.get("status"))
        generation = as_int(nested(obj, "metadata", "generation"), 1)
        if status.get("observedGeneration") == generation and status.get("finishTime"):
            await self._expire(obj)
            return
        results = await asyncio.gather(*(self._rebalance(mapping(w)) for w in
                                         items(nested(obj, "spec", "workloads"))))
        observed = [{"workload": dict(ref), "result": result, **({"reason": reason}
                                                                 if reason else {})}
                    for ref, result, reason in results]
        body = {"apiVersion": REBALANCER_API, "kind": "WorkloadRebalancer",
                "metadata": {"name": name},
                "status": {"observedWorkloads": observed, "observedGeneration": generation,
                           "finishTime": rfc3339(self.clock())}}
        try:
            await self.host.apply_status(body, field_manager=FIELD_MANAGER, force=True)
        except NotFound:
            return

    async def _rebalance(self, ref: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, str]:
        key = (str(ref.get("apiVersion", "")), str(ref.get("kind", "")),
               str(ref.get("namespace") or ""), str(ref.get("name", "")))
        try:  # asyncio.timeout: 3.11's wait_for can drop a cancellation (a stopping hub)
            async with asyncio.timeout(self.wait_s):
                outcome = await self.karmada.rebalance(key)
        except TimeoutError:
            return ref, "Failed", "Timeout"
        if outcome == "Successful":
            return ref, "Successful", ""
        return ref, "Failed", outcome if outcome == NOT_FOUND else ""

    async def _expire(self, obj: Obj) -> None:
        ttl = nested(obj, "spec", "ttlSecondsAfterFinished")
        finished = seconds_of(nested(obj, "status", "finishTime"))
        if not isinstance(ttl, int) or finished is None:
            return
        left = finished + ttl - self.clock()
        if left > 0:
            raise RequeueAfter(left)
        try:
            await self.host.delete(REBALANCER_API, "WorkloadRebalancer",
                                   str(nested(obj, "metadata", "name")))
        except NotFound:
            pass


# `tether rebalance` ------------------------------------------------------------------------------


def rebalancer_name(workloads: Sequence[Mapping[str, Any]], now: float) -> str:
    text = repr([sorted(w.items()) for w in workloads]) + f"{now:.6f}"
    return "rebalance-" + hashlib.sha256(text.encode()).hexdigest()[:10]


async def rebalance(host: KubeClient, workloads: Sequence[Mapping[str, Any]], *, name: str = "",
                    ttl_s: int | None = 300, timeout_s: float = REBALANCE_WAIT_S + 30) -> Obj:
    """Create a WorkloadRebalancer for `workloads` and wait until the hub has handled it; the
    returned object's status has the per-workload results."""
    name = name or rebalancer_name(workloads, time.time())
    spec: dict[str, Any] = {"workloads": [dict(w) for w in workloads]}
    if ttl_s is not None:
        spec["ttlSecondsAfterFinished"] = ttl_s
    body = {"apiVersion": REBALANCER_API, "kind": "WorkloadRebalancer",
            "metadata": {"name": name}, "spec": spec}
    created = await host.create(body)
    generation = nested(created, "metadata", "generation") or 1
    deadline = time.monotonic() + timeout_s
    while True:
        current = await host.get(REBALANCER_API, "WorkloadRebalancer", name)
        status = mapping(current.get("status"))
        if status.get("finishTime") and status.get("observedGeneration") == generation:
            return current
        if time.monotonic() > deadline:
            raise TimeoutError(f"WorkloadRebalancer {name} not handled within {timeout_s:.0f}s: "
                               "is `tether hub run` running against this hub?")
        await asyncio.sleep(0.2)
