"""What the sync controllers read of a Cluster, and which placements a cluster change can move."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.model import ClusterInfo
from tether.federation.propagation import kubefed_may_place, placement_view, policy_may_place

EU = ClusterInfo("c1", labels={"env": "prod"}, region="eu")


def cluster(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "c1", "labels": {"env": "prod"}, "resourceVersion": "7"},
            "spec": {"region": "eu", "syncMode": "Pull"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], **status}}


def test_placement_view_ignores_what_placement_does_not_read() -> None:
    base = placement_view(cluster())
    assert base == placement_view(cluster(lastHeartbeatTime="2026-01-01T00:00:00Z",
                                          nodeSummary={"totalNum": 3}))
    moved = cluster()
    moved["metadata"]["resourceVersion"] = "8"
    assert placement_view(moved) == base


@pytest.mark.parametrize("change", [
    lambda c: c["metadata"]["labels"].update(env="dev"),
    lambda c: c["spec"].update(taints=[{"key": "k", "effect": "NoSchedule"}]),
    lambda c: c["status"]["conditions"][0].update(status="False"),
    lambda c: c["spec"].update(region="us"),
    lambda c: c["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
    # capacity-based division and Aggregated scheduling read the resource summary
    lambda c: c["status"].update(resourceSummary={"allocatable": {"cpu": "4"}}),
])
def test_placement_view_sees_what_placement_reads(change: Any) -> None:
    changed = cluster()
    change(changed)
    assert placement_view(changed) != placement_view(cluster())


def test_placement_view_sees_when_a_taint_was_added() -> None:
    """tolerationSeconds count from a NoExecute taint's timeAdded, which ClusterInfo's own
    equality leaves out."""
    def tainted(added: str) -> dict[str, Any]:
        c = cluster()
        c["spec"]["taints"] = [{"key": "k", "effect": "NoExecute", "timeAdded": added}]
        return c
    assert (placement_view(tainted("2026-01-01T00:00:00Z"))
            != placement_view(tainted("2026-01-01T00:05:00Z")))


@pytest.mark.parametrize(("placement", "admitted"), [
    ({}, True),
    ({"clusterAffinity": {"clusterNames": ["c1", "c2"]}}, True),
    ({"clusterAffinity": {"clusterNames": ["c2"]}}, False),
    ({"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "dev"}}}}, False),
    ({"clusterAffinity": {"exclude": ["c1"]}}, False),
    ({"clusterAffinities": [{"affinityName": "a", "clusterNames": ["c2"]},
                            {"affinityName": "b", "labelSelector": {
                                "matchLabels": {"env": "prod"}}}]}, True),
    ({"clusterAffinities": [{"affinityName": "a", "clusterNames": ["c2"]}]}, False),
])
def test_policy_may_place(placement: dict[str, Any], admitted: bool) -> None:
    assert policy_may_place(placement, EU) is admitted


@pytest.mark.parametrize(("placement", "admitted"), [
    ({}, False),
    ({"clusters": []}, False),
    ({"clusters": [{"name": "c1"}]}, True),
    ({"clusters": [{"name": "c2"}], "clusterSelector": {}}, False),
    ({"clusterSelector": {}}, True),
    ({"clusterSelector": {"matchLabels": {"env": "dev"}}}, False),
])
def test_kubefed_may_place(placement: dict[str, Any], admitted: bool) -> None:
    assert kubefed_may_place(placement, EU) is admitted
