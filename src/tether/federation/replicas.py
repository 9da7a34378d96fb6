"""Replica division: how many of a workload's replicas each selected cluster runs.

Karmada (`placement.replicaScheduling`):
- nil `replicaScheduling` ⇒ Duplicated (every cluster gets the template's replicas); a block
  without `replicaSchedulingType` ⇒ Divided (the CRD default).
- Divided + Weighted + `staticWeightList`: a cluster's weight is the largest weight of the entries
  whose `targetCluster` affinity it matches; clusters matched by none get weight 0 and no replicas.
  If no cluster has a weight, all weigh 1. Weighted without `weightPreference` (and Divided
  without a division preference) ⇒ equal weights.
- Division by weights is Karmada's Webster (Sainte-Laguë) method: replicas are handed out one at
  a time, each to the cluster with the largest `weight / (2·replicas so far + 1)`; on a tie the
  cluster with fewer replicas wins, then the name (Karmada picks ascending or descending names
  from a hash of the binding's uid; tether always takes ascending, to be reproducible).
  9 over 1:2 ⇒ 3:6; 9 over 1:3 ⇒ 2:7; 3 over 5:1:1 ⇒ 2:1:0.
- dynamicWeight AvailableReplicas: the weights are each cluster's available replicas (what the
  general estimator in `capacity` says still fits, for a cluster the workload already runs on
  plus what it runs there); 12 replicas over A=6, B=12, C=18 ⇒ 2, 4, 6. When the clusters can
  hold fewer replicas than wanted: `Unschedulable`, "Clusters available replicas N are not enough
  to schedule.".
- Aggregated: clusters ordered by available replicas (descending, clusters the workload already
  runs on first); the shortest prefix that can hold the replicas is used and they are divided
  over it as for dynamic weights.
- Dynamic weights and Aggregated remember the previous assignment (`assign_dynamic`, Karmada's
  Steady mode): unchanged replicas keep it as it is; more replicas keep it and divide only the
  added ones by the clusters' free capacity; fewer replicas divide the new total by the current
  shares. Only a fresh schedule (a WorkloadRebalancer, `tether rebalance`) divides everything
  again as if nothing ran.
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

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from ._util import as_int, items, mapping
from .affinity import cluster_matches_affinity
from .model import ClusterInfo


class ReplicaSchedulingError(Exception):
    """The replicas cannot be divided (e.g. not enough capacity); `reason` is for conditions."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# ---------------------------------------------------------------------------------------------
# Karmada


def webster(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Karmada's AllocateWebsterSeats (no initial seats): `total` replicas over `weights`."""
    seats = {name: 0 for name, w in weights.items() if w > 0}
    if total <= 0 or not seats:
        return {}
    # Priority w/(2s+1) compared exactly as fractions; ties: fewer seats, then name ascending.
    heap = [(_Priority(weights[n], 0), n) for n in seats]
    heapq.heapify(heap)
    for _ in range(total):
        _, name = heapq.heappop(heap)
        seats[name] += 1
        heapq.heappush(heap, (_Priority(weights[name], seats[name]), name))
    return seats


class _Priority:
    """A Webster party's priority, ordered so that the heap's smallest is the next to get a seat."""

    __slots__ = ("seats", "votes")

    def __init__(self, votes: int, seats: int) -> None:
        self.votes, self.seats = votes, seats

    def __lt__(self, other: _Priority) -> bool:
        left = self.votes * (2 * other.seats + 1)
        right = other.votes * (2 * self.seats + 1)
        if left != right:
            return left > right
        return self.seats < other.seats

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Priority) and self.votes * (2 * other.seats + 1)
                == other.votes * (2 * self.seats + 1) and self.seats == other.seats)

    __hash__ = None  # type: ignore[assignment]


def divide_by_weight(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Static weights (Webster, see module docstring). Zero weights get nothing; every cluster
    with a weight appears in the result, possibly with 0."""
    result = webster(total, weights)
    return {name: result.get(name, 0) for name in sorted(result)} if result else {}


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


def _not_enough(available: int, wanted: int, capacity: Mapping[str, int]) -> ReplicaSchedulingError:
    per_cluster = ", ".join(f"{name} {cap}" for name, cap in sorted(capacity.items()))
    return ReplicaSchedulingError(
        "Unschedulable",
        f"Clusters available replicas {available} are not enough to schedule. "
        f"({wanted} wanted; free per cluster: {per_cluster or 'no cluster'})")


def _divide_dynamic(target: int, available: Sequence[tuple[str, int]], *, aggregated: bool,
                    prior: frozenset[str] = frozenset()) -> dict[str, int]:
    """Karmada's dynamicDivideReplicas: `available` is (cluster, weight) sorted by weight."""
    total_available = sum(max(cap, 0) for _, cap in available)
    if total_available < target:
        raise _not_enough(total_available, target, dict(available))
    chosen = list(available)
    if aggregated:
        chosen = ([c for c in chosen if c[0] in prior] + [c for c in chosen if c[0] not in prior])
        running = 0
        for index, (_, cap) in enumerate(chosen):
            running += cap
            if running >= target:
                chosen = chosen[:index + 1]
                break
    return webster(target, dict(chosen))


def _sorted_capacity(capacity: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(((n, max(c, 0)) for n, c in capacity.items()), key=lambda i: (-i[1], i[0]))


def assign_dynamic(total: int, free: Mapping[str, int], scheduled: Mapping[str, int], *,
                   aggregated: bool, fresh: bool) -> dict[str, int]:
    """Dynamic weights / Aggregated with memory (Karmada's assignByDynamicStrategy).

    `free`: per selected cluster, the replicas that still fit (the estimator's answer);
    `scheduled`: what the workload runs where now (only selected clusters count); `fresh`:
    divide as if nothing ran. Zero-replica clusters are left out of the result."""
    current = {n: r for n, r in scheduled.items() if n in free and r > 0}
    assigned = sum(current.values())
    if fresh or not current:
        capacity = {n: free[n] + current.get(n, 0) for n in free}
        result = _divide_dynamic(total, _sorted_capacity(capacity), aggregated=aggregated)
    elif assigned > total:  # scale down: divide the new total by the current shares
        result = _divide_dynamic(total, _sorted_capacity(current), aggregated=aggregated,
                                 prior=frozenset(current))
    elif assigned < total:  # scale up: keep what runs, place only the added replicas
        added = _divide_dynamic(total - assigned, _sorted_capacity(free), aggregated=aggregated,
                                prior=frozenset(current))
        result = dict(current)
        for name, replicas in added.items():
            result[name] = result.get(name, 0) + replicas
    else:
        result = current
    return {n: r for n, r in sorted(result.items()) if r > 0}


def divide_by_available(
    total: int, clusters: Sequence[ClusterInfo], *, aggregated: bool = False
) -> dict[str, int]:
    """Dynamic weighting by `available_replicas`, or Aggregated (fewest clusters), from scratch."""
    free = {c.name: max(c.available_replicas or 0, 0) for c in clusters}
    return assign_dynamic(total, free, {}, aggregated=aggregated, fresh=True)


def division_preference(replica_scheduling: Any) -> str:
    """Duplicated, StaticWeight, DynamicWeight or Aggregated (Karmada's strategy types);
    raises ReplicaSchedulingError for values Karmada does not define."""
    if replica_scheduling is None:
        return "Duplicated"
    spec = mapping(replica_scheduling)
    if spec.get("replicaSchedulingType", "Divided") == "Duplicated":
        return "Duplicated"
    preference = spec.get("replicaDivisionPreference") or "Weighted"
    if preference == "Aggregated":
        return "Aggregated"
    if preference != "Weighted":
        raise ReplicaSchedulingError(
            "SchedulerError", f"undefined replica division preference: {preference}")
    dynamic = mapping(spec.get("weightPreference")).get("dynamicWeight")
    if dynamic == "AvailableReplicas":
        return "DynamicWeight"
    if dynamic:
        raise ReplicaSchedulingError("SchedulerError",
                                     f"undefined replica dynamic weight factor: {dynamic}")
    return "StaticWeight"


def karmada_divide(
    replica_scheduling: Any, total: int, clusters: Sequence[ClusterInfo]
) -> dict[str, int] | None:
    """Replicas per selected cluster under a `replicaScheduling` block from scratch, or None for
    Duplicated (each cluster keeps the template's count). Zero-replica clusters are left out."""
    strategy = division_preference(replica_scheduling)
    if strategy == "Duplicated":
        return None
    if strategy in ("Aggregated", "DynamicWeight"):
        return divide_by_available(total, clusters, aggregated=strategy == "Aggregated")
    weight_list = items(mapping(mapping(replica_scheduling).get("weightPreference"))
                        .get("staticWeightList"))
    result = divide_by_weight(total, static_weights(weight_list, clusters))
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
