"""Cluster selection: which registered clusters a federated object targets, and why not others.

KubeFed (`spec.placement` of a Federated<Kind>):
- `clusters` present (even `[]`): exactly those names; `clusterSelector` is then ignored.
- else `clusterSelector`: a label selector, `{}` selects every cluster; absent (placement `{}`)
  selects none. An empty selection is not an error in KubeFed.
- Names that are not registered become `ClusterNotFound` failures (KubeFed silently drops them;
  tether says so). Selected clusters that are not ready become `ClusterNotReady` failures, the
  per-cluster status KubeFed's sync controller reports.

Karmada (`spec.placement` of a (Cluster)PropagationPolicy): `karmada_placement` is the
scheduler's (`scheduler`) answer for a template without replicas that has not been placed
before: the clusters selected, and targeted clusters that cannot be used. A cluster that matches
the affinity but is rejected by an untolerated readiness taint becomes a `ClusterNotReady`
failure; by any other taint, a `TaintNotTolerated` failure (both are "targeted, but nothing
goes there"). When nothing fits the decision carries `reason="NoClusterFit"` and Karmada's
message, e.g. "0/3 clusters are available: 1 cluster(s) had untolerated taint
{cluster.karmada.io/not-ready:NoSchedule}, 2 cluster(s) did not match the placement cluster
affinity constraint."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.objects.selectors import matches_label_selector

from ._util import items, mapping
from .affinity import REASON_AFFINITY, cluster_matches_affinity, effective_taints
from .model import ClusterFailure, ClusterInfo

NO_CLUSTER_FIT = "NoClusterFit"

__all__ = [
    "NO_CLUSTER_FIT",
    "REASON_AFFINITY",
    "PlacementDecision",
    "cluster_matches_affinity",
    "effective_taints",
    "karmada_placement",
    "kubefed_placement",
]


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
# Karmada


def karmada_placement(placement: Any, clusters: Sequence[ClusterInfo]) -> PlacementDecision:
    """Evaluate a (Cluster)PropagationPolicy's `spec.placement` for a first placement."""
    from .scheduler import schedule  # the scheduler builds on this module's KubeFed half

    result = schedule(placement, clusters)
    return PlacementDecision(tuple(sorted(result.targets)), result.failures, result.reason,
                             result.message)
