"""StatefulSet → Pods `<set>-<ordinal>`, created and removed in order (or all at once).

Revisions are `<set>-<template hash>` in the `controller-revision-hash` label. No
ControllerRevision objects are kept, so a pod recreated below a partition gets the update
revision's template (the real controller would restore the current revision's).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.local.workloads.common import (
    BURST_PER_PASS,
    REVISION_HASH_LABEL,
    Note,
    NsName,
    available,
    claim,
    finished,
    int_field,
    meta,
    next_available,
    phase,
    pod_from_template,
    ready,
    template_hash,
    terminating,
)
from tether.local.workloads.runtime import PODS, Controller
from tether.objects import Obj

RESOURCE = "apps/statefulsets"
CLAIMS = "/persistentvolumeclaims"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


@dataclass(frozen=True)
class StatefulSetPlan:
    create: tuple[int, ...] = ()  # ordinals
    delete: tuple[str, ...] = ()  # pod names, in order
    adopt: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    requeue_after: float | None = None


def ordinal_of(set_name: str, pod: Obj) -> int | None:
    match = re.fullmatch(rf"{re.escape(set_name)}-(\d+)", meta(pod).get("name", ""))
    return int(match.group(1)) if match else None


def update_revision(sts: Obj) -> str:
    return f"{meta(sts).get('name', '')}-{template_hash((sts.get('spec') or {}).get('template'))}"


def revision_of(pod: Obj) -> str:
    return str((meta(pod).get("labels") or {}).get(REVISION_HASH_LABEL, ""))


def running_and_ready(pod: Obj) -> bool:
    return phase(pod) == "Running" and ready(pod) and not terminating(pod)


def statefulset_pod(sts: Obj, ordinal: int, revision: str) -> Obj:
    spec = sts.get("spec") or {}
    set_name = meta(sts).get("name", "")
    name = f"{set_name}-{ordinal}"
    pod = pod_from_template(sts, spec.get("template"), extra_labels={
        POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal), REVISION_HASH_LABEL: revision,
    })
    pod["metadata"]["name"] = name
    pod_spec = pod["spec"]
    # Stable network identity: <pod>.<serviceName> resolves through the headless service.
    pod_spec["hostname"] = name
    if spec.get("serviceName"):
        pod_spec["subdomain"] = spec["serviceName"]
    claims = [t for t in spec.get("volumeClaimTemplates") or [] if isinstance(t, dict)]
    if claims:
        names = {meta(t).get("name") for t in claims}
        volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") not in names]
        volumes += [{"name": meta(t).get("name"),
                     "persistentVolumeClaim": {"claimName": f"{meta(t).get('name')}-{name}"}} for t in claims]
        pod_spec["volumes"] = volumes
    return pod


def statefulset_claims(sts: Obj, ordinal: int) -> list[Obj]:
    """The PersistentVolumeClaims a pod needs; they outlive it (retention policy Retain)."""
    spec = sts.get("spec") or {}
    pod_name = f"{meta(sts).get('name', '')}-{ordinal}"
    labels = dict((spec.get("selector") or {}).get("matchLabels") or {})
    out = []
    for template in spec.get("volumeClaimTemplates") or []:
        if not isinstance(template, dict):
            continue
        claim_meta: Obj = {"name": f"{meta(template).get('name')}-{pod_name}",
                           "namespace": meta(sts).get("namespace", "default")}
        if labels:
            claim_meta["labels"] = labels
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": claim_meta,
                    "spec": copy.deepcopy(template.get("spec") or {})})
    return out


def statefulset_status(sts: Obj, members: Iterable[Obj], update_rev: str, now: dt.datetime) -> Obj:
    spec = sts.get("spec") or {}
    min_ready = int_field(spec, "minReadySeconds")
    live = [p for p in members if not terminating(p)]
    old = sts.get("status") or {}
    current_rev = str(old.get("currentRevision") or update_rev)
    replicas = len(live)
    ready_count = sum(1 for p in live if running_and_ready(p))
    updated = sum(1 for p in live if revision_of(p) == update_rev)
    current = sum(1 for p in live if revision_of(p) == current_rev)
    rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
    if rolling and updated == replicas == int_field(spec, "replicas", default=1) and ready_count == replicas:
        current_rev, current = update_rev, updated  # the rolling update is complete
    counts = {"readyReplicas": ready_count, "currentReplicas": current, "updatedReplicas": updated}
    status: Obj = {
        "observedGeneration": int_field(sts, "metadata", "generation"),
        "replicas": replicas,
        "availableReplicas": sum(1 for p in live if running_and_ready(p) and available(p, min_ready, now)),
        **{k: v for k, v in counts.items() if v},
        "currentRevision": current_rev,
        "updateRevision": update_rev,
        "collisionCount": int_field(old, "collisionCount"),
    }
    return status


def plan_statefulset(sts: Obj, pods: Iterable[Obj], now: dt.datetime) -> StatefulSetPlan:
    spec = sts.get("spec") or {}
    set_name = meta(sts).get("name", "")
    found = claim(sts, spec.get("selector"), pods)
    members = {o: p for p in found.owned if (o := ordinal_of(set_name, p)) is not None}
    update_rev = update_revision(sts)
    status = statefulset_status(sts, members.values(), update_rev, now)
    min_ready = int_field(spec, "minReadySeconds")
    wait = next_available((p for p in members.values() if not terminating(p)), min_ready, now)
    plan = StatefulSetPlan(adopt=found.adopt, release=found.release, status=status, requeue_after=wait)
    if terminating(sts):
        return plan
    replicas = int_field(spec, "replicas", default=1)
    ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
    create: list[int] = []
    delete: list[str] = []

    def done() -> StatefulSetPlan:
        return StatefulSetPlan(create=tuple(create), delete=tuple(delete), adopt=found.adopt,
                               release=found.release, status=status, requeue_after=wait)

    # Replicas in order: create what is missing, replace what ran to an end. OrderedReady
    # stops at the first pod that is not yet Running, Ready and available.
    for ordinal in range(replicas):
        pod = members.get(ordinal)
        if pod is None:
            if len(create) >= BURST_PER_PASS:  # replicas may be 10^9: plan no more than a pass makes
                break
            create.append(ordinal)
        elif finished(pod) and not terminating(pod):
            delete.append(meta(pod).get("name", ""))
        elif running_and_ready(pod) and available(pod, min_ready, now):
            continue
        if ordered:
            return done()
    # Condemned pods (ordinal >= replicas) go highest first; in order, one at a time.
    for ordinal in sorted((o for o in members if o >= replicas), reverse=True):
        pod = members[ordinal]
        if terminating(pod):
            if ordered:
                return done()
            continue
        delete.append(meta(pod).get("name", ""))
        if ordered:
            return done()
    if create or delete:
        return done()
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return done()  # OnDelete: pods take the new template only when someone deletes them
    partition = int_field(strategy, "rollingUpdate", "partition")
    # Rolling update: replace the highest-ordinal pod on an old revision, one at a time,
    # waiting while any pod being replaced is not yet healthy again.
    for ordinal in range(replicas - 1, partition - 1, -1):
        pod = members.get(ordinal)
        if pod is None:
            return done()
        if revision_of(pod) != update_rev and not terminating(pod):
            delete.append(meta(pod).get("name", ""))
            return done()
        if not running_and_ready(pod):
            return done()
    return done()


class StatefulSetController(Controller):
    manager = "statefulset-controller"
    resource = RESOURCE
    kind = "StatefulSet"
    adopts_orphans = True

    async def reconcile(self, key: NsName) -> None:
        namespace, name = key
        sts = self.store.get(RESOURCE, namespace, name)
        if sts is None:
            return
        plan = plan_statefulset(sts, self.children_in(namespace), dt.datetime.now(dt.UTC))
        uid = meta(sts).get("uid", "")
        for pod_name in plan.adopt:
            self.writer.set_controller(PODS, namespace, pod_name, sts, uid)
        for pod_name in plan.release:
            self.writer.set_controller(PODS, namespace, pod_name, None, uid)
        revision = update_revision(sts)
        for pod_name in self.bounded_deletes(key, plan.delete):
            pod = self.store.get(PODS, namespace, pod_name)
            if pod is not None and self.writer.delete(PODS, pod):
                self.writer.record(sts, Note("SuccessfulDelete", f"delete Pod {pod_name} in StatefulSet {name} successful"))
            await asyncio.sleep(0)

        def missing() -> tuple[int, ...]:
            current = self.store.get(RESOURCE, namespace, name)
            if current is None or meta(current).get("uid") != uid:
                return ()
            return plan_statefulset(current, self.children_in(namespace), dt.datetime.now(dt.UTC)).create

        def create_pod(ordinal: int) -> bool:
            for pvc in statefulset_claims(sts, ordinal):
                if self.store.get(CLAIMS, namespace, pvc["metadata"]["name"]) is None and self.writer.create(CLAIMS, pvc):
                    self.writer.record(sts, Note("SuccessfulCreate", f"create Claim {pvc['metadata']['name']} Pod "
                                                                     f"{name}-{ordinal} in StatefulSet {name} success"))
            if self.writer.create(PODS, statefulset_pod(sts, ordinal, revision)) is None:
                return False
            self.writer.record(sts, Note("SuccessfulCreate", f"create Pod {name}-{ordinal} in StatefulSet {name} successful"))
            return True

        if plan.create:
            await self.create_in_batches(key, missing, create_pod)
        current = self.store.get(RESOURCE, namespace, name)
        if current is not None and meta(current).get("uid") == uid:
            self.writer.write_status(RESOURCE, current, plan.status)
        if plan.requeue_after is not None:
            self.engine.enqueue(key, delay_s=plan.requeue_after + 0.05)
