"""The ReplicaSet plan: how many pods to create, which to delete, what status says."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.replicaset import deletion_order, plan_replicaset

NOW = dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.UTC)
RS_UID = "rs-uid"


def rs(replicas: int, *, min_ready: int = 0, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web-abc", "namespace": "default", "uid": RS_UID, "generation": 4}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
        "spec": {"replicas": replicas, "minReadySeconds": min_ready, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "tier": "f"}}, "spec": {}}},
    }


def pod(name: str, *, phase: str = "Pending", ready: bool = False, node: str = "", created: str = "00:00:00",
        ready_at: str = "00:00:00", restarts: int = 0, owned: bool = True, deleting: bool = False,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "creationTimestamp": f"2026-01-01T{created}Z",
                            "labels": labels or {"app": "web", "tier": "f"}}
    if owned:
        meta["ownerReferences"] = [{"uid": RS_UID, "controller": True, "kind": "ReplicaSet", "name": "web-abc"}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": f"2026-01-01T{ready_at}Z"}]
    if restarts:
        status["containerStatuses"] = [{"restartCount": restarts}]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


RUNNING = {"phase": "Running", "node": "n1"}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # unscheduled before scheduled
        ([pod("bound", **RUNNING, ready=True), pod("unbound")], ["unbound", "bound"]),
        # Pending before Running
        ([pod("running", **RUNNING), pod("pending", node="n1")], ["pending", "running"]),
        # not ready before ready
        ([pod("ready", **RUNNING, ready=True), pod("notready", **RUNNING)], ["notready", "ready"]),
        # ready for less time before longer
        ([pod("old", **RUNNING, ready=True, ready_at="00:00:10"),
          pod("fresh", **RUNNING, ready=True, ready_at="00:05:00")], ["fresh", "old"]),
        # more restarts first
        ([pod("calm", **RUNNING), pod("crashy", **RUNNING, restarts=4)], ["crashy", "calm"]),
        # newest first
        ([pod("first", created="00:00:01"), pod("second", created="00:00:02")], ["second", "first"]),
    ],
)
def test_deletion_order(pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert [p["metadata"]["name"] for p in deletion_order(pods)] == expected


@pytest.mark.parametrize(
    ("replicas", "pods", "create", "delete"),
    [
        (3, [], 3, ()),
        (3, [pod("a"), pod("b")], 1, ()),
        (2, [pod("a"), pod("b")], 0, ()),
        # scale down picks unscheduled, then not-ready ones
        (1, [pod("a", **RUNNING, ready=True), pod("b"), pod("c", **RUNNING)], 0, ("b", "c")),
        # terminating and finished pods do not count: they are replaced
        (2, [pod("a", deleting=True), pod("b", phase="Succeeded"), pod("c", phase="Failed"), pod("d")], 1, ()),
        # pods that belong to someone else are not ours
        (1, [pod("a", owned=False, labels={"app": "other"})], 1, ()),
        (0, [pod("a"), pod("b")], 0, ("b", "a")),
    ],
)
def test_plan_scales_to_replicas(replicas: int, pods: list[dict[str, Any]], create: int,
                                 delete: tuple[str, ...]) -> None:
    plan = plan_replicaset(rs(replicas), pods, NOW)
    assert (plan.create, set(plan.delete)) == (create, set(delete))
    assert len(plan.delete) == len(delete)


def test_orphans_are_adopted_and_counted() -> None:
    plan = plan_replicaset(rs(2), [pod("mine"), pod("orphan", owned=False)], NOW)
    assert plan.adopt == ("orphan",) and plan.create == 0


def test_deleting_replicaset_creates_nothing() -> None:
    plan = plan_replicaset(rs(3, deleting=True), [], NOW)
    assert plan.create == 0 and plan.status["replicas"] == 0


def test_status_counts() -> None:
    pods = [
        pod("a", **RUNNING, ready=True, ready_at="00:59:58"),  # ready, not yet available (minReady 10)
        pod("b", **RUNNING, ready=True, ready_at="00:00:00"),  # available
        pod("c", labels={"app": "web"}),  # not fully labelled
        pod("d", deleting=True, ready=True),  # terminating: not counted at all
    ]
    plan = plan_replicaset(rs(3, min_ready=10), pods, NOW)
    assert plan.status == {"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 1,
                           "observedGeneration": 4}
    assert plan.requeue_after == pytest.approx(8.0)
