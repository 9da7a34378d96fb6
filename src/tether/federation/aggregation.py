"""Member statuses folded into one status on the resource template (Karmada's AggregateStatus).

`member_status` maps cluster name → the status Karmada's InterpretStatus reflects from that
member: the member object's `.status`, and for workloads also `generation` (the member object's
metadata.generation) and `resourceTemplateGeneration` (the template generation the member object
was rendered from). A missing/None status means "not collected yet".

- Deployment, ReplicaSet, StatefulSet, DaemonSet: counters are summed. `observedGeneration`
  becomes the template's `metadata.generation` only when every member has caught up
  (observedGeneration >= generation) with the current template (resourceTemplateGeneration >=
  template generation) — Karmada's rule for GitOps health checks; otherwise the template's
  previous value is kept (or left out). Members without those fields have not caught up.
- Job: active/succeeded/failed summed, earliest startTime; `Complete` (and the latest
  completionTime) only when every member completed; `Failed` when any member failed, naming them.
- Service (type LoadBalancer only) and Ingress: the union of `loadBalancer.ingress`, each entry
  without a hostname getting the cluster's name as hostname, so users see where it came from.
- Pod: phase by precedence Failed > Pending > Running > Succeeded (uncollected counts as Pending),
  container statuses reduced to ready/state.
- PersistentVolumeClaim: Lost if any member lost it, else the first non-Bound phase, else Bound.
- Anything else: None (no built-in aggregation).
Clusters are visited in name order so results are deterministic.

`reflect_status` is the per-cluster half (Karmada's InterpretStatus, kept per cluster in its
ResourceBinding's `aggregatedStatus`): what of one member's status is kept: the counters and
generations of the workload kinds, a Job's progress, a Service's or Ingress's `loadBalancer`,
and the whole status of anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.objects import ObjView as Obj

from ._util import as_int, items, mapping, nested, thaw

_COUNTERS: Mapping[str, tuple[str, ...]] = {
    "Deployment": (
        "replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
        "unavailableReplicas",
    ),
    "ReplicaSet": ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas"),
    "StatefulSet": (
        "replicas", "readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas",
    ),
    "DaemonSet": (
        "currentNumberScheduled", "desiredNumberScheduled", "numberAvailable",
        "numberMisscheduled", "numberReady", "updatedNumberScheduled", "numberUnavailable",
    ),
}


def _collected(member_status: Mapping[str, Obj | None]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(name, mapping(member_status[name])) for name in sorted(member_status)
            if member_status[name] is not None]


def _caught_up(template: Obj, member_status: Mapping[str, Obj | None]) -> bool:
    template_generation = as_int(nested(template, "metadata", "generation"))
    for status in member_status.values():
        s = mapping(status)
        if status is None or "generation" not in s or "resourceTemplateGeneration" not in s:
            return False
        if as_int(s.get("observedGeneration")) < as_int(s.get("generation")):
            return False
        if as_int(s.get("resourceTemplateGeneration")) < template_generation:
            return False
    return True


def _workload(template: Obj, member_status: Mapping[str, Obj | None]) -> dict[str, Any]:
    kind = str(template.get("kind"))
    status: dict[str, Any] = {}
    previous = nested(template, "status", "observedGeneration")
    if member_status and _caught_up(template, member_status):
        status["observedGeneration"] = as_int(nested(template, "metadata", "generation"))
    elif isinstance(previous, int):
        status["observedGeneration"] = previous
    for field in _COUNTERS[kind]:
        status[field] = sum(as_int(s.get(field)) for _, s in _collected(member_status))
    return status


def _condition_true(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in items(status.get("conditions")):
        c = mapping(cond)
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def _job(member_status: Mapping[str, Obj | None]) -> dict[str, Any]:
    collected = _collected(member_status)
    status: dict[str, Any] = {
        field: sum(as_int(s.get(field)) for _, s in collected)
        for field in ("active", "succeeded", "failed")
    }
    starts = sorted(str(s["startTime"]) for _, s in collected if s.get("startTime"))
    if starts:
        status["startTime"] = starts[0]
    complete = [(n, c) for n, s in collected if (c := _condition_true(s, "Complete"))]
    failed = [(n, c) for n, s in collected if (c := _condition_true(s, "Failed"))]
    conditions = []
    if member_status and len(complete) == len(member_status):
        ends = sorted(str(s["completionTime"]) for _, s in collected if s.get("completionTime"))
        if ends:
            status["completionTime"] = ends[-1]
        conditions.append(_job_condition("Complete", "Completed", "Job completed", complete))
    if failed:
        names = ", ".join(n for n, _ in failed)
        message = f"Job executed failed in member cluster(s): {names}"
        conditions.append(_job_condition("Failed", "JobFailed", message, failed))
    if conditions:
        status["conditions"] = conditions
    return status


def _job_condition(
    kind: str, reason: str, message: str, sources: list[tuple[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": kind, "status": "True", "reason": reason,
                                 "message": message}
    for stamp in ("lastProbeTime", "lastTransitionTime"):
        times = sorted(str(c[stamp]) for _, c in sources if c.get(stamp))
        if times:
            condition[stamp] = times[-1]
    return condition


def _load_balancer(member_status: Mapping[str, Obj | None]) -> dict[str, Any]:
    ingress = []
    for name, status in _collected(member_status):
        for entry in items(nested(status, "loadBalancer", "ingress")):
            item = thaw(entry)
            if isinstance(item, dict) and not item.get("hostname"):
                item["hostname"] = name
            ingress.append(item)
    return {"loadBalancer": {"ingress": ingress}} if ingress else {"loadBalancer": {}}


def _pod(member_status: Mapping[str, Obj | None]) -> dict[str, Any]:
    phases = {str(mapping(s).get("phase", "")) if s is not None else "Pending"
              for s in member_status.values()}
    status: dict[str, Any] = {}
    for phase in ("Failed", "Pending", "Running", "Succeeded"):
        if phase in phases:
            status["phase"] = phase
            break
    status["containerStatuses"] = [
        {"ready": bool(mapping(cs).get("ready")), "state": thaw(mapping(cs).get("state"))}
        for _, s in _collected(member_status) for cs in items(s.get("containerStatuses"))
    ]
    return status


def _pvc(member_status: Mapping[str, Obj | None]) -> dict[str, Any]:
    phase = "Bound"
    for _, status in _collected(member_status):
        member_phase = str(status.get("phase", ""))
        if member_phase == "Lost":
            return {"phase": "Lost"}
        if member_phase != "Bound" and phase == "Bound":
            phase = member_phase
    return {"phase": phase}


_GENERATIONS = ("observedGeneration", "generation", "resourceTemplateGeneration")
_JOB_FIELDS = ("active", "succeeded", "failed", "startTime", "completionTime", "conditions")


def reflect_status(template: Obj, member_status: Obj | None) -> Obj | None:
    """One member's status as kept per cluster, or None when not collected yet."""
    if member_status is None:
        return None
    status = mapping(member_status)
    kind = str(template.get("kind", ""))
    if kind in _COUNTERS:
        keep: tuple[str, ...] = (*_COUNTERS[kind], *_GENERATIONS)
    elif kind == "Job":
        keep = _JOB_FIELDS
    elif kind in ("Service", "Ingress"):
        keep = ("loadBalancer",)
    else:
        return dict(thaw(status))
    return {k: thaw(status[k]) for k in keep if k in status}


def aggregate_status(template: Obj, member_status: Mapping[str, Obj | None]) -> Obj | None:
    """The template's new `.status`, or None when the kind has no built-in aggregation."""
    kind = str(template.get("kind", ""))
    if kind in _COUNTERS:
        return _workload(template, member_status)
    if kind == "Job":
        return _job(member_status)
    if kind == "Service":
        if nested(template, "spec", "type") != "LoadBalancer":
            return None
        return _load_balancer(member_status)
    if kind == "Ingress":
        return _load_balancer(member_status)
    if kind == "Pod":
        return _pod(member_status)
    if kind == "PersistentVolumeClaim":
        return _pvc(member_status)
    return None
