"""Karmada's ClusterAffinity (placement, override rules, static weights, taint policies), and a
cluster's taints as the scheduler sees them.

- ClusterAffinity: `exclude` wins; then `labelSelector`, `fieldSelector` (keys provider, region,
  zone) and `clusterNames` must all hold (each only when given).
- Zone requirements follow Karmada: `In` needs every zone of the cluster listed (and at least
  one zone), `NotIn` needs none of them listed.
- Readiness as taints: a cluster whose Ready condition is not True but that carries no readiness
  taint yet (the health controller adds it right after writing the condition) is treated as
  carrying `cluster.karmada.io/not-ready:NoSchedule`, so no new placement slips through between
  the two writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.objects.selectors import matches_label_selector, matches_requirement

from ._util import items, mapping
from .model import ClusterInfo, Taint
from .taints import NO_SCHEDULE, NOT_READY, READINESS_TAINTS

REASON_AFFINITY = "cluster(s) did not match the placement cluster affinity constraint"


def _field_values(cluster: ClusterInfo) -> dict[str, str]:
    fields = {}
    if cluster.provider:
        fields["provider"] = cluster.provider
    if cluster.region:
        fields["region"] = cluster.region
    return fields


def _match_zones(requirement: Mapping[str, Any], zones: Sequence[str]) -> bool:
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
    """Whether `cluster` matches a ClusterAffinity (see module docstring)."""
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


def effective_taints(cluster: ClusterInfo) -> tuple[Taint, ...]:
    """The cluster's taints plus the implied not-ready taint (see module docstring)."""
    if cluster.ready or any(t.key in READINESS_TAINTS for t in cluster.taints):
        return cluster.taints
    return (*cluster.taints, Taint(NOT_READY, NO_SCHEDULE))
