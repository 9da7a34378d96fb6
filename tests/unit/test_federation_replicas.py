"""Replica division: Karmada's strategies and KubeFed's ReplicaSchedulingPreference."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.model import ClusterInfo
from tether.federation.replicas import (
    ReplicaSchedulingError,
    divide_by_available,
    divide_by_weight,
    fnv1_32,
    karmada_divide,
    rsp_plan,
)


def _clusters(**available: int | None) -> tuple[ClusterInfo, ...]:
    return tuple(ClusterInfo(n, labels={"name": n}, available_replicas=a)
                 for n, a in available.items())


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (6, {"cluster": 2, "cluster1": 1}, {"cluster": 4, "cluster1": 2}),
        (9, {"a": 1, "b": 2}, {"a": 3, "b": 6}),
        (9, {"a": 1, "b": 3}, {"a": 2, "b": 7}),
        (5, {"a": 1, "b": 1}, {"a": 3, "b": 2}),  # tie: name decides the spare replica
        # Webster: a gets the first seat (5/1), then a's 5/3 beats 1/1, then a's 5/5 ties with
        # b's and c's 1/1 and the cluster with fewer replicas wins
        (3, {"a": 5, "b": 1, "c": 1}, {"a": 2, "b": 1, "c": 0}),
        (7, {"a": 1, "b": 1, "c": 1}, {"a": 3, "b": 2, "c": 2}),
        (4, {"a": 1, "b": 0}, {"a": 4}),
        (0, {"a": 1}, {}),
    ],
)
def test_divide_by_weight(total: int, weights: dict[str, int], expected: dict[str, int]) -> None:
    assert divide_by_weight(total, weights) == expected


def _weighted(*entries: tuple[list[str], int]) -> dict[str, Any]:
    return {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
            "weightPreference": {"staticWeightList": [
                {"targetCluster": {"clusterNames": names}, "weight": w} for names, w in entries]}}


@pytest.mark.parametrize(
    ("scheduling", "total", "expected"),
    [
        (None, 6, None),  # nil replicaScheduling ⇒ Duplicated
        ({"replicaSchedulingType": "Duplicated"}, 6, None),
        ({}, 6, {"a": 2, "b": 2, "c": 2}),  # no type ⇒ Divided; no preference ⇒ equal weights
        ({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}, 7,
         {"a": 3, "b": 2, "c": 2}),
        (_weighted((["a"], 2), (["b"], 1)), 6, {"a": 4, "b": 2}),  # c matches no entry
        (_weighted((["a", "b"], 1), (["a"], 3)), 8, {"a": 6, "b": 2}),  # max matching weight
        (_weighted((["zz"], 3)), 6, {"a": 2, "b": 2, "c": 2}),  # nobody weighted ⇒ equal
        ({"replicaDivisionPreference": "Weighted",
          "weightPreference": {"dynamicWeight": "AvailableReplicas"}}, 12,
         {"a": 2, "b": 4, "c": 6}),  # Karmada's code-comment example
        ({"replicaDivisionPreference": "Aggregated"}, 12, {"c": 12}),
        ({"replicaDivisionPreference": "Aggregated"}, 20, {"c": 12, "b": 8}),  # 18+12 hold 20
    ],
)
def test_karmada_divide(scheduling: Any, total: int, expected: dict[str, int] | None) -> None:
    assert karmada_divide(scheduling, total, _clusters(a=6, b=12, c=18)) == expected


def test_dynamic_weight_remainders_and_shortage() -> None:
    # 10 over 6/12/18 by Webster: quotas 1.67/3.33/5 round to 2/3/5
    assert divide_by_available(10, _clusters(a=6, b=12, c=18)) == {"a": 2, "b": 3, "c": 5}
    with pytest.raises(ReplicaSchedulingError) as err:
        divide_by_available(40, _clusters(a=6, b=12, c=18))
    assert err.value.reason == "Unschedulable"
    assert err.value.message == (
        "Clusters available replicas 36 are not enough to schedule. "
        "(40 wanted; free per cluster: a 6, b 12, c 18)")
    with pytest.raises(ReplicaSchedulingError):
        divide_by_available(1, _clusters(a=None))  # unknown capacity is no capacity


def test_fnv1_32_matches_go_hash_fnv_new32() -> None:
    assert fnv1_32(b"") == 0x811C9DC5
    assert fnv1_32(b"a") == 0x050C5D7E


RSP_DOC_CASES = [
    # (clusters preferences, total, available clusters, expected) — KubeFed user guide examples
    ({"A": {"weight": 1}, "B": {"weight": 2}}, 9, ["A", "B"], {"A": 3, "B": 6}),
    ({"A": {"minReplicas": 4, "weight": 1}, "B": {"minReplicas": 4, "weight": 2}}, 9, ["A", "B"],
     {"A": 4, "B": 5}),
    ({"*": {"weight": 1}, "C": {"maxReplicas": 20, "weight": 1}}, 50, ["A", "C"],
     {"A": 30, "C": 20}),  # B down
    ({"*": {"weight": 1}, "C": {"maxReplicas": 20, "weight": 1}}, 50, ["C"], {"C": 20}),
    ({"A": {"weight": 1}}, 5, ["A", "B"], {"A": 5, "B": 0}),  # missing cluster = weight 0
    # minimums exceed the total: clusters get theirs in hash order (B, C, A for this key)
    ({"*": {"minReplicas": 20, "weight": 0}}, 50, ["A", "B", "C"], {"A": 10, "B": 20, "C": 20}),
]


@pytest.mark.parametrize(("prefs", "total", "clusters", "expected"), RSP_DOC_CASES)
def test_rsp_doc_examples(
    prefs: dict[str, Any], total: int, clusters: list[str], expected: dict[str, int]
) -> None:
    spec = {"targetKind": "FederatedDeployment", "totalReplicas": total, "clusters": prefs}
    plan = rsp_plan(spec, clusters, "default/frontend")
    assert plan == expected


def test_rsp_equal_weights_with_cap_16_17_17() -> None:
    spec = {"totalReplicas": 50, "clusters": {"*": {"weight": 1},
                                               "C": {"maxReplicas": 20, "weight": 1}}}
    # Ties are broken by KubeFed's FNV hash of cluster name + RSP key; the last in that order
    # gets the short share. For "default/frontend" that is A, which is the doc's layout.
    assert rsp_plan(spec, ["A", "B", "C"], "default/frontend") == {"A": 16, "B": 17, "C": 17}
    for key in ("default/nginx", "test-namespace/test-deployment", "x/y"):
        assert sorted(rsp_plan(spec, ["A", "B", "C"], key).values()) == [16, 17, 17]


RSP_KEEP_CASES = [
    # (preferences, total, clusters, running now, rebalance=false plan, rebalance=true plan)
    # B goes down: what A and C run stays, B's replicas go where there is room (C stops at 20)
    ({"*": {"weight": 1}, "C": {"maxReplicas": 20, "weight": 1}}, 50, ["A", "C"],
     {"A": 16, "B": 17, "C": 17}, {"A": 30, "C": 20}, {"A": 30, "C": 20}),
    # new weights move nothing without rebalance
    ({"A": {"weight": 2}, "B": {"weight": 1}}, 6, ["A", "B"], {"A": 3, "B": 3},
     {"A": 3, "B": 3}, {"A": 4, "B": 2}),
    # scaling up places only the new replicas, by weight
    ({"A": {"weight": 1}, "B": {"weight": 2}}, 12, ["A", "B"], {"A": 3, "B": 6},
     {"A": 4, "B": 8}, {"A": 4, "B": 8}),
    # scaling up from a lopsided layout keeps it and tops up the short cluster
    ({"A": {"weight": 1}, "B": {"weight": 1}}, 10, ["A", "B"], {"A": 6, "B": 0},
     {"A": 6, "B": 4}, {"A": 5, "B": 5}),
    # running above maxReplicas is trimmed to it
    ({"A": {"weight": 1, "maxReplicas": 2}, "B": {"weight": 1}}, 6, ["A", "B"], {"A": 5, "B": 1},
     {"A": 2, "B": 4}, {"A": 2, "B": 4}),
    # a newly joined cluster gets nothing until replicas are added (no disruption)
    ({"*": {"weight": 1}}, 4, ["A", "B", "N"], {"A": 2, "B": 2}, {"A": 2, "B": 2, "N": 0}, None),
]


@pytest.mark.parametrize(("prefs", "total", "clusters", "running", "kept", "rebalanced"), RSP_KEEP_CASES)
def test_rsp_without_rebalance_keeps_running_replicas(
    prefs: dict[str, Any], total: int, clusters: list[str], running: dict[str, int],
    kept: dict[str, int], rebalanced: dict[str, int] | None,
) -> None:
    spec = {"totalReplicas": total, "clusters": prefs}
    assert rsp_plan(spec, clusters, "default/frontend", running) == kept
    assert sum(kept.values()) == total
    if rebalanced is not None:
        assert rsp_plan({**spec, "rebalance": True}, clusters, "default/frontend", running) == rebalanced
        assert rsp_plan(spec, clusters, "default/frontend") == rebalanced  # nothing runs yet


def test_rsp_scale_down_without_rebalance_keeps_the_first_preference() -> None:
    """KubeFed keeps running replicas in preference order (weight, then hash) when shrinking."""
    spec = {"totalReplicas": 4, "clusters": {"*": {"weight": 1}}}
    plan = rsp_plan(spec, ["A", "B"], "default/frontend", {"A": 6, "B": 6})
    assert sorted(plan.values()) == [0, 4]
    rebalanced = rsp_plan({**spec, "rebalance": True}, ["A", "B"], "default/frontend", {"A": 6, "B": 6})
    assert rebalanced == {"A": 2, "B": 2}
