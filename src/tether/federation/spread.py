"""Karmada's spread constraints: which of the feasible clusters a placement selects.

Facts (Karmada's scheduler, `spreadconstraint`):

- Without constraints, or with Divided + Weighted by a static weight list (or no weight
  preference), every feasible cluster is selected.
- Clusters are ordered by score (tether's only score is Karmada's ClusterLocality: 100 for a
  cluster the workload already runs on, else 0), then available replicas, then name.
- Only a `cluster` constraint: fewer feasible clusters than `minGroups` fails ("the number of
  feasible clusters is less than spreadConstraint.MinGroups"); otherwise the first `maxGroups`.
  When replicas are divided by capacity (not Duplicated), clusters from the rest replace the
  selected ones from the back, each by the rest's largest-capacity cluster bigger than it, until
  the selection can hold the replicas ("no enough resource when selecting N clusters").
- A group constraint (Karmada implements `region`; tether uses the same algorithm for `zone`,
  `provider` and `spreadByLabel`): clusters are grouped; each group is scored (Divided: the
  replicas its best clusters can hold towards ceil(replicas/minGroups), counted in thousands,
  plus their average score; Duplicated: how many of its clusters can hold all replicas, in
  thousands, plus their average score); then Karmada's depth-first search finds the sets of
  `minGroups`..`maxGroups` groups holding at least the cluster constraint's `minGroups`
  clusters, preferring the highest total score, then most clusters, then the first found (a
  smaller set whose groups, best first, are where the winner's start wins over it). Each chosen group gives its best
  cluster, and the best of the remaining clusters fill up to the cluster constraint's
  `maxGroups`. Fewer groups than `minGroups`: "the number of feasible region is less than
  spreadConstraint.MinGroups".
- Karmada requires a `cluster` constraint next to any other (its webhook refuses the policy
  otherwise); tether does too (`validate`). `maxGroups` 0 or absent: Karmada then selects
  nothing (its search allows no group); tether reads it as "no limit", the only reading under
  which such a policy can schedule at all. A cluster listing several zones belongs to each of
  those zone groups but is selected at most once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._util import as_int, mapping, string_map
from .model import ClusterInfo

WEIGHT_UNIT = 1000
GROUP_FIELDS = ("region", "zone", "provider")


class SpreadError(Exception):
    """The constraints cannot be met; the message is Karmada's."""


@dataclass(frozen=True)
class Candidate:
    """A feasible cluster as the selection sees it (Karmada's ClusterDetailInfo)."""

    info: ClusterInfo
    score: int = 0
    available: int = 0  # replicas it could run: free capacity plus what the workload runs there

    @property
    def name(self) -> str:
        return self.info.name


def order(candidates: Sequence[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (-c.score, -c.available, c.name))


def constraint_of(constraints: Sequence[Mapping[str, Any]], field: str) -> Mapping[str, Any] | None:
    return next((c for c in constraints if c.get("spreadByField") == field), None)


def grouping_constraint(constraints: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((c for c in constraints if c.get("spreadByField") in GROUP_FIELDS
                 or (c.get("spreadByLabel") and not c.get("spreadByField"))), None)


def group_keys(cluster: ClusterInfo, constraint: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups a cluster belongs to under a grouping constraint (none: lacks the property)."""
    label = constraint.get("spreadByLabel")
    field = constraint.get("spreadByField")
    if label and not field:
        value = string_map(cluster.labels).get(str(label), "")
        return (value,) if value else ()
    if field == "region":
        return (cluster.region,) if cluster.region else ()
    if field == "provider":
        return (cluster.provider,) if cluster.provider else ()
    if field == "zone":
        return tuple(sorted(set(cluster.zones)))
    return (cluster.name,)


def property_name(constraint: Mapping[str, Any]) -> str:
    label = constraint.get("spreadByLabel")
    if label and not constraint.get("spreadByField"):
        return f"label {label}"
    field = str(constraint.get("spreadByField", ""))
    return "zones" if field == "zone" else field


def _min_groups(constraint: Mapping[str, Any] | None) -> int:
    if constraint is None:
        return 0
    value = constraint.get("minGroups")
    return 1 if value is None else as_int(value, 1)


def _max_groups(constraint: Mapping[str, Any] | None, unlimited: int) -> int:
    value = as_int(mapping(constraint).get("maxGroups"))
    return value if value > 0 else unlimited


# group scores ---------------------------------------------------------------------------------


def group_score(clusters: Sequence[Candidate], *, replicas: int, duplicated: bool,
                min_groups: int, cluster_min_groups: int) -> int:
    """Karmada's calcGroupScore (clusters already ordered best first)."""
    if duplicated:
        valid = [c for c in clusters if c.available >= replicas]
        if not valid:
            return 0
        return len(valid) * WEIGHT_UNIT + sum(c.score for c in valid) // len(valid)
    target = math.ceil(replicas / min_groups) if min_groups > 0 else replicas
    need_clusters = max(cluster_min_groups, min_groups)
    total_available = total_score = counted = 0
    for cluster in clusters:
        total_available += cluster.available
        total_score += cluster.score
        counted += 1
        if counted >= need_clusters and total_available >= target:
            break
    if total_available < target:
        return total_available * WEIGHT_UNIT + total_score // max(len(clusters), 1)
    return target * WEIGHT_UNIT + total_score // counted


@dataclass(frozen=True)
class GroupInfo:
    name: str
    value: int  # clusters in it
    weight: int  # its score


def select_groups(groups: Sequence[GroupInfo], min_groups: int, max_groups: int,
                  target: int) -> list[GroupInfo]:
    """Karmada's selectGroups: depth-first search for feasible sets, then prioritizePaths."""
    if not groups:
        return []
    ordered = sorted(groups, key=lambda g: (g.value, -g.weight, g.name))
    paths: list[tuple[int, list[GroupInfo]]] = []  # (discovery id, groups sorted by weight)
    path: list[GroupInfo] = []
    counter = 0

    def dfs(total: int, begin: int) -> None:
        nonlocal counter
        if total >= target and min_groups <= len(path) <= max_groups:
            counter += 1
            paths.append((counter, sorted(path, key=lambda g: (-g.weight, g.name))))
            return
        if len(path) >= max_groups:
            return
        for index in range(begin, len(ordered)):
            total += ordered[index].value
            path.append(ordered[index])
            dfs(total, index + 1)
            if len(ordered) == min_groups:
                break
            total -= ordered[index].value
            path.pop()

    dfs(0, 0)
    if not paths:
        return []
    if len(paths) == 1:
        return paths[0][1]

    def rank(entry: tuple[int, list[GroupInfo]]) -> tuple[int, int, int]:
        found, chosen = entry
        return (-sum(g.weight for g in chosen), -sum(g.value for g in chosen), found)

    ranked = sorted(paths, key=rank)
    final = ranked[0][1]
    for _, other in ranked[1:]:
        if len(other) < len(final) and [g.name for g in final[:len(other)]] == [
                g.name for g in other]:
            final = other
    return final


# selection ------------------------------------------------------------------------------------


def _has_room(clusters: Sequence[Candidate], replicas: int) -> bool:
    return sum(c.available for c in clusters) >= replicas


def _by_cluster(candidates: list[Candidate], constraint: Mapping[str, Any],
                replicas: int | None) -> list[Candidate]:
    total = len(candidates)
    if total < _min_groups(constraint):
        raise SpreadError("the number of feasible clusters is less than "
                          "spreadConstraint.MinGroups")
    need = min(total, _max_groups(constraint, total))
    if replicas is None:
        return candidates[:need]
    chosen, rest = candidates[:need], candidates[need:]
    index = len(chosen) - 1
    while not _has_room(chosen, replicas) and index >= 0:
        best = None
        for position, other in enumerate(rest):
            bar = chosen[index].available if best is None else rest[best].available
            if other.available > bar:
                best = position
        if best is not None:
            chosen[index], rest[best] = rest[best], chosen[index]
        index -= 1
    if not _has_room(chosen, replicas):
        raise SpreadError(f"no enough resource when selecting {need} clusters")
    return chosen


def _by_group(candidates: list[Candidate], grouping: Mapping[str, Any],
              by_cluster: Mapping[str, Any] | None, replicas: int | None,
              duplicated: bool) -> list[Candidate]:
    members: dict[str, list[Candidate]] = {}
    for cluster in candidates:
        for key in group_keys(cluster.info, grouping):
            members.setdefault(key, []).append(cluster)
    min_groups = _min_groups(grouping)
    if len(members) < min_groups:
        raise SpreadError(f"the number of feasible {property_name(grouping)} is less than "
                          "spreadConstraint.MinGroups")
    cluster_min = _min_groups(by_cluster)
    groups = [
        GroupInfo(name, len(clusters), group_score(
            clusters, replicas=replicas or 0, duplicated=duplicated or replicas is None,
            min_groups=min_groups, cluster_min_groups=cluster_min))
        for name, clusters in members.items()
    ]
    chosen_groups = select_groups(groups, min_groups, _max_groups(grouping, len(groups)),
                                  cluster_min)
    if not chosen_groups:
        raise SpreadError("the number of clusters is less than the cluster "
                          "spreadConstraint.MinGroups")
    selected: list[Candidate] = []
    rest: list[Candidate] = []
    taken: set[str] = set()
    for group in chosen_groups:
        first = next((c for c in members[group.name] if c.name not in taken), None)
        if first is not None:
            selected.append(first)
            taken.add(first.name)
    for group in chosen_groups:
        for cluster in members[group.name]:
            if cluster.name not in taken and cluster not in rest:
                rest.append(cluster)
    everything = len(selected) + len(rest)
    want = min(everything, _max_groups(by_cluster, everything)) if by_cluster else 0
    extra = want - len(selected)
    if extra > 0:
        selected += order(rest)[:extra]
    return selected


def ignores_spread(replica_scheduling: Any) -> bool:
    """Divided + Weighted by static weights (or no weight preference): spread is ignored."""
    if replica_scheduling is None:
        return False
    spec = mapping(replica_scheduling)
    if spec.get("replicaSchedulingType", "Divided") != "Divided":
        return False
    if (spec.get("replicaDivisionPreference") or "Weighted") != "Weighted":
        return False
    weights = spec.get("weightPreference")
    if weights is None:
        return True
    return bool(mapping(weights).get("staticWeightList")) and not mapping(weights).get(
        "dynamicWeight")


def select(candidates: Sequence[Candidate], constraints: Sequence[Mapping[str, Any]], *,
           replica_scheduling: Any, replicas: int | None) -> list[Candidate]:
    """The clusters the spread constraints select (raises SpreadError)."""
    ordered = order(candidates)
    if not constraints or ignores_spread(replica_scheduling):
        return ordered
    duplicated = replica_scheduling is None or mapping(replica_scheduling).get(
        "replicaSchedulingType", "Divided") == "Duplicated"
    need = None if duplicated else replicas
    by_cluster = constraint_of(constraints, "cluster")
    grouping = grouping_constraint(constraints)
    if grouping is not None:
        return _by_group(ordered, grouping, by_cluster, replicas, duplicated)
    if by_cluster is not None:
        return _by_cluster(ordered, by_cluster, need)
    return ordered


def lacks_property(cluster: ClusterInfo, constraints: Sequence[Mapping[str, Any]]) -> str:
    """The spread property a cluster lacks (Karmada's SpreadConstraint filter), or ""."""
    for constraint in constraints:
        field = constraint.get("spreadByField")
        if field in (None, "", "cluster") and not constraint.get("spreadByLabel"):
            continue
        if not group_keys(cluster, constraint):
            return property_name(constraint)
    return ""
