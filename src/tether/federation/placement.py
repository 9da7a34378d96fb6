"""Cluster selection: which registered clusters a federated object targets, and why not others.

KubeFed (`spec.placement` of a Federated<Kind>):
- `clusters` present (even `[]`): exactly those names; `clusterSelector` is then ignored.
- else `clusterSelector`: a label selector, `{}` selects every cluster; absent (placement `{}`)
  selects none. An empty selection is not an error in KubeFed.
- Names that are not registered become `ClusterNotFound` failures (KubeFed silently drops them;
  tether says so). Selected clusters that are not ready become `ClusterNotReady` failures, the
  per-cluster status KubeFed's sync controller reports.

Karmada (`spec.placement` of a (Cluster)PropagationPolicy), filters in the scheduler's order:
1. taints vs `clusterTolerations` (only NoSchedule/NoExecute taints filter);
2. `clusterAffinity` (exclude, labelSelector, fieldSelector on provider/region/zone, clusterNames;
   all ANDed) — or `clusterAffinities`, ordered groups of which the first with a fit wins;
3. `spreadConstraints`: clusters lacking the spread property are filtered, then groups are chosen.
When nothing fits the decision carries `reason="NoClusterFit"` and Karmada's message, e.g.
"0/3 clusters are available: 1 cluster(s) had untolerated taint {cluster.tether.io/not-ready:
NoSchedule}, 2 cluster(s) did not match the placement cluster affinity constraint."

Readiness as taints (decision): a cluster with `ready=False` and no readiness taint of its own is
treated as carrying `cluster.tether.io/not-ready:NoSchedule`, tether's name for Karmada's
automatic `cluster.karmada.io/not-ready` taint. Tolerations may name either spelling: a toleration
for `cluster.karmada.io/not-ready` (or `/unreachable`) also tolerates the `cluster.tether.io/`
taint and vice versa, so existing Karmada policies keep working unchanged. A cluster that matches
the affinity but is rejected by an untolerated readiness taint becomes a `ClusterNotReady`
failure; by any other taint, a `TaintNotTolerated` failure (both are "targeted, but nothing
goes there").

Spread constraints (decision): Karmada only implements region (+ cluster) group selection; tether
applies the same algorithm to any one group field (region, zone, provider or a label): take the
best `maxGroups` groups, the best cluster of each, then fill up to the cluster constraint's
`maxGroups` with the best remaining clusters. tether has no scoring plugins yet, so "best" is most
`available_replicas` first, then name. A cluster's zone group is its first zone (sorted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.objects.selectors import matches_label_selector, matches_requirement

from ._util import items, mapping, string_map
from .model import ClusterFailure, ClusterInfo, Taint

NOT_READY_TAINT = "cluster.tether.io/not-ready"
UNREACHABLE_TAINT = "cluster.tether.io/unreachable"
KARMADA_NOT_READY_TAINT = "cluster.karmada.io/not-ready"
KARMADA_UNREACHABLE_TAINT = "cluster.karmada.io/unreachable"

# Each readiness taint key and the other spelling that means the same thing.
_TAINT_ALIASES: Mapping[str, str] = {
    NOT_READY_TAINT: KARMADA_NOT_READY_TAINT,
    KARMADA_NOT_READY_TAINT: NOT_READY_TAINT,
    UNREACHABLE_TAINT: KARMADA_UNREACHABLE_TAINT,
    KARMADA_UNREACHABLE_TAINT: UNREACHABLE_TAINT,
}
_READINESS_TAINTS = frozenset(_TAINT_ALIASES)

REASON_AFFINITY = "cluster(s) did not match the placement cluster affinity constraint"
NO_CLUSTER_FIT = "NoClusterFit"


@dataclass(frozen=True)
class PlacementDecision:
    """The clusters that get the object (sorted), plus targeted clusters that cannot.

    `reason`/`message` are set only when a Karmada placement fits no cluster at all.
    """

    selected: tuple[str, ...]
    failures: tuple[ClusterFailure, ...] = ()
    reason: str = ""
    message: str = ""


# ---------------------------------------------------------------------------------------------
# KubeFed


def kubefed_placement(placement: Any, clusters: Sequence[ClusterInfo]) -> PlacementDecision:
    """Evaluate a Federated<Kind>'s `spec.placement` against the registered clusters."""
    spec = mapping(placement)
    by_name = {c.name: c for c in clusters}
    failures: list[ClusterFailure] = []
    if "clusters" in spec and spec["clusters"] is not None:
        wanted: list[str] = []
        for entry in items(spec["clusters"]):
            name = str(mapping(entry).get("name", ""))
            if name and name not in wanted:
                wanted.append(name)
        targeted = []
        for name in wanted:
            if name in by_name:
                targeted.append(by_name[name])
            else:
                failures.append(_not_found(name))
    elif "clusterSelector" in spec and spec["clusterSelector"] is not None:
        selector = spec["clusterSelector"]
        targeted = [c for c in clusters if matches_label_selector(selector, c.labels)]
    else:
        targeted = []
    selected = []
    for cluster in targeted:
        if cluster.ready:
            selected.append(cluster.name)
        else:
            failures.append(_not_ready(cluster.name))
    return PlacementDecision(tuple(sorted(selected)), _sorted(failures))


def _not_found(name: str) -> ClusterFailure:
    return ClusterFailure(name, "ClusterNotFound", f"cluster {name!r} is not registered")


def _not_ready(name: str) -> ClusterFailure:
    return ClusterFailure(name, "ClusterNotReady", f"cluster {name!r} is not ready")


def _sorted(failures: Sequence[ClusterFailure]) -> tuple[ClusterFailure, ...]:
    return tuple(sorted(failures, key=lambda f: f.cluster))


# ---------------------------------------------------------------------------------------------
# Karmada: cluster affinity


def _field_values(cluster: ClusterInfo) -> dict[str, str]:
    fields = {}
    if cluster.provider:
        fields["provider"] = cluster.provider
    if cluster.region:
        fields["region"] = cluster.region
    return fields


def _match_zones(requirement: Mapping[str, Any], zones: Sequence[str]) -> bool:
    # Karmada's zone rules: In needs every zone listed (and at least one zone); NotIn needs none.
    op = requirement.get("operator")
    values = {str(v) for v in items(requirement.get("values"))}
    if op == "In":
        return bool(zones) and all(z in values for z in zones)
    if op == "NotIn":
        return not any(z in values for z in zones)
    if op == "Exists":
        return bool(zones)
    if op == "DoesNotExist":
        return not zones
    return False


def cluster_matches_affinity(cluster: ClusterInfo, affinity: Any) -> bool:
    """Karmada's ClusterAffinity (also `targetCluster` of override rules and static weights):
    exclude wins; then labelSelector, fieldSelector and clusterNames must all hold."""
    aff = mapping(affinity)
    if cluster.name in {str(n) for n in items(aff.get("exclude"))}:
        return False
    selector = aff.get("labelSelector")
    if selector is not None and not matches_label_selector(selector, cluster.labels):
        return False
    field_selector = aff.get("fieldSelector")
    if field_selector is not None:
        fields = _field_values(cluster)
        for expr in items(mapping(field_selector).get("matchExpressions")):
            req = mapping(expr)
            if req.get("key") == "zone":
                if not _match_zones(req, cluster.zones):
                    return False
            elif not matches_requirement(req, fields):
                return False
    names = [str(n) for n in items(aff.get("clusterNames"))]
    return not names or cluster.name in names


# ---------------------------------------------------------------------------------------------
# Karmada: taints and tolerations


def effective_taints(cluster: ClusterInfo) -> tuple[Taint, ...]:
    """The cluster's taints plus the implied not-ready taint (see module docstring)."""
    if cluster.ready or any(t.key in _READINESS_TAINTS for t in cluster.taints):
        return cluster.taints
    return (*cluster.taints, Taint(NOT_READY_TAINT, "NoSchedule"))


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    # corev1.Toleration.ToleratesTaint, with readiness keys matching their alias.
    effect = str(toleration.get("effect", "") or "")
    if effect and effect != taint.effect:
        return False
    key = str(toleration.get("key", "") or "")
    operator = str(toleration.get("operator", "") or "Equal")
    if key and key != taint.key and _TAINT_ALIASES.get(key) != taint.key:
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return str(toleration.get("value", "") or "") == taint.value and bool(key)
    return False


def taint_string(taint: Taint) -> str:
    """corev1.Taint.ToString: `key=value:effect`, or `key:effect` without a value."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def untolerated_taint(cluster: ClusterInfo, tolerations: Sequence[Any]) -> Taint | None:
    """The first NoSchedule/NoExecute taint that no toleration covers (PreferNoSchedule is soft)."""
    for taint in effective_taints(cluster):
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(mapping(t), taint) for t in tolerations):
            return taint
    return None


# ---------------------------------------------------------------------------------------------
# Karmada: spread constraints


def _group_key(cluster: ClusterInfo, constraint: Mapping[str, Any]) -> str:
    label = constraint.get("spreadByLabel")
    if label:
        return string_map(cluster.labels).get(str(label), "")
    field = constraint.get("spreadByField")
    if field == "region":
        return cluster.region
    if field == "provider":
        return cluster.provider
    if field == "zone":
        return sorted(cluster.zones)[0] if cluster.zones else ""
    return cluster.name


def _spread_property(constraint: Mapping[str, Any]) -> str:
    label = constraint.get("spreadByLabel")
    return f"label {label}" if label else str(constraint.get("spreadByField", ""))


def _best_first(cluster: ClusterInfo) -> tuple[int, str]:
    return (-(cluster.available_replicas or 0), cluster.name)


def _spread(
    fit: list[ClusterInfo], constraints: Sequence[Mapping[str, Any]]
) -> tuple[list[ClusterInfo], str]:
    """Apply spread constraints to the clusters that passed the filters. Returns (chosen, error)."""
    by_cluster = next((c for c in constraints if c.get("spreadByField") == "cluster"), None)
    grouping = next((c for c in constraints if c is not by_cluster), None)
    ordered = sorted(fit, key=_best_first)
    cluster_min = int(mapping(by_cluster).get("minGroups", 1) or 1)
    cluster_max = int(mapping(by_cluster).get("maxGroups", 0) or 0)
    if grouping is None:
        if by_cluster is None:
            return ordered, ""
        if len(ordered) < cluster_min:
            return [], "the number of feasible clusters is less than spreadConstraint.MinGroups"
        return ordered[:cluster_max] if cluster_max else ordered, ""
    groups: dict[str, list[ClusterInfo]] = {}
    for cluster in ordered:
        groups.setdefault(_group_key(cluster, grouping), []).append(cluster)
    group_min = int(grouping.get("minGroups", 1) or 1)
    group_max = int(grouping.get("maxGroups", 0) or 0) or len(groups)
    what = _spread_property(grouping)
    if len(groups) < group_min:
        return [], f"the number of feasible {what} is less than spreadConstraint.MinGroups"
    # Best groups first: the group whose best cluster is best (clusters are already ordered).
    chosen_groups = sorted(groups.values(), key=lambda g: _best_first(g[0]))[:group_max]
    chosen = [g[0] for g in chosen_groups]
    rest = sorted((c for g in chosen_groups for c in g[1:]), key=_best_first)
    if by_cluster is not None:
        available = len(chosen) + len(rest)
        if available < cluster_min:
            return [], "the number of clusters is less than the cluster spreadConstraint.MinGroups"
        extra = max(cluster_max - len(chosen), 0) if cluster_max else len(rest)
        chosen += rest[:extra]
    return chosen, ""


def _lacks_property(cluster: ClusterInfo, constraint: Mapping[str, Any]) -> bool:
    by_label = constraint.get("spreadByLabel")
    if constraint.get("spreadByField") in (None, "", "cluster") and not by_label:
        return False
    return _group_key(cluster, constraint) == ""


# ---------------------------------------------------------------------------------------------
# Karmada: the whole placement


def _fit_message(total: int, reasons: Mapping[str, int]) -> str:
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} clusters are available: {', '.join(histogram)}."


def _place_group(
    affinity: Mapping[str, Any],
    tolerations: Sequence[Any],
    spread: Sequence[Mapping[str, Any]],
    clusters: Sequence[ClusterInfo],
) -> PlacementDecision:
    by_name = {c.name: c for c in clusters}
    failures = [_not_found(str(n)) for n in items(affinity.get("clusterNames")) if n not in by_name]
    reasons: dict[str, int] = {}
    fit: list[ClusterInfo] = []
    for cluster in clusters:
        taint = untolerated_taint(cluster, tolerations)
        matches = cluster_matches_affinity(cluster, affinity)
        if taint is not None:
            reason = f"cluster(s) had untolerated taint {{{taint_string(taint)}}}"
            if matches:
                readiness = taint.key in _READINESS_TAINTS
                failures.append(
                    ClusterFailure(
                        cluster.name,
                        "ClusterNotReady" if readiness else "TaintNotTolerated",
                        reason.replace("cluster(s)", "cluster"),
                    )
                )
        elif not matches:
            reason = REASON_AFFINITY
        else:
            lacking = next((c for c in spread if _lacks_property(cluster, c)), None)
            if lacking is None:
                fit.append(cluster)
                continue
            reason = f"cluster(s) did not have {_spread_property(lacking)} property"
        reasons[reason] = reasons.get(reason, 0) + 1
    if not fit:
        message = _fit_message(len(clusters), reasons)
        return PlacementDecision((), _sorted(failures), NO_CLUSTER_FIT, message)
    chosen, error = _spread(fit, spread)
    if error:
        return PlacementDecision((), _sorted(failures), NO_CLUSTER_FIT, error)
    return PlacementDecision(tuple(sorted(c.name for c in chosen)), _sorted(failures))


def karmada_placement(placement: Any, clusters: Sequence[ClusterInfo]) -> PlacementDecision:
    """Evaluate a (Cluster)PropagationPolicy's `spec.placement` against the registered clusters."""
    spec = mapping(placement)
    tolerations = items(spec.get("clusterTolerations"))
    spread = [mapping(c) for c in items(spec.get("spreadConstraints"))]
    groups = items(spec.get("clusterAffinities"))
    if not groups:
        return _place_group(mapping(spec.get("clusterAffinity")), tolerations, spread, clusters)
    decision = PlacementDecision((), (), NO_CLUSTER_FIT, "no cluster affinity group given")
    for group in groups:
        decision = _place_group(mapping(group), tolerations, spread, clusters)
        if decision.selected:
            return decision
    return decision
