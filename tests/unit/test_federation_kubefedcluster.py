"""The KubeFedCluster view of a Cluster: label merging and the copied spec and status."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.kubefedcluster import label_patch, merge_labels, view_spec, view_status


@pytest.mark.parametrize(
    ("cluster", "view", "synced", "expected"),
    [
        # nothing changed on the view: the Cluster's labels hold (including its own edits)
        ({"a": "1", "b": "2"}, {"a": "1"}, {"a": "1"}, {"a": "1", "b": "2"}),
        ({}, {"a": "1"}, {"a": "1"}, {}),
        # `kubectl label kubefedclusters X region=eu`: added on the view, goes to the Cluster
        ({"a": "1"}, {"a": "1", "region": "eu"}, {"a": "1"}, {"a": "1", "region": "eu"}),
        # changed and removed on the view
        ({"a": "1", "b": "2"}, {"a": "9"}, {"a": "1", "b": "2"}, {"a": "9"}),
        # both changed one key: the view's edit wins; other Cluster edits stay
        ({"a": "2", "c": "3"}, {"a": "9"}, {"a": "1"}, {"a": "9", "c": "3"}),
    ],
)
def test_merge_labels(cluster: dict[str, str], view: dict[str, str], synced: dict[str, str],
                      expected: dict[str, str]) -> None:
    assert merge_labels(cluster, view, synced) == expected


def test_label_patch_sets_and_removes() -> None:
    assert label_patch({"a": "1", "b": "2"}, {"a": "1", "c": "3"}) == {"c": "3", "b": None}
    assert label_patch({"a": "1"}, {"a": "1"}) == {}


CLUSTER: dict[str, Any] = {
    "apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster",
    "metadata": {"name": "cluster1", "creationTimestamp": "2024-01-01T00:00:00Z"},
    "spec": {"apiEndpoint": "https://127.0.0.1:6443", "syncMode": "Push",
             "secretRef": {"namespace": "tether-system", "name": "cluster1"},
             "region": "eu", "zones": ["eu-1"]},
    "status": {"kubernetesVersion": "v1.31.0", "conditions": [
        {"type": "Ready", "status": "True", "reason": "ClusterReady",
         "message": "cluster is healthy and ready to accept workloads",
         "lastTransitionTime": "2024-01-01T00:01:00Z"}]},
}


def test_view_spec_and_status() -> None:
    assert view_spec(CLUSTER) == {"apiEndpoint": "https://127.0.0.1:6443",
                                  "secretRef": {"name": "cluster1"}}
    status = view_status(CLUSTER)
    assert status["kubernetesVersion"] == "v1.31.0"
    assert status["region"] == "eu" and status["zones"] == ["eu-1"]
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Ready", "True", "ClusterReady")]
    assert status["conditions"][0]["lastProbeTime"] == "2024-01-01T00:01:00Z"


def test_unreachable_cluster_is_offline() -> None:
    down = {**CLUSTER, "spec": {**CLUSTER["spec"], "insecureSkipTLSVerification": True},
            "status": {"conditions": [{"type": "Ready", "status": "False",
                                       "reason": "ClusterNotReachable",
                                       "message": "cluster is not reachable"}]}}
    status = view_status(down)
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Ready", "False"), ("Offline", "True")]
    # no transition time known: the Cluster's creation, never an empty date
    assert status["conditions"][0]["lastProbeTime"] == "2024-01-01T00:00:00Z"
    assert view_spec(down)["disabledTLSValidations"] == ["*"]
