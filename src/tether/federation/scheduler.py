"""Karmada's scheduler for one resource template: filter, score, select, assign. Pure.

What a ResourceBinding remembers in Karmada (`spec.clusters` with replicas, the applied
placement, the affinity group last used, graceful eviction tasks) is the `Previous` input here;
the hub reads it back from the template's Works and their annotations (see `binding`).

When to schedule (Karmada's doScheduleBinding): a template whose replicas are Divided is only
scheduled again when it has no schedule yet, its placement changed, its replica count no longer
matches the schedule (scaled, or a cluster was evicted), a scheduled cluster left the federation,
or a fresh schedule was asked for (WorkloadRebalancer / `tether rebalance`). Otherwise it stays
where it is: a cluster that recovers, joins or is relabelled does not pull replicas back by itself.
Duplicated templates and resources without replicas are scheduled every time.

Filters, in order (a cluster failing one is counted under that reason in the NoClusterFit
message): being evicted from this template ("cluster(s) is in the process of eviction"); an
untolerated NoSchedule/NoExecute taint (skipped for a cluster the template already runs on:
NoSchedule stops new placements only, and NoExecute is the failover controller's business); the
cluster affinity; a spread property the cluster lacks; workload (anti-)affinity (also skipped
for clusters already used). Score: 100 for a cluster already used (ClusterLocality), else 0.
`clusterAffinities` are tried in order starting from the group used last (the first group after
a fresh schedule); the first group that schedules wins and is remembered, so after a failover
to a backup group the template stays there until rebalanced.

Workload affinity (`placement.workloadAffinity`, Karmada's WorkloadAffinity/AntiAffinity
filters): the group is `<groupByLabelKey>=<value of that label on the template>`; `Groups`
carries, for each other template of the same namespace in the same group (whose policy asks for
the same kind of affinity), the clusters it runs on. Affinity: a new cluster must be used by
every such template that runs somewhere (the first of a group goes anywhere); anti-affinity:
by none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._util import items, mapping
from .affinity import REASON_AFFINITY, cluster_matches_affinity, effective_taints
from .capacity import Resources, max_available_replicas
from .model import ClusterFailure, ClusterInfo
from .replicas import (
    ReplicaSchedulingError,
    assign_dynamic,
    divide_by_weight,
    division_preference,
    static_weights,
)
from .spread import Candidate, SpreadError, ignores_spread, lacks_property, select
from .taints import READINESS_TAINTS, taint_string, untolerated

NO_CLUSTER_FIT = "NoClusterFit"
LOCALITY_SCORE = 100
REASON_EVICTING = "cluster(s) is in the process of eviction"
REASON_AFFINITY_GROUP = "ResourceBinding with the same affinity group does not target this cluster"
REASON_ANTI_AFFINITY_GROUP = "cluster already has workload with the same anti-affinity group"


@dataclass(frozen=True)
class Previous:
    """The last schedule (Karmada keeps it in the ResourceBinding)."""

    clusters: Mapping[str, int] = field(default_factory=dict)  # target → replicas (0: undivided)
    placement: str | None = None  # hash of the placement it was made for; None: unknown
    affinity_name: str = ""
    evicting: frozenset[str] = frozenset()  # clusters in graceful eviction tasks


@dataclass(frozen=True)
class Groups:
    """Workload (anti-)affinity: the clusters each peer of the template's groups runs on."""

    affinity_peers: tuple[frozenset[str], ...] = ()
    anti_affinity_peers: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True)
class Schedule:
    """Where the template goes. `targets` maps clusters to their replica share (None when the
    template's replicas are not divided there: duplicated, or not a workload)."""

    targets: Mapping[str, int | None] = field(default_factory=dict)
    failures: tuple[ClusterFailure, ...] = ()
    reason: str = ""  # set when nothing could be scheduled
    message: str = ""
    affinity_name: str = ""
    placement: str = ""
    kept: bool = False  # nothing asked for a new schedule: the previous one stands

    @property
    def ok(self) -> bool:
        return not self.reason


def placement_hash(placement: Any) -> str:
    text = json.dumps(placement or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _not_found(name: str) -> ClusterFailure:
    return ClusterFailure(name, "ClusterNotFound", f"cluster {name!r} is not registered")


def _fit_message(total: int, reasons: Mapping[str, int]) -> str:
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} clusters are available: {', '.join(histogram)}."


def estimate(cluster: ClusterInfo, request: Resources | None) -> int:
    """Replicas of this workload that still fit in the cluster (the general estimator), unless
    the cluster states its own figure (`available_replicas`)."""
    if cluster.available_replicas is not None:
        return max(cluster.available_replicas, 0)
    return max_available_replicas(cluster.resource_summary, request)


@dataclass(frozen=True)
class _Request:
    placement: Mapping[str, Any]
    clusters: Sequence[ClusterInfo]
    replicas: int | None
    request: Resources | None
    previous: Previous
    fresh: bool
    groups: Groups
    strategy: str


def _filter(req: _Request, affinity: Mapping[str, Any]
            ) -> tuple[list[ClusterInfo], list[ClusterFailure], dict[str, int]]:
    tolerations = items(req.placement.get("clusterTolerations"))
    spread = [mapping(c) for c in items(req.placement.get("spreadConstraints"))]
    by_name = {c.name for c in req.clusters}
    failures = [_not_found(str(n)) for n in items(affinity.get("clusterNames"))
                if n not in by_name]
    reasons: dict[str, int] = {}
    fit: list[ClusterInfo] = []
    used = req.previous.clusters
    for cluster in req.clusters:
        reason = ""
        matches = cluster_matches_affinity(cluster, affinity)
        taint = None if cluster.name in used else untolerated(effective_taints(cluster),
                                                               tolerations)
        if cluster.name in req.previous.evicting:
            reason = REASON_EVICTING
        elif taint is not None:
            reason = f"cluster(s) had untolerated taint {{{taint_string(taint)}}}"
            if matches:
                failures.append(ClusterFailure(
                    cluster.name,
                    "ClusterNotReady" if taint.key in READINESS_TAINTS else "TaintNotTolerated",
                    reason.replace("cluster(s)", "cluster")))
        elif not matches:
            reason = REASON_AFFINITY
        elif lacking := lacks_property(cluster, spread):
            reason = f"cluster(s) did not have {lacking} property"
        elif cluster.name not in used and not all(
                cluster.name in peer for peer in req.groups.affinity_peers if peer):
            reason = REASON_AFFINITY_GROUP
        elif cluster.name not in used and any(
                cluster.name in peer for peer in req.groups.anti_affinity_peers):
            reason = REASON_ANTI_AFFINITY_GROUP
        if reason:
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            fit.append(cluster)
    return fit, failures, reasons


def _assign(req: _Request, selected: Sequence[Candidate],
            free: Mapping[str, int]) -> dict[str, int | None]:
    replicas = req.replicas
    if req.strategy == "Duplicated" or not replicas:
        return {c.name: replicas for c in selected}
    if req.strategy == "StaticWeight":
        weight_list = items(mapping(mapping(req.placement.get("replicaScheduling"))
                                    .get("weightPreference")).get("staticWeightList"))
        shares = divide_by_weight(replicas, static_weights(weight_list, [c.info for c in selected]))
        return {n: r for n, r in shares.items() if r > 0}
    shares = assign_dynamic(replicas, {c.name: free[c.name] for c in selected},
                            req.previous.clusters, aggregated=req.strategy == "Aggregated",
                            fresh=req.fresh)
    return dict(shares)


def _schedule_term(req: _Request, affinity: Mapping[str, Any]) -> Schedule:
    fit, failures, reasons = _filter(req, affinity)
    failures = sorted(failures, key=lambda f: f.cluster)
    if not fit:
        return Schedule(failures=tuple(failures), reason=NO_CLUSTER_FIT,
                        message=_fit_message(len(req.clusters), reasons))
    divided = req.strategy != "Duplicated" and bool(req.replicas)
    spread = [mapping(c) for c in items(req.placement.get("spreadConstraints"))]
    # what is free only matters to divide replicas or to rank clusters for spread constraints;
    # a Duplicated template (or one without replicas) and no constraints goes to every fit
    # cluster, and estimating each cluster's capacity was most of scheduling such a template
    needs_free = divided or (bool(spread) and not ignores_spread(
        req.placement.get("replicaScheduling")))
    free = {c.name: estimate(c, req.request) if needs_free else 0 for c in fit}
    used = req.previous.clusters
    candidates = [
        Candidate(c, LOCALITY_SCORE if c.name in used else 0,
                  free[c.name] + (used.get(c.name, 0) if divided else 0))
        for c in fit
    ]
    try:
        selected = select(candidates, spread, replica_scheduling=req.placement.get(
            "replicaScheduling"), replicas=req.replicas)
        targets = _assign(req, selected, free)
    except SpreadError as err:
        return Schedule(failures=tuple(failures), reason=NO_CLUSTER_FIT, message=str(err))
    except ReplicaSchedulingError as err:
        return Schedule(failures=tuple(failures), reason=err.reason, message=err.message)
    if not targets:
        return Schedule(failures=tuple(failures), reason=NO_CLUSTER_FIT,
                        message="no cluster got any replicas")
    return Schedule(targets=dict(sorted(targets.items())), failures=tuple(failures))


def _keep(req: _Request, placement: str) -> bool:
    previous = req.previous
    if req.strategy == "Duplicated" or not req.replicas or req.fresh or not previous.clusters:
        return False
    if previous.placement != placement:
        return False
    if sum(previous.clusters.values()) != req.replicas:
        return False
    names = {c.name for c in req.clusters}
    return all(name in names for name in previous.clusters)


def schedule(placement: Any, clusters: Sequence[ClusterInfo], *, replicas: int | None = None,
             request: Resources | None = None, previous: Previous | None = None,
             fresh: bool = False, groups: Groups | None = None) -> Schedule:
    """Schedule one template under a (Cluster)PropagationPolicy's `spec.placement`.

    `replicas`: the template's replicas when its kind's replicas can be divided (None
    otherwise); `request`: what one replica requests (capacity estimates)."""
    spec = mapping(placement)
    applied = placement_hash(spec)
    previous = previous or Previous()
    try:
        strategy = division_preference(spec.get("replicaScheduling"))
    except ReplicaSchedulingError as err:
        return Schedule(reason=err.reason, message=err.message, placement=applied)
    req = _Request(spec, clusters, replicas, request, previous, fresh, groups or Groups(),
                   strategy)
    if _keep(req, applied):
        return Schedule(targets=dict(sorted(previous.clusters.items())),
                        affinity_name=previous.affinity_name, placement=applied, kept=True)
    terms = [mapping(t) for t in items(spec.get("clusterAffinities"))]
    if not terms:
        result = _schedule_term(req, mapping(spec.get("clusterAffinity")))
        return Schedule(result.targets, result.failures, result.reason, result.message,
                        placement=applied)
    names = [str(t.get("affinityName", "")) for t in terms]
    start = 0 if fresh or previous.affinity_name not in names else names.index(
        previous.affinity_name)
    first: Schedule | None = None
    for index in range(start, len(terms)):
        result = _schedule_term(req, terms[index])
        if result.ok:
            return Schedule(result.targets, result.failures, affinity_name=names[index],
                            placement=applied)
        first = first or result
    assert first is not None
    return Schedule(failures=first.failures, reason=first.reason, message=first.message,
                    affinity_name=previous.affinity_name, placement=applied)
