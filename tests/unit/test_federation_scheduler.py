"""Karmada's scheduler for one template: when to reschedule, filters, spread, replica assignment."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.model import ClusterInfo, Taint
from tether.federation.scheduler import Groups, Previous, placement_hash, schedule

DYNAMIC = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                 "replicaDivisionPreference": "Weighted",
                                 "weightPreference": {"dynamicWeight": "AvailableReplicas"}}}
AGGREGATED = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                    "replicaDivisionPreference": "Aggregated"}}
STATIC = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                "replicaDivisionPreference": "Weighted",
                                "weightPreference": {"staticWeightList": [
                                    {"targetCluster": {"clusterNames": ["a"]}, "weight": 2},
                                    {"targetCluster": {"clusterNames": ["b", "c"]}, "weight": 1}]}}}


def _clusters(**free: int) -> list[ClusterInfo]:
    return [ClusterInfo(name, available_replicas=n) for name, n in free.items()]


def _previous(placement: dict[str, Any], **clusters: int) -> Previous:
    return Previous(clusters, placement_hash(placement))


@pytest.mark.parametrize(
    ("placement", "replicas", "free", "previous", "fresh", "targets"),
    [
        # first schedule: Karmada's code-comment example, 12 over 6/12/18
        (DYNAMIC, 12, {"a": 6, "b": 12, "c": 18}, {}, False, {"a": 2, "b": 4, "c": 6}),
        # nothing changed: the schedule stands whatever the clusters' free capacity is now
        (DYNAMIC, 12, {"a": 0, "b": 0, "c": 0}, {"a": 2, "b": 4, "c": 6}, False,
         {"a": 2, "b": 4, "c": 6}),
        # scale up: what runs stays, the 6 added replicas go by free capacity
        (DYNAMIC, 18, {"a": 0, "b": 3, "c": 3}, {"a": 2, "b": 4, "c": 6}, False,
         {"a": 2, "b": 7, "c": 9}),
        # scale down: the new total divided by the current shares
        (DYNAMIC, 6, {"a": 0, "b": 0, "c": 0}, {"a": 2, "b": 4, "c": 6}, False,
         {"a": 1, "b": 2, "c": 3}),
        # a cluster lost (evicted or unjoined): its replicas go to the others by free capacity
        (DYNAMIC, 12, {"a": 10, "b": 2}, {"a": 2, "b": 4}, False, {"a": 7, "b": 5}),
        # fresh (a rebalance): everything divided again, what runs counted as free
        (DYNAMIC, 12, {"a": 4, "b": 0, "c": 4}, {"a": 2, "b": 8, "c": 2}, True,
         {"a": 4, "b": 5, "c": 3}),
        # Aggregated: as few clusters as possible, those already used first
        (AGGREGATED, 12, {"a": 6, "b": 12, "c": 18}, {}, False, {"c": 12}),
        (AGGREGATED, 20, {"a": 6, "b": 12, "c": 18}, {}, False, {"b": 8, "c": 12}),
        # scaling up an Aggregated workload fills the cluster it runs on first
        (AGGREGATED, 14, {"a": 10, "b": 12, "c": 18}, {"a": 4}, False, {"a": 14}),
        (AGGREGATED, 20, {"a": 10, "b": 12, "c": 18}, {"a": 4}, False, {"a": 10, "c": 10}),
        # static weights: a cluster that joins later gets nothing until the placement changes
        (STATIC, 6, {"a": 0, "b": 0, "c": 0}, {"a": 4, "b": 2}, False, {"a": 4, "b": 2}),
        # ... and the static division itself is Webster: 2:1:1 over 6 ⇒ 3/2/1 by name on ties
        (STATIC, 6, {"a": 0, "b": 0, "c": 0}, {}, False, {"a": 3, "b": 2, "c": 1}),
    ],
)
def test_divided_assignment(placement: dict[str, Any], replicas: int, free: dict[str, int],
                            previous: dict[str, int], fresh: bool,
                            targets: dict[str, int]) -> None:
    result = schedule(placement, _clusters(**free), replicas=replicas,
                      previous=_previous(placement, **previous) if previous else None,
                      fresh=fresh)
    assert result.reason == "", result.message
    assert dict(result.targets) == targets
    assert sum(result.targets.values()) == replicas


def test_steady_schedule_is_kept_only_while_nothing_asks_for_a_new_one() -> None:
    clusters = _clusters(a=6, b=12, c=18)
    previous = _previous(STATIC, a=4, b=2)
    assert schedule(STATIC, clusters, replicas=6, previous=previous).kept
    # the placement changed: scheduled again (c now gets its share)
    changed = {**STATIC, "clusterAffinity": {"clusterNames": ["a", "b", "c"]}}
    again = schedule(changed, clusters, replicas=6, previous=previous)
    assert not again.kept and dict(again.targets) == {"a": 3, "b": 2, "c": 1}
    # a scheduled cluster left the federation
    gone = schedule(STATIC, _clusters(a=6, c=18), replicas=6, previous=previous)
    assert dict(gone.targets) == {"a": 4, "c": 2}
    # replicas changed
    assert dict(schedule(STATIC, clusters, replicas=8, previous=previous).targets) == {
        "a": 4, "b": 2, "c": 2}
    # a placement remembered without a hash (Works written by an older tether) counts as changed
    unknown = Previous({"a": 4, "b": 2}, None)
    assert not schedule(STATIC, clusters, replicas=6, previous=unknown).kept


def test_not_enough_capacity_is_unschedulable_with_the_numbers() -> None:
    result = schedule(DYNAMIC, _clusters(a=2, b=1), replicas=6)
    assert result.reason == "Unschedulable"
    assert result.message == ("Clusters available replicas 3 are not enough to schedule. "
                              "(6 wanted; free per cluster: a 2, b 1)")
    assert dict(result.targets) == {}


def test_capacity_comes_from_the_resource_summary() -> None:
    summary = {"allocatable": {"cpu": "8", "pods": "110"}, "allocated": {"cpu": "2", "pods": "3"}}
    clusters = [ClusterInfo("big", resource_summary=summary),
                ClusterInfo("none")]  # no resourceSummary: no capacity
    result = schedule(DYNAMIC, clusters, replicas=3, request={"cpu": 2000})
    assert dict(result.targets) == {"big": 3}
    assert schedule(DYNAMIC, clusters, replicas=4, request={"cpu": 2000}).reason == "Unschedulable"


NOT_READY = Taint("cluster.karmada.io/not-ready", "NoSchedule")
DRAIN = Taint("drain", "NoExecute")


def test_taints_stop_new_placements_only() -> None:
    clusters = [ClusterInfo("a", taints=(NOT_READY,), ready=False), ClusterInfo("b"),
                ClusterInfo("c", taints=(DRAIN,))]
    first = schedule({}, clusters, replicas=2)
    assert dict(first.targets) == {"b": 2}
    assert [(f.cluster, f.reason) for f in first.failures] == [
        ("a", "ClusterNotReady"), ("c", "TaintNotTolerated")]
    # already running on a and c: they stay (the taint manager decides about NoExecute)
    placed = schedule({}, clusters, replicas=2, previous=Previous({"a": 2, "c": 2}))
    assert dict(placed.targets) == {"a": 2, "b": 2, "c": 2}
    tolerated = schedule({"clusterTolerations": [{"key": "drain", "operator": "Exists"}]},
                         clusters, replicas=2)
    assert dict(tolerated.targets) == {"b": 2, "c": 2}


def test_a_cluster_being_evicted_is_not_a_candidate() -> None:
    result = schedule({}, _clusters(a=1, b=1), previous=Previous({}, None, "", frozenset({"a"})))
    assert dict(result.targets) == {"b": None}
    only = schedule({"clusterAffinity": {"clusterNames": ["a"]}}, _clusters(a=1),
                    previous=Previous({}, None, "", frozenset({"a"})))
    assert only.reason == "NoClusterFit"
    assert only.message == ("0/1 clusters are available: 1 cluster(s) is in the process of "
                            "eviction.")


GROUPS = {"clusterAffinities": [
    {"affinityName": "primary", "clusterNames": ["a"]},
    {"affinityName": "backup", "clusterNames": ["b"]},
]}


def test_cluster_affinities_remember_the_group_used() -> None:
    clusters = _clusters(a=5, b=5)
    assert schedule(GROUPS, clusters).affinity_name == "primary"
    # a was evicted: the backup group takes over
    evicted = schedule(GROUPS, clusters, previous=Previous({}, None, "primary", frozenset({"a"})))
    assert (dict(evicted.targets), evicted.affinity_name) == ({"b": None}, "backup")
    # a is back, but the template stays in the backup group ...
    stays = schedule(GROUPS, clusters, previous=Previous({"b": 0}, None, "backup"))
    assert (dict(stays.targets), stays.affinity_name) == ({"b": None}, "backup")
    # ... until a fresh schedule starts from the first group again
    fresh = schedule(GROUPS, clusters, previous=Previous({"b": 0}, None, "backup"), fresh=True)
    assert (dict(fresh.targets), fresh.affinity_name) == ({"a": None}, "primary")


REGIONS = [ClusterInfo("eu1", region="eu", zones=("eu-a",), available_replicas=10),
           ClusterInfo("us1", region="us", zones=("us-a",), available_replicas=5),
           ClusterInfo("us2", region="us", zones=("us-b",), available_replicas=20),
           ClusterInfo("nowhere", available_replicas=50)]


def _spread(*constraints: dict[str, Any], divided: bool = True) -> dict[str, Any]:
    return {**(DYNAMIC if divided else {}), "spreadConstraints": list(constraints)}


@pytest.mark.parametrize(
    ("placement", "replicas", "targets"),
    [
        # by cluster: the best 2 (most free replicas); clusters without a region are fine
        (_spread({"spreadByField": "cluster", "maxGroups": 2, "minGroups": 1}), 10,
         {"nowhere": 7, "us2": 3}),
        # one region holding 15 replicas: us (us2 alone holds 20) beats eu (10)
        (_spread({"spreadByField": "region", "maxGroups": 1, "minGroups": 1},
                 {"spreadByField": "cluster", "maxGroups": 1, "minGroups": 1}), 15, {"us2": 15}),
        # two regions, up to three clusters
        (_spread({"spreadByField": "region", "maxGroups": 2, "minGroups": 2},
                 {"spreadByField": "cluster", "maxGroups": 3, "minGroups": 2}), 14,
         {"eu1": 4, "us1": 2, "us2": 8}),
        # zones (tether extends Karmada's region algorithm to zone, provider and labels): every
        # zone can hold its ceil(6/2) share, so the groups score the same and Karmada's search
        # keeps the first set it found
        (_spread({"spreadByField": "zone", "maxGroups": 2, "minGroups": 2},
                 {"spreadByField": "cluster", "maxGroups": 2, "minGroups": 2}), 6,
         {"eu1": 4, "us1": 2}),
        # a zone that cannot hold its share scores lower and loses
        (_spread({"spreadByField": "zone", "maxGroups": 2, "minGroups": 2},
                 {"spreadByField": "cluster", "maxGroups": 2, "minGroups": 2}), 14,
         {"eu1": 5, "us2": 9}),
        # Duplicated: spread picks the clusters, each runs every replica
        (_spread({"spreadByField": "region", "maxGroups": 2, "minGroups": 2},
                 {"spreadByField": "cluster", "maxGroups": 2, "minGroups": 2}, divided=False),
         3, {"eu1": 3, "us2": 3}),
    ],
)
def test_spread_constraints(placement: dict[str, Any], replicas: int,
                            targets: dict[str, int]) -> None:
    result = schedule(placement, REGIONS, replicas=replicas)
    assert result.reason == "", result.message
    assert dict(result.targets) == targets


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (_spread({"spreadByField": "region", "minGroups": 3, "maxGroups": 3},
                 {"spreadByField": "cluster", "minGroups": 1}),
         "the number of feasible region is less than spreadConstraint.MinGroups"),
        (_spread({"spreadByField": "cluster", "minGroups": 5, "maxGroups": 5}),
         "the number of feasible clusters is less than spreadConstraint.MinGroups"),
        (_spread({"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}),
         "no enough resource when selecting 1 clusters"),
    ],
)
def test_spread_failures(placement: dict[str, Any], message: str) -> None:
    result = schedule(placement, REGIONS, replicas=60)
    assert (result.reason, result.message) == ("NoClusterFit", message)


def test_clusters_lacking_the_spread_property_are_filtered() -> None:
    result = schedule(_spread({"spreadByField": "zone", "minGroups": 1, "maxGroups": 1},
                              {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 1}),
                      [ClusterInfo("nowhere", available_replicas=50)], replicas=1)
    assert result.message == "0/1 clusters are available: 1 cluster(s) did not have zones property."


def test_workload_affinity_groups() -> None:
    clusters = _clusters(a=1, b=1, c=1)
    # affinity: only where every running peer of the group runs (the first goes anywhere)
    assert dict(schedule({}, clusters, groups=Groups(affinity_peers=(frozenset({"b", "c"}),)))
                .targets) == {"b": None, "c": None}
    assert dict(schedule({}, clusters, groups=Groups(affinity_peers=(frozenset(),))).targets) == {
        "a": None, "b": None, "c": None}
    # anti-affinity: nowhere a peer runs
    anti = schedule({}, clusters, groups=Groups(anti_affinity_peers=(frozenset({"a"}),)))
    assert dict(anti.targets) == {"b": None, "c": None}
    blocked = schedule({"clusterAffinity": {"clusterNames": ["a"]}}, clusters,
                       groups=Groups(anti_affinity_peers=(frozenset({"a"}),)))
    assert "cluster already has workload with the same anti-affinity group" in blocked.message
    # a cluster already used stays
    kept = schedule({}, clusters, previous=Previous({"a": 0}),
                    groups=Groups(anti_affinity_peers=(frozenset({"a"}),)))
    assert "a" in kept.targets


def test_group_search_prefers_a_smaller_set_the_winner_starts_with() -> None:
    """Karmada's prioritizePaths: [big, small] scores highest, but [big] alone is feasible and
    is where it starts, so [big] wins."""
    from tether.federation.spread import GroupInfo, select_groups

    small, big = GroupInfo("small", 1, 5), GroupInfo("big", 2, 10)
    assert [g.name for g in select_groups([small, big], 1, 2, 2)] == ["big"]
    # with minGroups 2 only the pair is feasible
    assert [g.name for g in select_groups([small, big], 2, 2, 2)] == ["big", "small"]
    # nothing holds enough clusters
    assert select_groups([small], 1, 1, 2) == []


@pytest.mark.parametrize(("placement", "replicas", "estimated"), [
    ({"replicaScheduling": {"replicaSchedulingType": "Duplicated"}}, 3, False),
    ({}, None, False),  # no replicas to divide (a ConfigMap)
    ({"replicaScheduling": {"replicaSchedulingType": "Divided",
                            "replicaDivisionPreference": "Aggregated"}}, 3, True),
    ({"replicaScheduling": {"replicaSchedulingType": "Duplicated"},
      "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 1}]}, 3, True),
])
def test_capacity_is_estimated_only_when_something_reads_it(
        monkeypatch: pytest.MonkeyPatch, placement: dict[str, Any], replicas: int | None,
        estimated: bool) -> None:
    import tether.federation.scheduler as scheduler

    calls: list[str] = []
    real = scheduler.estimate

    def counting(cluster: ClusterInfo, request: Any) -> int:
        calls.append(cluster.name)
        return real(cluster, request)

    monkeypatch.setattr(scheduler, "estimate", counting)
    clusters = [ClusterInfo("a", available_replicas=5), ClusterInfo("b", available_replicas=5)]
    result = schedule(placement, clusters, replicas=replicas)
    assert result.ok, result.message
    assert bool(calls) == estimated
