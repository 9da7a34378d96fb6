"""Replica division: how many of a workload's replicas each selected cluster runs.

Karmada (`placement.replicaScheduling`):
- nil `replicaScheduling` ⇒ Duplicated (every cluster gets the template's replicas); a block
  without `replicaSchedulingType` ⇒ Divided (the CRD default).
- Divided + Weighted + `staticWeightList`: a cluster's weight is the largest weight of the entries
  whose `targetCluster` affinity it matches; clusters matched by none get weight 0 and no replicas.
  If no cluster has a weight, all weigh 1. Weighted without `weightPreference` (and Divided
  without a division preference) ⇒ equal weights.
- Division by weights is Karmada's Dispenser: each cluster first gets floor(weight·N/sum); the
  remainder (always fewer than the number of clusters) is handed out one replica each to clusters
  in order of weight descending, then name ascending. This is not largest-remainder: with weights
  5:1:1 and N=3 the floors are 2,0,0 and the spare replica goes to the heaviest, giving 3,0,0
  (largest-remainder would give 2,1,0). (Karmada breaks weight
  ties by previous assignment and then randomly; tether has no previous assignment here and
  prefers a reproducible result, so the name decides.)
- dynamicWeight AvailableReplicas: weights are `ClusterInfo.available_replicas` (None ⇒ 0, no
  estimate means no capacity); floor shares, then the remainder one each to clusters ordered by
  available replicas descending, then name. 12 replicas over A=6, B=12, C=18 ⇒ 2, 4, 6. Fails when
  the clusters can hold fewer than N replicas in total, with Karmada's message.
- Aggregated: clusters ordered by available replicas (descending, then name); the shortest prefix
  that can hold N replicas is used and N is divided over it as for dynamic weights.
- Clusters that end up with 0 replicas are dropped (Karmada removes zero-replica targets).

KubeFed ReplicaSchedulingPreference (`rsp_plan`) follows KubeFed's planner: clusters with their
own preference use it, others use `*`, clusters with neither get 0; an RSP without `clusters`
(or with an empty map) means `"*": {weight: 1}`, as KubeFed's scheduler defaults it. Preferences are ordered by
weight descending, then by FNV-1 32 hash of cluster name + "<namespace>/<name>" (KubeFed's way to
avoid always favouring the alphabetically first cluster). Each first gets min(minReplicas,
remaining); then, repeatedly, each cluster still below its maxReplicas gets
ceil(remaining·weight/sumWeights) (capped by what is left and by maxReplicas) until nothing is
left or nothing changes. With `rebalance: false` (KubeFed's default) replicas already running
are not moved: after the minimums, each cluster keeps up to its current count (capped by
maxReplicas), and those kept replicas count against the cluster's share in the weighted rounds,
so only the replicas that are new (or that a cluster over its share cannot keep because the total
shrank) are placed by weight. `rebalance: true` plans from scratch. `current` is what each
cluster runs now (tether takes what it last scheduled there). Capacity estimates from
unschedulable pods are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._util import as_int, items, mapping
from .model import ClusterInfo
from .placement import cluster_matches_affinity


class ReplicaSchedulingError(Exception):
    """The replicas cannot be divided (e.g. not enough capacity); `reason` is for conditions."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# ---------------------------------------------------------------------------------------------
# Karmada


def divide_by_weight(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Karmada's Dispenser.TakeByWeight (see module docstring). Zero weights get nothing."""
    positive = {name: w for name, w in weights.items() if w > 0}
    weight_sum = sum(positive.values())
    if total <= 0 or weight_sum == 0:
        return {}
    order = sorted(positive, key=lambda n: (-positive[n], n))
    result = {name: positive[name] * total // weight_sum for name in order}
    remain = total - sum(result.values())
    for name in order[:remain]:
        result[name] += 1
    return result


def static_weights(weight_list: Sequence[Any], clusters: Sequence[ClusterInfo]) -> dict[str, int]:
    """Per-cluster weight from a `staticWeightList` (all 1 when nobody has a weight)."""
    weights = {}
    for cluster in clusters:
        weight = 0
        for entry in weight_list:
            rule = mapping(entry)
            if cluster_matches_affinity(cluster, rule.get("targetCluster")):
                weight = max(weight, as_int(rule.get("weight")))
        weights[cluster.name] = weight
    if not any(w > 0 for w in weights.values()):
        return {cluster.name: 1 for cluster in clusters}
    return weights


def _by_capacity(clusters: Sequence[ClusterInfo]) -> list[tuple[str, int]]:
    capacity = [(c.name, max(c.available_replicas or 0, 0)) for c in clusters]
    return sorted(capacity, key=lambda item: (-item[1], item[0]))


def _divide_by_capacity(total: int, capacity: Sequence[tuple[str, int]]) -> dict[str, int]:
    # Karmada's divideReplicasByAvailableReplica: floors, then one each in capacity order.
    cap_sum = sum(c for _, c in capacity)
    result = {name: cap * total // cap_sum for name, cap in capacity}
    remain = total - sum(result.values())
    names = [name for name, _ in capacity]
    if names:
        rounds, extra = divmod(remain, len(names))
        for i, name in enumerate(names):
            result[name] += rounds + (1 if i < extra else 0)
    return result


def divide_by_available(
    total: int, clusters: Sequence[ClusterInfo], *, aggregated: bool = False
) -> dict[str, int]:
    """Dynamic weighting by `available_replicas`, or Aggregated (fewest clusters)."""
    capacity = _by_capacity(clusters)
    cap_sum = sum(c for _, c in capacity)
    if cap_sum < total:
        raise ReplicaSchedulingError(
            "Unschedulable",
            f"clusters resources are not enough to schedule, max {cap_sum} replicas are support",
        )
    if aggregated:
        taken, running = [], 0
        for name, cap in capacity:
            taken.append((name, cap))
            running += cap
            if running >= total:
                break
        capacity = taken
    return _divide_by_capacity(total, capacity)


def karmada_divide(
    replica_scheduling: Any, total: int, clusters: Sequence[ClusterInfo]
) -> dict[str, int] | None:
    """Replicas per selected cluster under a `replicaScheduling` block, or None for Duplicated
    (each cluster keeps the template's count). Zero-replica clusters are left out."""
    if replica_scheduling is None:
        return None
    spec = mapping(replica_scheduling)
    if spec.get("replicaSchedulingType", "Divided") == "Duplicated":
        return None
    preference = spec.get("replicaDivisionPreference") or "Weighted"
    if preference == "Aggregated":
        result = divide_by_available(total, clusters, aggregated=True)
    elif preference == "Weighted":
        weight_pref = mapping(spec.get("weightPreference"))
        dynamic = weight_pref.get("dynamicWeight")
        if dynamic == "AvailableReplicas":
            result = divide_by_available(total, clusters)
        elif dynamic:
            raise ReplicaSchedulingError(
                "SchedulerError", f"undefined replica dynamic weight factor: {dynamic}"
            )
        else:
            weight_list = items(weight_pref.get("staticWeightList"))
            result = divide_by_weight(total, static_weights(weight_list, clusters))
    else:
        raise ReplicaSchedulingError(
            "SchedulerError", f"undefined replica division preference: {preference}"
        )
    return {name: n for name, n in result.items() if n > 0}


# ---------------------------------------------------------------------------------------------
# KubeFed ReplicaSchedulingPreference


DEFAULT_RSP_CLUSTERS: Mapping[str, Any] = {"*": {"weight": 1}}


def fnv1_32(data: bytes) -> int:
    """FNV-1 (not 1a) 32-bit, Go's hash/fnv.New32, which KubeFed's planner uses for ties."""
    value = 0x811C9DC5
    for byte in data:
        value = (value * 0x01000193) & 0xFFFFFFFF
        value ^= byte
    return value


def rsp_plan(rsp_spec: Any, clusters: Sequence[str], key: str,
             current: Mapping[str, int] | None = None) -> dict[str, int]:
    """KubeFed's replica plan for `clusters` (the ready candidates). `key` is the RSP's
    "<namespace>/<name>"; `current` the replicas each cluster runs now (used unless
    `rebalance`). Every candidate appears in the result, possibly with 0."""
    spec = mapping(rsp_spec)
    # KubeFed's scheduler: an RSP without preferences weighs every cluster alike
    prefs_by_name = mapping(spec.get("clusters")) or DEFAULT_RSP_CLUSTERS
    plan: dict[str, int] = {}
    prefs: list[tuple[str, Mapping[str, Any]]] = []
    for name in clusters:
        pref = prefs_by_name.get(name, prefs_by_name.get("*"))
        if pref is None:
            plan[name] = 0
        else:
            prefs.append((name, mapping(pref)))
    prefs.sort(
        key=lambda p: (-as_int(p[1].get("weight")), fnv1_32(p[0].encode() + key.encode()))
    )
    remaining = as_int(spec.get("totalReplicas"))
    for name, pref in prefs:
        take = min(as_int(pref.get("minReplicas")), remaining)
        plan[name] = take
        remaining -= take
    kept: dict[str, int] = {}  # replicas kept where they run, not yet matched by a weighted share
    if not spec.get("rebalance") and current:
        for name, pref in prefs:
            running = current.get(name, 0)
            if running > plan[name]:
                cap = pref.get("maxReplicas")
                target = running if cap is None else min(running, as_int(cap))
                extra = max(0, min(target - plan[name], remaining))
                kept[name] = extra
                plan[name] += extra
                remaining -= extra
    active = prefs
    modified = True
    while modified and remaining > 0:
        modified = False
        weight_sum = sum(as_int(p.get("weight")) for _, p in active)
        if weight_sum <= 0:
            break
        distribute = remaining
        still_open = []
        for name, pref in active:
            start = plan[name]
            extra = min(-(-distribute * as_int(pref.get("weight")) // weight_sum), remaining)
            used_kept = min(extra, kept.get(name, 0))
            if used_kept:
                kept[name] -= used_kept
                extra -= used_kept
                modified = True
            total = start + extra
            cap = pref.get("maxReplicas")
            full = cap is not None and total > as_int(cap)
            if full:
                total = as_int(cap)
            else:
                still_open.append((name, pref))
            remaining -= total - start
            plan[name] = total
            modified = modified or total > start
        active = still_open
    return plan
