"""Karmada's failover and graceful eviction, as pure decisions.

Cluster failover (the taint manager; on the hub only with `tether hub run --failover`, as
Karmada's `Failover` feature gate with `--enable-no-execute-taint-eviction`): a template running
on a cluster with a NoExecute taint its policy's `clusterTolerations` do not tolerate is evicted
from that cluster at once; when every NoExecute taint is tolerated, at the earliest
`timeAdded + tolerationSeconds` of the tolerations used (never, without tolerationSeconds).
The eviction's purge mode is `spec.failover.cluster.purgeMode` of the policy (default
Gracefully), or the hub's `--no-execute-taint-eviction-purge-mode` (default Gracefully) when the
policy has no `failover.cluster`.

Application failover (always on, per policy: `spec.failover.application`, which Karmada only
accepts with `propagateDeps: true`): a template whose copy in a cluster has been unhealthy for
`decisionConditions.tolerationSeconds` (default 300; 0: at once) is evicted from that cluster,
with the policy's `purgeMode` (default Gracefully, `gracePeriodSeconds` then required; Never
sets `suppressDeletion`). Health is Karmada's InterpretHealth (`interpret_health`); a cluster
that turns healthy (or Unknown) again is forgotten. The clock starts when the hub first sees the
copy unhealthy (Karmada keeps it in memory too, so a hub restart starts it again).

An eviction removes the cluster from the template's schedule (so Divided replicas are divided
again over the clusters that are left: the scheduler sees fewer replicas scheduled than wanted)
and records a graceful eviction task (Karmada's `GracefulEvictionTask` fields: fromCluster,
purgeMode, replicas, reason TaintUntolerated | ApplicationFailure, message, producer
TaintManager | ResourceBindingApplicationFailoverController, gracePeriodSeconds,
suppressDeletion, creationTimestamp). While a task exists the cluster is not a scheduling
candidate for the template. Purge modes: Directly deletes the copy at once; Gracefully keeps it
running until every cluster the template is now scheduled to reports it Healthy, or the task's
`gracePeriodSeconds` (else the hub's `--graceful-eviction-timeout`, 10 min) passed; Never keeps it
until someone sets the task's `suppressDeletion` to false. When a task ends, its cluster's copy
goes and the cluster may be chosen again — but nothing moves back by itself: Divided replicas stay
where they are until a WorkloadRebalancer (or `tether rebalance`) asks for a fresh schedule.

Older Karmada releases spelled the purge modes Immediately and Graciously; both are read as
Directly and Gracefully.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.objects.times import rfc3339, seconds_of

from ._util import as_int, items, mapping, nested
from .model import ClusterInfo
from .taints import no_execute_verdict, taint_string

DIRECTLY, GRACEFULLY, NEVER = "Directly", "Gracefully", "Never"
PURGE_ALIASES = {"Immediately": DIRECTLY, "Graciously": GRACEFULLY}
REASON_TAINT = "TaintUntolerated"
REASON_APPLICATION = "ApplicationFailure"
PRODUCER_TAINT = "TaintManager"
PRODUCER_APPLICATION = "ResourceBindingApplicationFailoverController"
DEFAULT_TOLERATION_S = 300
DEFAULT_GRACEFUL_TIMEOUT_S = 600.0
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"


@dataclass(frozen=True)
class FailoverSettings:
    """The hub's switches (`tether hub run` flags)."""

    enabled: bool = False  # --failover: evict on untolerated NoExecute taints
    purge_mode: str = GRACEFULLY  # --no-execute-taint-eviction-purge-mode
    graceful_timeout_s: float = DEFAULT_GRACEFUL_TIMEOUT_S  # --graceful-eviction-timeout


def purge_mode(value: Any, default: str = GRACEFULLY) -> str:
    text = str(value or "") or default
    return PURGE_ALIASES.get(text, text)


@dataclass(frozen=True)
class EvictionTask:
    from_cluster: str
    purge_mode: str
    reason: str
    producer: str
    message: str = ""
    replicas: int | None = None
    grace_period_s: int | None = None
    suppress_deletion: bool | None = None
    created_s: float | None = None

    @property
    def keeps_workload(self) -> bool:
        """Whether the evicted copy keeps running while the task lasts."""
        return self.purge_mode != DIRECTLY

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fromCluster": self.from_cluster, "purgeMode": self.purge_mode,
                               "reason": self.reason, "producer": self.producer}
        if self.message:
            out["message"] = self.message
        if self.replicas is not None:
            out["replicas"] = self.replicas
        if self.grace_period_s is not None:
            out["gracePeriodSeconds"] = self.grace_period_s
        if self.suppress_deletion is not None:
            out["suppressDeletion"] = self.suppress_deletion
        if self.created_s is not None:
            out["creationTimestamp"] = rfc3339(self.created_s)
        return out

    @classmethod
    def from_api(cls, raw: Any) -> EvictionTask | None:
        task = mapping(raw)
        cluster = str(task.get("fromCluster") or "")
        if not cluster:
            return None
        replicas = task.get("replicas")
        grace = task.get("gracePeriodSeconds")
        suppress = task.get("suppressDeletion")
        return cls(
            from_cluster=cluster,
            purge_mode=purge_mode(task.get("purgeMode")),
            reason=str(task.get("reason") or ""),
            producer=str(task.get("producer") or ""),
            message=str(task.get("message") or ""),
            replicas=as_int(replicas) if replicas is not None else None,
            grace_period_s=as_int(grace) if grace is not None else None,
            suppress_deletion=suppress if isinstance(suppress, bool) else None,
            created_s=seconds_of(task.get("creationTimestamp")),
        )


def parse_tasks(text: Any) -> tuple[EvictionTask, ...]:
    """Tasks from their JSON form (the template annotation); malformed entries are skipped."""
    if not text:
        return ()
    try:
        raw = json.loads(str(text))
    except ValueError:
        return ()
    tasks = (EvictionTask.from_api(t) for t in items(raw))
    return tuple(t for t in tasks if t is not None)


def dump_tasks(tasks: Sequence[EvictionTask]) -> str:
    return json.dumps([t.to_api() for t in tasks], separators=(",", ":"), sort_keys=True)


# cluster failover ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evictions:
    tasks: tuple[EvictionTask, ...] = ()
    recheck_at: float | None = None  # the earliest time a tolerated taint runs out


def taint_evictions(scheduled: Mapping[str, int], clusters: Mapping[str, ClusterInfo],
                    placement: Any, failover: Any, settings: FailoverSettings,
                    now: float) -> Evictions:
    """Which scheduled clusters the taint manager evicts the template from now."""
    if not settings.enabled:
        return Evictions()
    tolerations = items(mapping(placement).get("clusterTolerations"))
    cluster_spec = mapping(failover).get("cluster")
    mode = (purge_mode(mapping(cluster_spec).get("purgeMode")) if cluster_spec is not None
            else purge_mode(settings.purge_mode))
    tasks: list[EvictionTask] = []
    recheck: float | None = None
    for name, replicas in sorted(scheduled.items()):
        info = clusters.get(name)
        if info is None:
            continue
        verdict = no_execute_verdict(info.taints, tolerations, now)
        if verdict.evict:
            taint = taint_string(verdict.taint) if verdict.taint else "NoExecute"
            tasks.append(EvictionTask(
                name, mode, REASON_TAINT, PRODUCER_TAINT,
                f"cluster {name} has taint {{{taint}}} that the policy does not tolerate",
                replicas=replicas or None, created_s=now))
        elif verdict.at_s is not None:
            recheck = verdict.at_s if recheck is None else min(recheck, verdict.at_s)
    return Evictions(tuple(tasks), recheck)


# application failover --------------------------------------------------------------------------


def interpret_health(manifest: Mapping[str, Any], member: Mapping[str, Any] | None) -> str:
    """Karmada's built-in InterpretHealth for the member copy of `manifest`: Healthy,
    Unhealthy, or Unknown (no status collected yet, or a kind without an interpreter).
    `member` is what the Work reports of the member object: its `status` and `generation`."""
    if member is None or not isinstance(member.get("status"), Mapping):
        return UNKNOWN
    status = mapping(member.get("status"))
    kind = str(manifest.get("kind", ""))
    generation = member.get("generation")
    spec_replicas = nested(manifest, "spec", "replicas")

    def observed() -> bool:
        return generation is None or status.get("observedGeneration") == generation

    def num(key: str) -> int:
        return as_int(status.get(key))

    healthy: bool
    if kind in ("Deployment", "StatefulSet"):
        healthy = observed() and not (
            isinstance(spec_replicas, int) and num("updatedReplicas") < spec_replicas
        ) and num("availableReplicas") >= num("updatedReplicas")
    elif kind == "ReplicaSet":
        healthy = observed() and not (isinstance(spec_replicas, int)
                                      and num("availableReplicas") < spec_replicas)
    elif kind == "DaemonSet":
        healthy = (observed() and num("updatedNumberScheduled") >= num("desiredNumberScheduled")
                   and num("numberAvailable") >= num("updatedNumberScheduled"))
    elif kind == "Service":
        healthy = nested(manifest, "spec", "type") != "LoadBalancer" or _has_ingress(status)
    elif kind == "Ingress":
        healthy = _has_ingress(status)
    elif kind == "PersistentVolumeClaim":
        healthy = status.get("phase") == "Bound"
    elif kind == "Pod":
        ready = any(mapping(c).get("type") == "Ready" and mapping(c).get("status") == "True"
                    for c in items(status.get("conditions")))
        healthy = status.get("phase") == "Succeeded" or (status.get("phase") == "Running"
                                                         and ready)
    elif kind == "PodDisruptionBudget":
        healthy = num("currentHealthy") >= num("desiredHealthy")
    else:
        return UNKNOWN
    return HEALTHY if healthy else UNHEALTHY


def _has_ingress(status: Mapping[str, Any]) -> bool:
    return any(mapping(i).get("hostname") or mapping(i).get("ip")
               for i in items(nested(status, "loadBalancer", "ingress")))


@dataclass(frozen=True)
class ApplicationCheck:
    tasks: tuple[EvictionTask, ...] = ()
    unhealthy_since: Mapping[str, float] = field(default_factory=dict)  # to remember
    recheck_at: float | None = None


def application_evictions(scheduled: Mapping[str, int], health: Mapping[str, str],
                          unhealthy_since: Mapping[str, float], application: Any,
                          now: float) -> ApplicationCheck:
    """Karmada's application failover controller for one template."""
    spec = mapping(application)
    seconds = nested(spec, "decisionConditions", "tolerationSeconds")
    toleration = DEFAULT_TOLERATION_S if seconds is None else max(as_int(seconds), 0)
    mode = purge_mode(spec.get("purgeMode"))
    grace = spec.get("gracePeriodSeconds")
    since: dict[str, float] = {}
    tasks: list[EvictionTask] = []
    recheck: float | None = None
    for name, replicas in sorted(scheduled.items()):
        if health.get(name) != UNHEALTHY:
            continue
        started = unhealthy_since.get(name, now)
        if now >= started + toleration:
            tasks.append(EvictionTask(
                name, mode, REASON_APPLICATION, PRODUCER_APPLICATION,
                f"the workload has been unhealthy in cluster {name} for {toleration}s",
                replicas=replicas or None,
                grace_period_s=as_int(grace) if mode == GRACEFULLY and grace is not None else None,
                suppress_deletion=True if mode == NEVER else None, created_s=now))
        else:
            since[name] = started
            at = started + toleration
            recheck = at if recheck is None else min(recheck, at)
    return ApplicationCheck(tuple(tasks), since, recheck)


# graceful eviction ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assessment:
    kept: tuple[EvictionTask, ...]
    done: tuple[str, ...]  # clusters whose task ended
    recheck_at: float | None = None


def assess_tasks(tasks: Sequence[EvictionTask], target_health: Mapping[str, str],
                 settings: FailoverSettings, now: float) -> Assessment:
    """Karmada's graceful eviction controller: which tasks end now. `target_health` has an entry
    for every cluster the template is scheduled to now (its copy's health there)."""
    kept: list[EvictionTask] = []
    done: list[str] = []
    recheck: float | None = None
    all_healthy = bool(target_health) and all(h == HEALTHY for h in target_health.values())
    for task in tasks:
        if task.created_s is None:
            kept.append(replace(task, created_s=now))
            continue
        if task.suppress_deletion is not None:
            if task.suppress_deletion:
                kept.append(task)
            else:
                done.append(task.from_cluster)
            continue
        timeout = (float(task.grace_period_s) if task.grace_period_s is not None
                   else settings.graceful_timeout_s)
        deadline = task.created_s + timeout
        if now > deadline or all_healthy:
            done.append(task.from_cluster)
            continue
        kept.append(task)
        recheck = deadline if recheck is None else min(recheck, deadline)
    return Assessment(tuple(kept), tuple(done), recheck)


def merge_tasks(existing: Sequence[EvictionTask],
                new: Sequence[EvictionTask]) -> tuple[EvictionTask, ...]:
    """Add new tasks; a cluster already being evicted keeps its first task (Karmada's
    GracefulEvictCluster)."""
    seen = {t.from_cluster for t in existing}
    out = list(existing)
    for task in new:
        if task.from_cluster not in seen:
            out.append(task)
            seen.add(task.from_cluster)
    return tuple(out)
