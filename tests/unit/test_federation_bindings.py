"""The ResourceBinding view of a template: names, scheduling result, applied and health."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.bindings import awaiting_reports, binding, binding_name, health, with_times
from tether.federation.model import ResourceRef
from tether.federation.workinfo import WorkInfo, work_info

TEMPLATE: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "nginx", "namespace": "shop", "uid": "t-uid", "resourceVersion": "9"},
    "spec": {"replicas": 3},
}
POLICY: dict[str, Any] = {
    "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
    "metadata": {"name": "nginx", "namespace": "shop"},
    "spec": {"propagateDeps": True, "placement": {"clusterAffinity": {
        "clusterNames": ["member1", "member2"]}}},
}


def work(cluster: str, replicas: int, *, applied: bool | None, ready: int = 0,
         message: str = "") -> WorkInfo:
    """A Work as the hub's informer hands it to the binding writer (parsed)."""
    out: dict[str, Any] = {
        "metadata": {"name": "deployment-shop-nginx", "namespace": f"tether-es-{cluster}",
                     "generation": 2},
        "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                             "metadata": {"name": "nginx", "namespace": "shop"},
                                             "spec": {"replicas": replicas}}]}},
    }
    if applied is not None:
        cond = {"type": "Applied", "status": "True" if applied else "False",
                "observedGeneration": 2, "reason": "AppliedSuccessful" if applied else "Conflict",
                "message": message}
        entry: dict[str, Any] = {"identifier": {"kind": "Deployment", "name": "nginx"},
                                 "applied": applied}
        if applied:
            entry["status"] = {"replicas": replicas, "readyReplicas": ready}
        out["status"] = {"conditions": [cond], "manifestStatuses": [entry]}
    return work_info(out)


def test_names_as_karmada_generates_them() -> None:
    assert binding_name("Deployment", "nginx") == "nginx-deployment"
    assert binding_name("ClusterRole", "system:aggregate") == "system.aggregate-clusterrole"


def test_scheduled_and_fully_applied() -> None:
    rb = binding(TEMPLATE, POLICY, [work("member2", 1, applied=True, ready=1),
                                    work("member1", 2, applied=True, ready=2)], {})
    assert rb["kind"] == "ResourceBinding"
    assert rb["metadata"]["name"] == "nginx-deployment"
    assert rb["metadata"]["namespace"] == "shop"
    assert rb["metadata"]["ownerReferences"][0]["uid"] == "t-uid"
    spec = rb["spec"]
    assert spec["resource"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                "namespace": "shop", "name": "nginx", "uid": "t-uid"}
    assert spec["replicas"] == 3 and spec["propagateDeps"] is True
    assert spec["clusters"] == [{"name": "member1", "replicas": 2},
                                {"name": "member2", "replicas": 1}]
    assert spec["placement"] == POLICY["spec"]["placement"]
    status = rb["status"]
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Scheduled", "True", "Success"), ("FullyApplied", "True", "FullyAppliedSuccess")]
    assert [(a["clusterName"], a["applied"], a["health"]) for a in status["aggregatedStatus"]] == [
        ("member1", True, "Healthy"), ("member2", True, "Healthy")]


def test_not_applied_or_not_ready_yet() -> None:
    rb = binding(TEMPLATE, POLICY, [
        work("member1", 2, applied=False, message="Deployment shop/nginx already exists"),
        work("member2", 1, applied=True, ready=0),
        work("member3", 1, applied=None),
    ], {})
    conds = {c["type"]: c for c in rb["status"]["conditions"]}
    assert conds["FullyApplied"]["status"] == "False"
    by = {a["clusterName"]: a for a in rb["status"]["aggregatedStatus"]}
    assert by["member1"]["applied"] is False and by["member1"]["health"] == "Unhealthy"
    assert "already exists" in by["member1"]["appliedMessage"]
    assert by["member2"]["health"] == "Unhealthy"
    assert by["member3"] == {"clusterName": "member3", "health": "Unknown"}


def test_nothing_scheduled_reports_why() -> None:
    report = {"conditions": [{"type": "Propagated", "status": "False", "reason": "NoClusterFit",
                              "message": "0/2 clusters are available"}]}
    rb = binding({**TEMPLATE, "metadata": {"name": "ns-wide", "uid": "u"}, "kind": "Namespace",
                  "apiVersion": "v1", "spec": {}}, POLICY, [], report)
    assert rb["kind"] == "ClusterResourceBinding" and "namespace" not in rb["metadata"]
    assert "replicas" not in rb["spec"]
    scheduled = rb["status"]["conditions"][0]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "NoClusterFit")


@pytest.mark.parametrize(("states", "expected"), [
    ([None, None], True),  # scheduled, nobody reported yet: the first status may wait
    ([True, None], True),
    ([True, True], False),  # everything in: write it
    ([False, None], False),  # a failure is news: write it now
    ([], False),  # not scheduled: says why at once
])
def test_a_first_status_waits_only_for_reports(states: list[bool | None], expected: bool) -> None:
    works = [work(f"member{i}", 1, applied=s, ready=1) for i, s in enumerate(states)]
    assert awaiting_reports(binding(TEMPLATE, POLICY, works, {})["status"]) is expected


@pytest.mark.parametrize(("kind", "status", "expected"), [
    ("Deployment", None, "Unknown"),
    ("Deployment", {"replicas": 2, "readyReplicas": 2}, "Healthy"),
    ("Deployment", {"replicas": 2, "readyReplicas": 1}, "Unhealthy"),
    ("DaemonSet", {"desiredNumberScheduled": 1, "numberReady": 1}, "Healthy"),
    ("ConfigMap", {}, "Healthy"),
])
def test_health(kind: str, status: dict[str, Any] | None, expected: str) -> None:
    assert health(ResourceRef("v1", kind, "ns", "x"), status) == expected


def test_condition_times_kept_while_status_holds() -> None:
    current = [{"type": "Scheduled", "status": "True", "lastTransitionTime": "T0"},
               {"type": "FullyApplied", "status": "False", "lastTransitionTime": "T0"}]
    out = with_times([{"type": "Scheduled", "status": "True"},
                      {"type": "FullyApplied", "status": "True"}], current, "T1")
    assert [c["lastTransitionTime"] for c in out] == ["T0", "T1"]
