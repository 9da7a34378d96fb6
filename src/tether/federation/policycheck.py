"""What tether does with every field of a (Cluster)PropagationPolicy: Karmada's validation, and a
clear refusal for what tether does not implement (never a silent no-op).

`policy_problems(spec)` returns messages; a policy with any is not applied (the templates it
claims keep what they run and report `Propagated=False`, reason `InvalidPolicy`, naming the
field), since Karmada's webhook would have refused it at admission.

Implemented (so accepted): resourceSelectors, propagateDeps, placement (clusterAffinity,
clusterAffinities, clusterTolerations, spreadConstraints, replicaScheduling, workloadAffinity),
priority, preemption, dependentOverrides, failover (application and cluster, without state
preservation), conflictResolution, activationPreference (Lazy), suspension (dispatching,
dispatchingOnClusters), preserveResourcesOnDeletion, schedulerName `default-scheduler`.

Refused, with the reason:
- `placement.clusterAffinities[].overflowAffinities` (progressive overflow tiers): not
  implemented; ordered `clusterAffinities` groups or a wider affinity cover most uses.
- `schedulePriority`: tether schedules each template as soon as it changes, with no scheduling
  queue to order and no preemption of running workloads, so a priority could not change anything.
- `failover.*.statePreservation`: Karmada's alpha StatefulFailoverInjection; tether does not carry
  state from the evicted copy to its replacement.
- `schedulerName` other than `default-scheduler`: tether's hub is the only scheduler; Karmada
  would leave the template for that other scheduler.
- more than one grouping spread constraint (region, zone, provider, label) in one policy: tether
  selects by one group field at a time (Karmada only by region).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._util import as_int, items, mapping, nested
from .failover import DIRECTLY, GRACEFULLY, NEVER, purge_mode
from .spread import GROUP_FIELDS

DEFAULT_SCHEDULER = "default-scheduler"
INVALID_POLICY = "InvalidPolicy"
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _spread_problems(constraints: Any) -> list[str]:
    problems: list[str] = []
    fields: dict[str, int] = {}
    path = "spec.placement.spreadConstraints"
    for index, raw in enumerate(items(constraints)):
        c = mapping(raw)
        where = f"{path}[{index}]"
        if c.get("spreadByField") and c.get("spreadByLabel"):
            problems.append(f"{where}: spreadByLabel should not co-exist with spreadByField")
        min_groups, max_groups = as_int(c.get("minGroups")), as_int(c.get("maxGroups"))
        if min_groups < 0:
            problems.append(f"{where}: minGroups lower than 0 is not allowed")
        if max_groups < 0:
            problems.append(f"{where}: maxGroups lower than 0 is not allowed")
        if 0 < max_groups < min_groups:
            problems.append(f"{where}: maxGroups lower than minGroups is not allowed")
        field = str(c.get("spreadByField") or "")
        if field:
            fields[field] = fields.get(field, 0) + 1
    for field, count in sorted(fields.items()):
        if count > 1:
            problems.append(f"{path}: multiple {field} spread constraints are not allowed")
    if fields and "cluster" not in fields:
        problems.append(f"{path}: the cluster spread constraint must be enabled in one of the "
                        "constraints in case of SpreadByField is enabled")
    groups = [f for f in fields if f in GROUP_FIELDS] + [
        f"label {mapping(c).get('spreadByLabel')}" for c in items(constraints)
        if mapping(c).get("spreadByLabel") and not mapping(c).get("spreadByField")]
    if len(groups) > 1:
        problems.append(f"{path}: tether spreads by one group ({', '.join(groups)} given); keep "
                        "one of them next to the cluster constraint")
    return problems


def _failover_problems(spec: Mapping[str, Any]) -> list[str]:
    failover = spec.get("failover")
    if failover is None:
        return []
    problems: list[str] = []
    app = mapping(failover).get("application")
    if app is not None:
        app_spec = mapping(app)
        if not spec.get("propagateDeps"):
            problems.append("spec.propagateDeps: application failover is set, propagateDeps must "
                            "be true")
        seconds = nested(app_spec, "decisionConditions", "tolerationSeconds")
        if seconds is not None and as_int(seconds, -1) < 0:
            problems.append("spec.failover.application.decisionConditions.tolerationSeconds: "
                            "must be greater than or equal to 0")
        mode = purge_mode(app_spec.get("purgeMode"))
        grace = app_spec.get("gracePeriodSeconds")
        if mode not in (DIRECTLY, GRACEFULLY, NEVER):
            problems.append(f"spec.failover.application.purgeMode: unsupported value {mode!r}: "
                            "Directly, Gracefully or Never")
        if mode != GRACEFULLY and grace is not None:
            problems.append("spec.failover.application.gracePeriodSeconds: only takes effect "
                            "when purgeMode is gracefully")
        if mode == GRACEFULLY and grace is None:
            problems.append("spec.failover.application.gracePeriodSeconds: should not be empty "
                            "when purgeMode is gracefully")
        if grace is not None and as_int(grace) <= 0:
            problems.append("spec.failover.application.gracePeriodSeconds: must be greater "
                            "than 0")
        if app_spec.get("statePreservation") is not None:
            problems.append(_state_preservation("application"))
    cluster = mapping(failover).get("cluster")
    if cluster is not None:
        mode = purge_mode(mapping(cluster).get("purgeMode"))
        if mode not in (DIRECTLY, GRACEFULLY):
            problems.append(f"spec.failover.cluster.purgeMode: unsupported value {mode!r}: "
                            "Directly or Gracefully")
        if mapping(cluster).get("statePreservation") is not None:
            problems.append(_state_preservation("cluster"))
    return problems


def _state_preservation(which: str) -> str:
    return (f"spec.failover.{which}.statePreservation: not supported by tether (Karmada's alpha "
            "StatefulFailoverInjection); remove it")


def _workload_affinity_problems(placement: Mapping[str, Any]) -> list[str]:
    affinity = placement.get("workloadAffinity")
    if affinity is None:
        return []
    problems: list[str] = []
    for term in ("affinity", "antiAffinity"):
        raw = mapping(affinity).get(term)
        if raw is None:
            continue
        key = str(mapping(raw).get("groupByLabelKey") or "")
        if not _LABEL_KEY.match(key):
            problems.append(f"spec.placement.workloadAffinity.{term}.groupByLabelKey: "
                            f"{key!r} is not a valid label key")
    return problems


def policy_problems(spec: Any) -> list[str]:
    """Why a PropagationSpec cannot be applied as written ([] when it can)."""
    spec = mapping(spec)
    placement = mapping(spec.get("placement"))
    problems: list[str] = []
    if placement.get("clusterAffinity") is not None and placement.get(
            "clusterAffinities") is not None:
        problems.append("spec.placement: clusterAffinities cannot co-exist with clusterAffinity")
    for index, term in enumerate(items(placement.get("clusterAffinities"))):
        if mapping(term).get("overflowAffinities") is not None:
            problems.append(
                f"spec.placement.clusterAffinities[{index}].overflowAffinities: not implemented "
                "by tether; use ordered clusterAffinities groups (the next group is used when "
                "one cannot take the workload) or a wider clusterAffinity")
    problems += _spread_problems(placement.get("spreadConstraints"))
    problems += _workload_affinity_problems(placement)
    problems += _failover_problems(spec)
    suspension = spec.get("suspension")
    if suspension is not None:
        susp = mapping(suspension)
        if susp.get("dispatching") is True and items(
                nested(susp, "dispatchingOnClusters", "clusterNames")):
            problems.append("spec.suspension: suspension dispatching cannot co-exist with "
                            "dispatchingOnClusters.clusterNames")
    if spec.get("schedulePriority") is not None:
        problems.append("spec.schedulePriority: not supported by tether: the hub schedules each "
                        "template as soon as it changes (no scheduling queue to order, no "
                        "preemption of running workloads); remove it")
    scheduler = spec.get("schedulerName")
    if scheduler not in (None, "", DEFAULT_SCHEDULER):
        problems.append(f"spec.schedulerName: {scheduler!r}: tether's hub is the only scheduler "
                        f"({DEFAULT_SCHEDULER}); remove the field or set {DEFAULT_SCHEDULER}")
    activation = spec.get("activationPreference")
    if activation not in (None, "", "Lazy"):
        problems.append(f"spec.activationPreference: unsupported value {activation!r}: Lazy "
                        "or empty")
    preemption = spec.get("preemption")
    if preemption not in (None, "", "Always", "Never"):
        problems.append(f"spec.preemption: unsupported value {preemption!r}: Always or Never")
    return problems


def dispatching_suspended(spec: Any) -> bool:
    return nested(spec, "suspension", "dispatching") is True


def suspended_clusters(spec: Any) -> frozenset[str]:
    return frozenset(str(n) for n in items(nested(spec, "suspension", "dispatchingOnClusters",
                                                  "clusterNames")))


def lazy(spec: Any) -> bool:
    return mapping(spec).get("activationPreference") == "Lazy"
