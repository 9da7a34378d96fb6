"""Deployment → ReplicaSets: one ReplicaSet per pod template, rolled as the real controller does.

Each reconcile takes one step, like the upstream sync: create the new ReplicaSet if missing,
then either scale the new one up (within maxSurge) or scale old ones down (keeping
replicas - maxUnavailable available), then report status. The next step runs when the
ReplicaSets' status moves, which enqueues the deployment through their ownerReferences.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.local.workloads.common import (
    TEMPLATE_HASH_LABEL,
    Note,
    NsName,
    claim,
    int_field,
    meta,
    owner_ref,
    scaled,
    set_condition,
    template_hash,
    terminating,
    without_label,
)
from tether.local.workloads.runtime import Controller
from tether.objects import Obj
from tether.objects.times import rfc3339

RESOURCE = "apps/deployments"
REPLICASETS = "apps/replicasets"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Deployment annotations that describe the deployment itself, never copied to its ReplicaSets
# (the same list `kubectl rollout undo` skips when it copies them back).
SKIP_ANNOTATIONS = frozenset({
    "kubectl.kubernetes.io/last-applied-configuration", REVISION, "deployment.kubernetes.io/revision-history",
    DESIRED, MAX_REPLICAS, "deprecated.deployment.rollback.to",
})


@dataclass(frozen=True)
class RsView:
    """What the rollout arithmetic needs of one ReplicaSet."""

    name: str
    replicas: int  # spec
    current: int = 0  # status.replicas: pods that exist
    ready: int = 0
    available: int = 0
    revision: int = 0
    created: str = ""

    @classmethod
    def of(cls, rs: Obj) -> RsView:
        status = rs.get("status") or {}
        try:
            revision = int((meta(rs).get("annotations") or {}).get(REVISION, "0"))
        except ValueError:
            revision = 0
        replicas = int_field(rs, "spec", "replicas", default=1)
        return cls(
            name=meta(rs).get("name", ""),
            replicas=replicas,
            current=int_field(status, "replicas"),
            ready=int_field(status, "readyReplicas"),
            # A ReplicaSet just scaled down is about to lose pods beyond its new size: never
            # count those as available, or an old status would let us scale down too far.
            available=min(int_field(status, "availableReplicas"), replicas),
            revision=revision,
            created=str(meta(rs).get("creationTimestamp") or ""),
        )


@dataclass(frozen=True)
class RsChange:
    name: str
    replicas: int
    annotations: tuple[tuple[str, str], ...] = ()  # set on the ReplicaSet (others kept)
    min_ready_seconds: int | None = None


@dataclass(frozen=True)
class DeploymentPlan:
    create: Obj | None = None  # a new ReplicaSet
    changes: tuple[RsChange, ...] = ()
    delete: tuple[str, ...] = ()  # old ReplicaSets beyond revisionHistoryLimit
    adopt: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    revision: str | None = None  # the deployment's own revision annotation, when it must change
    status: Obj = field(default_factory=dict)
    notes: tuple[Note, ...] = ()


# arithmetic ----------------------------------------------------------------------------------


def fenceposts(deployment: Obj, replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against replicas: surge rounds up, unavailable down,
    and both zero would deadlock, so unavailable becomes 1 (as upstream ResolveFenceposts)."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _oldest_first(views: Iterable[RsView]) -> list[RsView]:
    return sorted(views, key=lambda v: (v.created, v.name))


def rolling_step(replicas: int, surge: int, unavailable: int, new: RsView,
                 olds: Iterable[RsView]) -> dict[str, int]:
    """One RollingUpdate step: name -> new spec.replicas for the ReplicaSets that change.

    Scale the new ReplicaSet toward `replicas` without more than replicas+surge pods in all;
    if it cannot move, scale old ones down, unhealthy pods first, without dropping below
    replicas-unavailable available pods.
    """
    olds = _oldest_first(olds)
    every = [new, *olds]
    if new.replicas > replicas:
        return {new.name: replicas}
    if new.replicas < replicas:
        room = replicas + surge - sum(v.replicas for v in every)
        if room > 0:
            return {new.name: new.replicas + min(room, replicas - new.replicas)}
    if not any(o.replicas for o in olds):
        return {}
    min_available = replicas - unavailable
    new_unavailable = new.replicas - new.available
    budget = sum(v.replicas for v in every) - min_available - new_unavailable
    if budget <= 0:
        return {}
    targets: dict[str, int] = {}
    # Pods that are not available cost no availability: remove them first.
    cleaned = 0
    for old in olds:
        if cleaned >= budget:
            break
        if old.replicas == 0 or old.available == old.replicas:
            continue
        down = min(budget - cleaned, old.replicas - old.available)
        targets[old.name] = old.replicas - down
        cleaned += down
    excess = sum(v.available for v in every) - min_available
    done = 0
    for old in olds:
        if done >= excess:
            break
        current = targets.get(old.name, old.replicas)
        if current == 0:
            continue
        down = min(current, excess - done)
        targets[old.name] = current - down
        done += down
    return {k: v for k, v in targets.items() if v != next(o.replicas for o in olds if o.name == k)}


def recreate_step(replicas: int, new: RsView | None, olds: Iterable[RsView]) -> tuple[dict[str, int], bool]:
    """One Recreate step: (targets, may_create_new). Old ReplicaSets go to zero first, and the
    new one starts only when no old pod is left."""
    olds = list(olds)
    running = {o.name: 0 for o in olds if o.replicas > 0}
    if running:
        return running, False
    if any(o.current > 0 for o in olds):
        return {}, False
    if new is not None and new.replicas != replicas:
        return {new.name: replicas}, True
    return {}, True


def history_to_delete(olds: Iterable[RsView], limit: int) -> tuple[str, ...]:
    """Old, empty ReplicaSets beyond revisionHistoryLimit, lowest revision first."""
    olds = sorted(olds, key=lambda v: (v.revision, v.created, v.name))
    excess = len(olds) - max(limit, 0)
    if excess <= 0:
        return ()
    return tuple(v.name for v in olds[:excess] if v.replicas == 0 and v.current == 0)


# plan ----------------------------------------------------------------------------------------


def find_new(owned: Iterable[Obj], template: object) -> Obj | None:
    """The oldest ReplicaSet whose template is the deployment's, pod-template-hash aside."""
    for rs in sorted(owned, key=lambda r: (str(meta(r).get("creationTimestamp") or ""), meta(r).get("name", ""))):
        if without_label((rs.get("spec") or {}).get("template"), TEMPLATE_HASH_LABEL) == template:
            return rs
    return None


def _copied_annotations(deployment: Obj) -> dict[str, str]:
    return {k: v for k, v in (meta(deployment).get("annotations") or {}).items() if k not in SKIP_ANNOTATIONS}


def new_replicaset(deployment: Obj, pod_hash: str, replicas: int, annotations: Mapping[str, str]) -> Obj:
    spec = deployment.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    labels = {**(tmeta.get("labels") or {}), TEMPLATE_HASH_LABEL: pod_hash}
    tmeta["labels"] = labels
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TEMPLATE_HASH_LABEL: pod_hash}
    name = meta(deployment).get("name", "")
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{pod_hash}",
            "namespace": meta(deployment).get("namespace", "default"),
            "labels": dict(labels),
            "annotations": dict(annotations),
            "ownerReferences": [owner_ref(deployment)],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int_field(spec, "minReadySeconds"),
            "selector": selector,
            "template": template,
        },
    }


def _scale_note(name: str, old: int, new: int) -> Note:
    direction = "up" if new > old else "down"
    return Note("ScalingReplicaSet", f"Scaled {direction} replica set {name} to {new} from {old}")


def deployment_status(deployment: Obj, new: RsView | None, every: Iterable[RsView], *, unavailable_max: int,
                      progress: tuple[str, str, str] | None, now: str) -> Obj:
    """Status from the ReplicaSets (after this step's scaling) and a Progressing verdict
    (status, reason, message) or None to keep the current one."""
    every = list(every)
    spec = deployment.get("spec") or {}
    replicas = int_field(spec, "replicas", default=1)
    old_status = deployment.get("status") or {}
    available = sum(v.available for v in every)
    counts = {
        "observedGeneration": int_field(deployment, "metadata", "generation"),
        "replicas": sum(v.current for v in every),
        "updatedReplicas": new.current if new else 0,
        "readyReplicas": sum(v.ready for v in every),
        "availableReplicas": available,
        "unavailableReplicas": max(sum(v.replicas for v in every) - available, 0),
        "collisionCount": int_field(old_status, "collisionCount"),
    }
    status: Obj = {k: v for k, v in counts.items() if v}  # zero counts are omitted upstream
    conditions = list(old_status.get("conditions") or [])
    if available >= replicas - unavailable_max:
        avail = {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability."}
    else:
        avail = {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                 "message": "Deployment does not have minimum availability."}
    conditions = set_condition(conditions, avail, now, update_time=True)
    if progress is not None:
        cond = {"type": "Progressing", "status": progress[0], "reason": progress[1], "message": progress[2]}
        conditions = set_condition(conditions, cond, now, update_time=True)
    status["conditions"] = conditions
    return status


def _progressing(before: Obj, after: Obj) -> bool:
    """Whether the rollout moved since the last status (upstream DeploymentProgressing)."""
    def get(status: Obj, key: str) -> int:
        return int_field(status, key)

    old_before = get(before, "replicas") - get(before, "updatedReplicas")
    old_after = get(after, "replicas") - get(after, "updatedReplicas")
    return (get(after, "updatedReplicas") > get(before, "updatedReplicas") or old_after < old_before
            or get(after, "readyReplicas") > get(before, "readyReplicas")
            or get(after, "availableReplicas") > get(before, "availableReplicas"))


def _complete(status: Obj, replicas: int, generation: int) -> bool:
    return (int_field(status, "updatedReplicas") == replicas and int_field(status, "replicas") == replicas
            and int_field(status, "availableReplicas") == replicas
            and int_field(status, "observedGeneration") >= generation)


def plan_deployment(deployment: Obj, replicasets: Iterable[Obj], now: dt.datetime) -> DeploymentPlan:
    """replicasets: every ReplicaSet in the deployment's namespace (we claim ours from them)."""
    stamp = rfc3339(now)
    spec = deployment.get("spec") or {}
    replicas = int_field(spec, "replicas", default=1)
    every_rs = list(replicasets)
    found = claim(deployment, spec.get("selector"), every_rs)
    owned = [rs for rs in found.owned if not terminating(rs)]
    template = spec.get("template") or {}
    new_obj = find_new(owned, template)
    olds = [RsView.of(rs) for rs in owned if rs is not new_obj]
    new = RsView.of(new_obj) if new_obj is not None else None
    surge, unavailable = fenceposts(deployment, replicas)
    next_revision = max((o.revision for o in olds), default=0) + 1
    recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
    deleting = terminating(deployment)
    paused = bool(spec.get("paused"))
    targets: dict[str, int] = {}
    create: Obj | None = None
    notes: list[Note] = []
    progress: tuple[str, str, str] | None = None
    collision = int_field(deployment, "status", "collisionCount")

    may_create = not deleting and not paused
    if may_create and recreate:
        targets, may_create = recreate_step(replicas, new, olds)
    if new is None and may_create:
        pod_hash = template_hash(template, collision)
        name = f"{meta(deployment).get('name', '')}-{pod_hash}"
        if any(meta(rs).get("name") == name for rs in every_rs):
            # Another template hashed to this name: move to the next hash (collisionCount).
            status = dict(deployment.get("status") or {})
            status["collisionCount"] = collision + 1
            return DeploymentPlan(status=status, adopt=found.adopt, release=found.release)
        count = replicas
        if not recreate:
            room = replicas + surge - sum(o.replicas for o in olds)
            count = max(min(room, replicas), 0)
        annotations = {**_copied_annotations(deployment), REVISION: str(next_revision),
                       DESIRED: str(replicas), MAX_REPLICAS: str(replicas + surge)}
        create = new_replicaset(deployment, pod_hash, count, annotations)
        new = RsView(name=name, replicas=count, revision=next_revision, created="~")  # newest
        progress = ("True", "NewReplicaSetCreated", f'Created new replica set "{name}"')
        if count:
            notes.append(_scale_note(name, 0, count))
    elif new is not None and not deleting and not paused and not recreate:
        targets = rolling_step(replicas, surge, unavailable, new, olds)
    elif new is not None and paused and not any(o.replicas for o in olds) and new.replicas != replicas:
        targets = {new.name: replicas}  # a paused deployment still scales, it does not roll

    changes: list[RsChange] = []
    if new is not None and new_obj is not None and not deleting:
        wanted = {DESIRED: str(replicas), MAX_REPLICAS: str(replicas + surge)}
        if new.revision < next_revision and not paused:
            # Back to an older template (rollout undo): that ReplicaSet becomes the newest revision.
            wanted = {**_copied_annotations(deployment), **wanted, REVISION: str(next_revision)}
        current = meta(new_obj).get("annotations") or {}
        min_ready = int_field(spec, "minReadySeconds")
        stale_min_ready = int_field(new_obj, "spec", "minReadySeconds") != min_ready
        if new.name in targets or stale_min_ready or any(current.get(k) != v for k, v in wanted.items()):
            changes.append(RsChange(new.name, targets.get(new.name, new.replicas), tuple(sorted(wanted.items())),
                                    min_ready if stale_min_ready else None))
    for view in [*olds, *([new] if new is not None else [])]:
        if view.name in targets and not any(c.name == view.name for c in changes):
            changes.append(RsChange(view.name, targets[view.name], ((DESIRED, str(replicas)),
                                                                     (MAX_REPLICAS, str(replicas + surge)))))
    for change in changes:
        before = next((v.replicas for v in [*olds, *([new] if new else [])] if v.name == change.name), 0)
        if change.replicas != before:
            notes.append(_scale_note(change.name, before, change.replicas))

    after = [RsView(v.name, targets.get(v.name, v.replicas), v.current, v.ready, v.available, v.revision, v.created)
             for v in [*olds, *([new] if new is not None else [])]]
    new_after = next((v for v in after if new is not None and v.name == new.name), None)
    status = deployment_status(deployment, new_after, after, unavailable_max=unavailable, progress=None, now=stamp)
    generation = int_field(deployment, "metadata", "generation")
    has_progressing = any(c.get("type") == "Progressing" for c in (deployment.get("status") or {}).get("conditions") or [])
    if progress is None and new is not None:
        if paused:
            progress = ("Unknown", "DeploymentPaused", "Deployment is paused")
        elif _complete(status, replicas, generation):
            progress = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{new.name}" has successfully progressed.')
        elif _progressing(deployment.get("status") or {}, status) or targets:
            progress = ("True", "ReplicaSetUpdated", f'ReplicaSet "{new.name}" is progressing.')
        elif not has_progressing:
            progress = ("True", "FoundNewReplicaSet", f'Found new replica set "{new.name}"')
    if progress is not None:
        status = deployment_status(deployment, new_after, after, unavailable_max=unavailable, progress=progress,
                                   now=stamp)

    delete: tuple[str, ...] = ()
    if not targets and create is None and not deleting and new is not None and new.replicas == replicas:
        delete = history_to_delete(olds, int_field(spec, "revisionHistoryLimit", default=10))
    revision = None
    if new is not None and not deleting:
        bumped = create is not None or (new.revision < next_revision and not paused)
        wanted_revision = str(next_revision if bumped else new.revision)
        if (meta(deployment).get("annotations") or {}).get(REVISION) != wanted_revision:
            revision = wanted_revision
    return DeploymentPlan(create=create, changes=tuple(changes), delete=delete, adopt=found.adopt,
                          release=found.release, revision=revision, status=status, notes=tuple(notes))


class DeploymentController(Controller):
    manager = "deployment-controller"
    resource = RESOURCE
    kind = "Deployment"
    children = REPLICASETS
    adopts_orphans = True

    async def reconcile(self, key: NsName) -> None:
        namespace, name = key
        deployment = self.store.get(RESOURCE, namespace, name)
        if deployment is None:
            return
        plan = plan_deployment(deployment, self.children_in(namespace), dt.datetime.now(dt.UTC))
        uid = meta(deployment).get("uid", "")
        for rs_name in plan.adopt:
            self.writer.set_controller(REPLICASETS, namespace, rs_name, deployment, uid)
        for rs_name in plan.release:
            self.writer.set_controller(REPLICASETS, namespace, rs_name, None, uid)
        if plan.create is not None:
            self.writer.create(REPLICASETS, plan.create)
        for change in plan.changes:
            self._apply_change(namespace, change)
        for rs_name in plan.delete:
            rs = self.store.get(REPLICASETS, namespace, rs_name)
            if rs is not None:
                self.writer.delete(REPLICASETS, rs)
        for note in plan.notes:
            self.writer.record(deployment, note)
        current = self.store.get(RESOURCE, namespace, name)
        if current is None or meta(current).get("uid") != uid:
            return
        if plan.revision is not None:
            updated = copy.deepcopy(current)
            updated["metadata"].setdefault("annotations", {})[REVISION] = plan.revision
            current = self.writer.update(RESOURCE, updated)
        self.writer.write_status(RESOURCE, current, plan.status)

    def _apply_change(self, namespace: str, change: RsChange) -> None:
        rs = self.store.get(REPLICASETS, namespace, change.name)
        if rs is None:
            return
        updated = copy.deepcopy(rs)
        updated["spec"]["replicas"] = change.replicas
        if change.min_ready_seconds is not None:
            updated["spec"]["minReadySeconds"] = change.min_ready_seconds
        if change.annotations:
            updated["metadata"].setdefault("annotations", {}).update(dict(change.annotations))
        if updated != rs:
            self.writer.update(REPLICASETS, updated)
