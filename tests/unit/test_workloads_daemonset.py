"""The DaemonSet plan: one pod per fitting node, placement rules, rolling update."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.common import template_hash
from tether.local.workloads.daemonset import daemon_pod, plan_daemonset
from tether.local.workloads.placement import fits, tolerates

NOW = dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.UTC)
UID = "ds-uid"
TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"app": "agent"}},
                            "spec": {"containers": [{"name": "c", "image": "agent"}]}}


def ds(template: dict[str, Any] | None = None, max_unavailable: Any = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": UID, "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template or TEMPLATE,
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}}},
    }


def node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def pod(name: str, node_name: str, *, state: str = "ready", template: dict[str, Any] | None = None,
        created: str = "00:00:00") -> dict[str, Any]:
    body = daemon_pod(ds(template), node_name)
    body["metadata"].update(name=name, creationTimestamp=f"2026-01-01T{created}Z")
    body["metadata"]["ownerReferences"][0]["uid"] = UID
    body["status"] = {"phase": "Failed"} if state == "failed" else (
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]} if state == "ready"
        else {"phase": "Pending"})
    return body


def test_daemon_pod_is_pinned_by_affinity_and_tolerates_node_trouble() -> None:
    p = daemon_pod(ds(), "n1")
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                             "values": ["n1"]}]}]}
    keys = {t["key"] for t in p["spec"]["tolerations"]}
    assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"} <= keys
    assert "nodeName" not in p["spec"]
    assert p["metadata"]["labels"]["controller-revision-hash"] == template_hash(TEMPLATE)
    assert p["metadata"]["generateName"] == "agent-"


@pytest.mark.parametrize(
    ("spec", "node_obj", "expected"),
    [
        ({}, node("n"), True),
        ({"nodeSelector": {"disk": "ssd"}}, node("n", {"disk": "ssd"}), True),
        ({"nodeSelector": {"disk": "ssd"}}, node("n", {"disk": "hdd"}), False),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}},
         node("n", {"zone": "b"}), True),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}}},
         node("n", {"zone": "b"}), False),
        ({}, node("n", taints=[{"key": "gpu", "effect": "NoSchedule"}]), False),
        ({}, node("n", taints=[{"key": "gpu", "effect": "PreferNoSchedule"}]), True),
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]},
         node("n", taints=[{"key": "gpu", "effect": "NoSchedule"}]), True),
    ],
)
def test_fits(spec: dict[str, Any], node_obj: dict[str, Any], expected: bool) -> None:
    assert fits(spec, node_obj) is expected


def test_tolerates_by_value_and_wildcard() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates([{"key": "k", "value": "v"}], taint)
    assert not tolerates([{"key": "k", "value": "w"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], taint)


def test_one_pod_per_fitting_node() -> None:
    nodes = [node("n1"), node("n2"), node("tainted", taints=[{"key": "x", "effect": "NoSchedule"}])]
    plan = plan_daemonset(ds(), nodes, [pod("agent-a", "n1")], NOW)
    assert plan.create == ("n2",) and plan.delete == ()
    assert plan.status["desiredNumberScheduled"] == 2 and plan.status["currentNumberScheduled"] == 1
    assert plan.status["numberReady"] == 1 and plan.status["numberMisscheduled"] == 0


def test_extra_misscheduled_failed_and_orphaned_node_pods_go() -> None:
    nodes = [node("n1"), node("n2", {"role": "x"}), node("n3")]
    template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "nodeSelector": {"role": "x"}}}
    pods = [
        pod("on-n1", "n1", template=template),  # n1 no longer fits
        pod("keep", "n2", template=template, created="00:00:01"),
        pod("extra", "n2", template=template, created="00:00:02"),  # a second one on n2
        pod("gone", "n9", template=template),  # node deleted
    ]
    plan = plan_daemonset(ds(template), nodes, pods, NOW)
    assert plan.create == ()
    assert set(plan.delete) == {"on-n1", "extra", "gone"}
    assert plan.status["numberMisscheduled"] == 1


def test_failed_daemon_pod_is_replaced() -> None:
    plan = plan_daemonset(ds(), [node("n1")], [pod("agent-a", "n1", state="failed")], NOW)
    assert plan.delete == ("agent-a",) and plan.create == ("n1",)


@pytest.mark.parametrize(
    ("max_unavailable", "states", "expected_deletes"),
    [
        (1, ["ready", "ready", "ready"], 1),
        (2, ["ready", "ready", "ready"], 2),
        ("100%", ["ready", "ready", "ready"], 3),
        (1, ["pending", "ready", "ready"], 1),  # the unavailable one goes, costing nothing more
        (2, ["pending", "ready", "ready"], 2),
    ],
)
def test_rolling_update_respects_max_unavailable(max_unavailable: Any, states: list[str],
                                                 expected_deletes: int) -> None:
    v2 = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "agent:2"}]}}
    nodes = [node(f"n{i}") for i in range(3)]
    pods = [pod(f"p{i}", f"n{i}", state=s) for i, s in enumerate(states)]
    plan = plan_daemonset(ds(v2, max_unavailable), nodes, pods, NOW)
    assert len(plan.delete) == expected_deletes
    if states[0] == "pending":
        assert "p0" in plan.delete
    assert plan.status.get("updatedNumberScheduled", 0) == 0
