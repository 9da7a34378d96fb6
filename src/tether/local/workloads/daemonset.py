"""DaemonSet → one pod on every node its template fits.

Like the real controller, each pod gets a required node affinity `metadata.name In [node]`
instead of a nodeName, so the scheduler still binds it (and reports why, if it cannot).
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.local.store import Event
from tether.local.workloads.common import (
    REVISION_HASH_LABEL,
    Note,
    NsName,
    available,
    claim,
    finished,
    int_field,
    meta,
    next_available,
    pod_from_template,
    ready,
    scaled,
    template_hash,
    terminating,
)
from tether.local.workloads.placement import fits, target_node
from tether.local.workloads.runtime import NODES, PODS, Controller
from tether.objects import Obj
from tether.objects.times import parse_time

RESOURCE = "apps/daemonsets"
GENERATION_LABEL = "pod-template-generation"
# Taints a daemon must ride out: it serves the node whatever its condition (upstream
# AddOrUpdateDaemonPodTolerations).
DAEMON_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")


@dataclass(frozen=True)
class DaemonSetPlan:
    create: tuple[str, ...] = ()  # node names
    delete: tuple[str, ...] = ()  # pod names
    adopt: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    requeue_after: float | None = None


def daemon_pod_spec(template_spec: Obj, node_name: str | None) -> Obj:
    """The template's pod spec with the daemon tolerations, pinned to `node_name` if given."""
    spec = copy.deepcopy(template_spec)
    tolerations = list(spec.get("tolerations") or [])
    wanted = list(DAEMON_TOLERATIONS) + ([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])
    for key, effect in wanted:
        if not any(isinstance(t, dict) and t.get("key") == key and t.get("effect") == effect for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    spec["tolerations"] = tolerations
    if node_name is not None:
        node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        # Upstream replaces every required term with this one: the node was already chosen
        # against them.
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    return spec


def daemon_pod(ds: Obj, node_name: str) -> Obj:
    template = (ds.get("spec") or {}).get("template") or {}
    pod = pod_from_template(ds, template, extra_labels={
        REVISION_HASH_LABEL: template_hash(template),
        GENERATION_LABEL: str(int_field(ds, "metadata", "generation")),
    })
    pod["metadata"]["generateName"] = f"{meta(ds).get('name', '')}-"
    pod["spec"] = daemon_pod_spec(template.get("spec") or {}, node_name)
    return pod


def _oldest(pods: list[Obj]) -> list[Obj]:
    return sorted(pods, key=lambda p: (parse_time(meta(p).get("creationTimestamp")) or dt.datetime.max.replace(
        tzinfo=dt.UTC), meta(p).get("name", "")))


def plan_daemonset(ds: Obj, nodes: Iterable[Obj], pods: Iterable[Obj], now: dt.datetime) -> DaemonSetPlan:
    spec = ds.get("spec") or {}
    template = spec.get("template") or {}
    check_spec = daemon_pod_spec(template.get("spec") or {}, None)
    min_ready = int_field(spec, "minReadySeconds")
    current_hash = template_hash(template)
    found = claim(ds, spec.get("selector"), pods)
    by_node: dict[str, list[Obj]] = {}
    for pod in found.owned:
        if not terminating(pod):
            by_node.setdefault(target_node(pod), []).append(pod)
    deleting = terminating(ds)
    create: list[str] = []
    delete: list[str] = []
    desired = scheduled = misscheduled = ready_count = available_count = updated = 0
    old_on: list[tuple[Obj, bool]] = []  # (pod on an old revision, available)
    node_names = set()
    for node in sorted(nodes, key=lambda n: meta(n).get("name", "")):
        name = meta(node).get("name", "")
        node_names.add(name)
        here = by_node.get(name, [])
        if not fits(check_spec, node):
            if here:
                misscheduled += 1
                delete += [meta(p).get("name", "") for p in here]
            continue
        desired += 1
        # Ran to an end (a daemon never should): replace it.
        delete += [meta(p).get("name", "") for p in here if finished(p)]
        running = _oldest([p for p in here if not finished(p)])
        if not running:
            create.append(name)
            continue
        scheduled += 1
        delete += [meta(p).get("name", "") for p in running[1:]]  # one per node: keep the oldest
        pod = running[0]
        is_available = available(pod, min_ready, now)
        ready_count += ready(pod)
        available_count += is_available
        if (meta(pod).get("labels") or {}).get(REVISION_HASH_LABEL) == current_hash:
            updated += 1
        else:
            old_on.append((pod, is_available))
    # Pods aimed at nodes that no longer exist.
    for node_name, here in by_node.items():
        if node_name not in node_names:
            delete += [meta(p).get("name", "") for p in here]
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate" and not create:
        limit = scaled((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1), desired, round_up=True)
        unavailable = desired - available_count
        for pod, is_available in old_on:
            if not is_available:
                delete.append(meta(pod).get("name", ""))  # costs no availability
            elif unavailable < max(limit, 1):
                delete.append(meta(pod).get("name", ""))
                unavailable += 1
    status: Obj = {
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": ready_count,
        **{k: v for k, v in {
            "observedGeneration": int_field(ds, "metadata", "generation"),
            "updatedNumberScheduled": updated,
            "numberAvailable": available_count,
            "numberUnavailable": desired - available_count,
        }.items() if v},
    }
    wait = next_available((p for pods_here in by_node.values() for p in pods_here), min_ready, now)
    if deleting:
        return DaemonSetPlan(status=status, requeue_after=wait)
    return DaemonSetPlan(create=tuple(create), delete=tuple(dict.fromkeys(delete)), adopt=found.adopt,
                         release=found.release, status=status, requeue_after=wait)


class DaemonSetController(Controller):
    manager = "daemonset-controller"
    resource = RESOURCE
    kind = "DaemonSet"
    adopts_orphans = True
    also_watches = (NODES,)

    def keys_for(self, event: Event) -> Iterable[NsName]:
        yield from super().keys_for(event)
        if event.resource == NODES:  # a node came, went or changed labels or taints
            for ds in self.store.list_objects(RESOURCE):
                yield (meta(ds).get("namespace", ""), meta(ds).get("name", ""))

    async def reconcile(self, key: NsName) -> None:
        namespace, name = key
        ds = self.store.get(RESOURCE, namespace, name)
        if ds is None:
            return
        nodes = self.store.list_objects(NODES)
        plan = plan_daemonset(ds, nodes, self.children_in(namespace), dt.datetime.now(dt.UTC))
        uid = meta(ds).get("uid", "")
        for pod_name in plan.adopt:
            self.writer.set_controller(PODS, namespace, pod_name, ds, uid)
        for pod_name in plan.release:
            self.writer.set_controller(PODS, namespace, pod_name, None, uid)
        for pod_name in plan.delete:
            pod = self.store.get(PODS, namespace, pod_name)
            if pod is not None and self.writer.delete(PODS, pod):
                self.writer.record(ds, Note("SuccessfulDelete", f"Deleted pod: {pod_name}"))
        for node_name in plan.create:
            created = self.writer.create(PODS, daemon_pod(ds, node_name))
            if created is not None:
                self.writer.record(ds, Note("SuccessfulCreate", f"Created pod: {meta(created)['name']}"))
        current = self.store.get(RESOURCE, namespace, name)
        if current is not None and meta(current).get("uid") == uid:
            self.writer.write_status(RESOURCE, current, plan.status)
        if plan.requeue_after is not None:
            self.engine.enqueue(key, delay_s=plan.requeue_after + 0.05)
