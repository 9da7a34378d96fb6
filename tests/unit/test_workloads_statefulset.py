"""The StatefulSet plan: ordinals, OrderedReady versus Parallel, scale-down, rolling update."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.statefulset import (
    plan_statefulset,
    statefulset_claims,
    statefulset_pod,
    update_revision,
)

NOW = dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.UTC)
UID = "sts-uid"
TEMPLATE = {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "pg"}]}}


def sts(replicas: int, *, parallel: bool = False, template: dict[str, Any] | None = None,
        partition: int = 0, on_delete: bool = False) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": "OnDelete"} if on_delete else {
        "type": "RollingUpdate", "rollingUpdate": {"partition": partition}}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default", "uid": UID, "generation": 2},
        "spec": {"replicas": replicas, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
                 "template": template or TEMPLATE, "updateStrategy": strategy,
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]},
    }


REV = update_revision(sts(1))
V2 = {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "pg:2"}]}}


def pod(ordinal: int, state: str = "ready", revision: str = REV) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"db-{ordinal}", "namespace": "default",
        "labels": {"app": "db", "controller-revision-hash": revision},
        "ownerReferences": [{"uid": UID, "controller": True, "kind": "StatefulSet", "name": "db"}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if state in ("ready", "terminating"):
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    elif state == "running":
        status = {"phase": "Running"}
    elif state == "failed":
        status = {"phase": "Failed"}
    if state == "terminating":
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}, "status": status}


@pytest.mark.parametrize(
    ("spec", "pods", "create", "delete"),
    [
        # OrderedReady: one at a time, each waiting for the one before to be Running and Ready
        (sts(3), [], (0,), ()),
        (sts(3), [pod(0, "pending")], (), ()),
        (sts(3), [pod(0, "running")], (), ()),
        (sts(3), [pod(0)], (1,), ()),
        (sts(3), [pod(0), pod(1)], (2,), ()),
        (sts(3), [pod(0), pod(2)], (1,), ()),
        # a failed pod is replaced, in order
        (sts(3), [pod(0, "failed"), pod(1)], (), ("db-0",)),
        # Parallel: everything at once, no waiting
        (sts(3, parallel=True), [], (0, 1, 2), ()),
        (sts(3, parallel=True), [pod(0, "pending")], (1, 2), ()),
        # scale down: highest ordinal first, one at a time, after the rest is healthy
        (sts(1), [pod(0), pod(1), pod(2)], (), ("db-2",)),
        (sts(1), [pod(0), pod(1), pod(2, "terminating")], (), ()),
        (sts(1), [pod(0, "pending"), pod(1), pod(2)], (), ()),
        (sts(1, parallel=True), [pod(0), pod(1), pod(2)], (), ("db-2", "db-1")),
        # rolling update: highest ordinal on an old revision goes first, one at a time
        (sts(3, template=V2), [pod(0), pod(1), pod(2)], (), ("db-2",)),
        (sts(3, template=V2), [pod(0), pod(1), pod(2, "pending", update_revision(sts(1, template=V2)))], (), ()),
        (sts(3, template=V2), [pod(0), pod(1), pod(2, revision=update_revision(sts(1, template=V2)))], (),
         ("db-1",)),
        (sts(3, template=V2, partition=2), [pod(0), pod(1), pod(2, revision=update_revision(sts(1, template=V2)))],
         (), ()),
        (sts(3, template=V2, on_delete=True), [pod(0), pod(1), pod(2)], (), ()),
    ],
)
def test_plan(spec: dict[str, Any], pods: list[dict[str, Any]], create: tuple[int, ...],
              delete: tuple[str, ...]) -> None:
    plan = plan_statefulset(spec, pods, NOW)
    assert (plan.create, plan.delete) == (create, delete)


def test_pod_identity() -> None:
    p = statefulset_pod(sts(3), 1, REV)
    assert p["metadata"]["name"] == "db-1"
    assert p["metadata"]["labels"] == {"app": "db", "statefulset.kubernetes.io/pod-name": "db-1",
                                       "apps.kubernetes.io/pod-index": "1", "controller-revision-hash": REV}
    assert p["spec"]["hostname"] == "db-1" and p["spec"]["subdomain"] == "db"
    assert p["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-1"}}]
    assert p["metadata"]["ownerReferences"][0]["uid"] == UID
    assert [c["metadata"]["name"] for c in statefulset_claims(sts(3), 1)] == ["data-db-1"]


def test_status_moves_current_revision_when_the_update_is_done() -> None:
    v2 = update_revision(sts(1, template=V2))
    rolling = {**sts(2, template=V2), "status": {"currentRevision": REV}}
    mid = plan_statefulset(rolling, [pod(0), pod(1, revision=v2)], NOW).status
    assert (mid["currentRevision"], mid["updateRevision"], mid["currentReplicas"], mid["updatedReplicas"]) == (
        REV, v2, 1, 1)
    done = plan_statefulset(rolling, [pod(0, revision=v2), pod(1, revision=v2)], NOW).status
    assert done["currentRevision"] == v2 and done["readyReplicas"] == 2 and done["replicas"] == 2
    assert done["availableReplicas"] == 2 and done["observedGeneration"] == 2
