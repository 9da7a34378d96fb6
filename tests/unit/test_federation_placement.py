"""Cluster selection for both dialects (tether.federation.placement)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.model import ClusterFailure, ClusterInfo, Taint
from tether.federation.placement import (
    cluster_matches_affinity,
    karmada_placement,
    kubefed_placement,
)

CLUSTERS = (
    ClusterInfo("a", labels={"env": "prod"}, provider="aws", region="eu", zones=("eu-1",),
                available_replicas=10),
    ClusterInfo("b", labels={"env": "dev"}, provider="gcp", region="us", zones=("us-1", "us-2"),
                available_replicas=5),
    ClusterInfo("c", labels={"env": "prod"}, provider="aws", region="us", zones=("us-1",),
                available_replicas=20),
)
DOWN = ClusterInfo("d", labels={"env": "prod"}, region="eu", ready=False)


@pytest.mark.parametrize(
    ("placement", "selected", "failures"),
    [
        ({}, (), ()),
        (None, (), ()),
        ({"clusters": []}, (), ()),
        ({"clusters": [], "clusterSelector": {}}, (), ()),  # clusters present: selector ignored
        ({"clusterSelector": {}}, ("a", "b", "c"), (("d", "ClusterNotReady"),)),
        ({"clusterSelector": {"matchLabels": {}}}, ("a", "b", "c"), (("d", "ClusterNotReady"),)),
        ({"clusterSelector": {"matchLabels": {"env": "dev"}}}, ("b",), ()),
        (
            {"clusterSelector": {"matchExpressions": [
                {"key": "env", "operator": "NotIn", "values": ["dev"]}]}},
            ("a", "c"),
            (("d", "ClusterNotReady"),),
        ),
        ({"clusters": [{"name": "c"}, {"name": "a"}, {"name": "c"}]}, ("a", "c"), ()),
        ({"clusters": [{"name": "a"}, {"name": "zz"}]}, ("a",), (("zz", "ClusterNotFound"),)),
        ({"clusters": [{"name": "d"}]}, (), (("d", "ClusterNotReady"),)),
    ],
)
def test_kubefed_placement(placement: Any, selected: tuple[str, ...], failures: Any) -> None:
    decision = kubefed_placement(placement, (*CLUSTERS, DOWN))
    assert decision.selected == selected
    assert tuple((f.cluster, f.reason) for f in decision.failures) == failures
    assert decision.reason == ""


@pytest.mark.parametrize(
    ("affinity", "matches"),
    [
        ({}, {"a", "b", "c"}),
        ({"clusterNames": ["a", "b"]}, {"a", "b"}),
        ({"clusterNames": ["a", "b"], "exclude": ["a"]}, {"b"}),
        ({"exclude": ["c"]}, {"a", "b"}),
        ({"labelSelector": {"matchLabels": {"env": "prod"}}}, {"a", "c"}),
        ({"labelSelector": {"matchLabels": {"env": "prod"}}, "clusterNames": ["a", "b"]}, {"a"}),
        ({"fieldSelector": {"matchExpressions": [
            {"key": "provider", "operator": "In", "values": ["aws"]}]}}, {"a", "c"}),
        ({"fieldSelector": {"matchExpressions": [
            {"key": "region", "operator": "NotIn", "values": ["us"]}]}}, {"a"}),
        # zone In needs every zone of the cluster listed; NotIn needs none of them listed
        ({"fieldSelector": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["us-1"]}]}}, {"c"}),
        ({"fieldSelector": {"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["us-2"]}]}}, {"a", "c"}),
        ({"labelSelector": {"matchExpressions": [
            {"key": "env", "operator": "Bogus", "values": ["x"]}]}}, set()),
    ],
)
def test_cluster_affinity(affinity: dict[str, Any], matches: set[str]) -> None:
    assert {c.name for c in CLUSTERS if cluster_matches_affinity(c, affinity)} == matches


@pytest.mark.parametrize(
    ("placement", "selected"),
    [
        ({}, ("a", "b", "c")),
        ({"clusterAffinity": {"clusterNames": ["b", "c"]}}, ("b", "c")),
        # ordered groups: the first group with a fit wins
        ({"clusterAffinities": [
            {"affinityName": "primary", "clusterNames": ["nope"]},
            {"affinityName": "backup", "labelSelector": {"matchLabels": {"env": "dev"}}},
        ]}, ("b",)),
        ({"clusterAffinities": [
            {"affinityName": "primary", "clusterNames": ["a"]},
            {"affinityName": "backup", "clusterNames": ["b"]},
        ]}, ("a",)),
        # spread by cluster: at most 2 clusters, best (most available replicas) first
        ({"spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 2, "minGroups": 1}]},
         ("a", "c")),
        # spread by region: one (best) cluster per region
        ({"spreadConstraints": [{"spreadByField": "region", "maxGroups": 2, "minGroups": 2}]},
         ("a", "c")),
        ({"spreadConstraints": [{"spreadByField": "region", "maxGroups": 1}]}, ("c",)),
        # region + cluster: best per region, then fill up to the cluster maximum
        ({"spreadConstraints": [
            {"spreadByField": "region", "maxGroups": 2, "minGroups": 2},
            {"spreadByField": "cluster", "maxGroups": 3, "minGroups": 3},
        ]}, ("a", "b", "c")),
        # Karmada's group search stops at the first set of groups that meets minGroups (1 by
        # default) and the cluster constraint's minGroups, preferring the highest score: here
        # "prod" (two clusters) over "dev"; one cluster per group without a cluster constraint
        ({"spreadConstraints": [{"spreadByLabel": "env", "maxGroups": 2}]}, ("c",)),
        ({"spreadConstraints": [{"spreadByLabel": "env", "maxGroups": 2, "minGroups": 2},
                                {"spreadByField": "cluster", "minGroups": 2}]}, ("a", "b", "c")),
        ({"spreadConstraints": [{"spreadByField": "provider", "maxGroups": 1}]}, ("c",)),
    ],
)
def test_karmada_placement_selects(placement: dict[str, Any], selected: tuple[str, ...]) -> None:
    decision = karmada_placement(placement, CLUSTERS)
    assert decision.selected == selected
    assert decision.reason == ""


def test_karmada_not_ready_is_a_taint_that_can_be_tolerated_in_either_spelling() -> None:
    clusters = (*CLUSTERS, DOWN)
    decision = karmada_placement({"clusterAffinity": {"clusterNames": ["a", "d"]}}, clusters)
    assert decision.selected == ("a",)
    assert decision.failures == (
        ClusterFailure("d", "ClusterNotReady",
                       "cluster had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}"),
    )
    for key in ("cluster.karmada.io/not-ready", "cluster.tether.io/not-ready"):
        tolerated = karmada_placement(
            {"clusterAffinity": {"clusterNames": ["a", "d"]},
             "clusterTolerations": [{"key": key, "operator": "Exists", "effect": "NoSchedule"}]},
            clusters,
        )
        assert tolerated.selected == ("a", "d"), key
        assert tolerated.failures == ()


def test_karmada_taints() -> None:
    tainted = ClusterInfo("t", taints=(Taint("dedicated", "NoSchedule", "gpu"),
                                       Taint("soft", "PreferNoSchedule")))
    karmada_down = ClusterInfo("k", ready=False,
                               taints=(Taint("cluster.karmada.io/unreachable", "NoSchedule"),))
    clusters = (tainted, karmada_down)
    decision = karmada_placement({}, clusters)
    assert decision.selected == ()
    assert [(f.cluster, f.reason) for f in decision.failures] == [
        ("k", "ClusterNotReady"), ("t", "TaintNotTolerated")]
    ok = karmada_placement({"clusterTolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu"},
        {"key": "cluster.tether.io/unreachable", "operator": "Exists"},
    ]}, clusters)
    assert ok.selected == ("k", "t")
    wrong_value = karmada_placement(
        {"clusterTolerations": [{"key": "dedicated", "operator": "Equal", "value": "cpu"}]},
        (tainted,))
    assert wrong_value.selected == ()


def test_karmada_no_cluster_fit_message() -> None:
    clusters = (*CLUSTERS, DOWN)
    decision = karmada_placement(
        {"clusterAffinity": {"clusterNames": ["a", "d", "ghost"]},
         "spreadConstraints": [{"spreadByField": "provider", "maxGroups": 1}]},
        (clusters[1], clusters[2], DOWN, ClusterInfo("a")),  # "a" has no provider here
    )
    assert decision.selected == ()
    assert decision.reason == "NoClusterFit"
    assert decision.message == (
        "0/4 clusters are available: "
        "1 cluster(s) did not have provider property, "
        "1 cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}, "
        "2 cluster(s) did not match the placement cluster affinity constraint."
    )
    assert [(f.cluster, f.reason) for f in decision.failures] == [
        ("d", "ClusterNotReady"), ("ghost", "ClusterNotFound")]


def test_karmada_spread_min_groups() -> None:
    decision = karmada_placement(
        {"spreadConstraints": [{"spreadByField": "region", "minGroups": 3, "maxGroups": 3}]},
        CLUSTERS)
    assert decision.selected == ()
    assert decision.reason == "NoClusterFit"
    assert "MinGroups" in decision.message
