"""ReplicaSet → Pods: keep `spec.replicas` active pods that match the selector."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.local.workloads.common import (
    Note,
    NsName,
    active,
    available,
    claim,
    int_field,
    meta,
    next_available,
    phase,
    pod_from_template,
    ready,
    ready_since,
)
from tether.local.workloads.runtime import PODS, Controller
from tether.objects import Obj
from tether.objects.times import parse_time

RESOURCE = "apps/replicasets"
PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
EPOCH = dt.datetime.min.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class ReplicaSetPlan:
    create: int = 0
    delete: tuple[str, ...] = ()  # pod names, most expendable first
    adopt: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    requeue_after: float | None = None


def _stamp(moment: dt.datetime | None) -> float:
    return (moment or EPOCH).timestamp()


def deletion_order(pods: Iterable[Obj]) -> list[Obj]:
    """Pods in the order a scale-down removes them, as the real ActivePods ranking does:
    unscheduled before scheduled, Pending before Unknown before Running, not ready before ready,
    ready for less time before more, more restarts before fewer, newer before older."""

    def rank(pod: Obj) -> tuple[int, int, int, float, int, float]:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, dict))
        is_ready = ready(pod)
        return (
            1 if (pod.get("spec") or {}).get("nodeName") else 0,
            PHASE_RANK.get(phase(pod), 0),
            1 if is_ready else 0,
            -_stamp(ready_since(pod)) if is_ready else 0.0,
            -restarts,
            -_stamp(parse_time(meta(pod).get("creationTimestamp"))),
        )

    return sorted(pods, key=rank)


def replica_status(rs: Obj, pods: Iterable[Obj], now: dt.datetime) -> Obj:
    spec = rs.get("spec") or {}
    min_ready = int_field(spec, "minReadySeconds")
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    live = [p for p in pods if active(p)]
    status: Obj = {"replicas": len(live)}
    counts = {
        "fullyLabeledReplicas": sum(
            1 for p in live
            if all((meta(p).get("labels") or {}).get(k) == v for k, v in template_labels.items())
        ),
        "readyReplicas": sum(1 for p in live if ready(p)),
        "availableReplicas": sum(1 for p in live if available(p, min_ready, now)),
        "observedGeneration": int_field(rs, "metadata", "generation"),
    }
    # The real type omits zero counts (omitempty); so do we, so clients see the same shape.
    status.update({k: v for k, v in counts.items() if v})
    conditions = (rs.get("status") or {}).get("conditions")
    if conditions:
        status["conditions"] = conditions
    return status


def plan_replicaset(rs: Obj, pods: Iterable[Obj], now: dt.datetime) -> ReplicaSetPlan:
    spec = rs.get("spec") or {}
    found = claim(rs, spec.get("selector"), pods)
    live = [p for p in found.owned if active(p)]
    status = replica_status(rs, found.owned, now)
    wait = next_available(live, int_field(spec, "minReadySeconds"), now)
    if meta(rs).get("deletionTimestamp"):
        return ReplicaSetPlan(status=status, requeue_after=wait)
    diff = len(live) - int_field(spec, "replicas", default=1)
    create = max(-diff, 0)
    victims = tuple(meta(p).get("name", "") for p in deletion_order(live)[: max(diff, 0)])
    return ReplicaSetPlan(create=create, delete=victims, adopt=found.adopt, release=found.release,
                          status=status, requeue_after=wait)


class ReplicaSetController(Controller):
    manager = "replicaset-controller"
    resource = RESOURCE
    kind = "ReplicaSet"
    adopts_orphans = True

    async def reconcile(self, key: NsName) -> None:
        namespace, name = key
        rs = self.store.get(RESOURCE, namespace, name)
        if rs is None:
            return
        plan = plan_replicaset(rs, self.children_in(namespace), dt.datetime.now(dt.UTC))
        uid = meta(rs).get("uid", "")
        for pod_name in plan.adopt:
            self.writer.set_controller(PODS, namespace, pod_name, rs, uid)
        for pod_name in plan.release:
            self.writer.set_controller(PODS, namespace, pod_name, None, uid)
        body = pod_from_template(rs, (rs.get("spec") or {}).get("template"))
        body["metadata"]["generateName"] = f"{name}-"

        def missing() -> range:
            current = self.store.get(RESOURCE, namespace, name)
            if current is None or meta(current).get("uid") != uid:
                return range(0)
            return range(plan_replicaset(current, self.children_in(namespace), dt.datetime.now(dt.UTC)).create)

        def create_pod(_: int) -> bool:
            created = self.writer.create(PODS, body)
            if created is None:
                return False
            self.writer.record(rs, Note("SuccessfulCreate", f"Created pod: {meta(created)['name']}"))
            return True

        if plan.create:
            await self.create_in_batches(key, missing, create_pod)
        for pod_name in self.bounded_deletes(key, plan.delete):
            pod = self.store.get(PODS, namespace, pod_name)
            if pod is not None and self.writer.delete(PODS, pod):
                self.writer.record(rs, Note("SuccessfulDelete", f"Deleted pod: {pod_name}"))
            await asyncio.sleep(0)
        current = self.store.get(RESOURCE, namespace, name)
        if current is not None and meta(current).get("uid") == uid:
            self.writer.write_status(RESOURCE, current, plan.status)
        if plan.requeue_after is not None:
            self.engine.enqueue(key, delay_s=plan.requeue_after + 0.05)
