"""The Deployment plan: rollout arithmetic, one step at a time, and the status it reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.common import template_hash
from tether.local.workloads.deployment import (
    DESIRED,
    MAX_REPLICAS,
    REVISION,
    RsView,
    fenceposts,
    history_to_delete,
    plan_deployment,
    recreate_step,
    rolling_step,
)

NOW = dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.UTC)
UID = "d-uid"


def rsv(name: str, replicas: int, available: int = 0, *, current: int | None = None, created: str = "a",
        revision: int = 0) -> RsView:
    return RsView(name, replicas, replicas if current is None else current, available, available, revision, created)


@pytest.mark.parametrize(
    ("strategy", "replicas", "expected"),
    [
        ({}, 10, (3, 2)),  # 25%/25%: surge rounds up, unavailable down
        ({}, 1, (1, 0)),
        ({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, 4, (0, 1)),  # never both zero
        ({"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 1}}, 3, (2, 1)),
        ({"type": "Recreate"}, 5, (0, 0)),
    ],
)
def test_fenceposts(strategy: dict[str, Any], replicas: int, expected: tuple[int, int]) -> None:
    assert fenceposts({"spec": {"strategy": strategy}}, replicas) == expected


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "new", "olds", "expected"),
    [
        # new RS scales up within the surge
        (3, 1, 0, rsv("new", 0), [rsv("old", 3, 3)], {"new": 1}),
        # surge used up, new pod not available: nothing may go down
        (3, 1, 0, rsv("new", 1, 0), [rsv("old", 3, 3)], {}),
        # new pod available: one old pod may go
        (3, 1, 0, rsv("new", 1, 1), [rsv("old", 3, 3)], {"old": 2}),
        # then the new RS grows again
        (3, 1, 0, rsv("new", 1, 1), [rsv("old", 2, 2)], {"new": 2}),
        # maxUnavailable only: scale old down first
        (4, 0, 1, rsv("new", 0), [rsv("old", 4, 4)], {"old": 3}),
        (4, 0, 1, rsv("new", 0), [rsv("old", 3, 3)], {"new": 1}),
        # unhealthy old pods go first, without costing availability
        (4, 0, 1, rsv("new", 1, 1), [rsv("old", 3, 1)], {"old": 2}),
        # oldest old RS is drained first
        (4, 1, 1, rsv("new", 4, 4), [rsv("older", 1, 1, created="a"), rsv("old", 2, 2, created="b")],
         {"older": 0, "old": 0}),
        (4, 1, 0, rsv("new", 3, 3), [rsv("older", 1, 1, created="a"), rsv("old", 1, 1, created="b")],
         {"older": 0}),
        # new RS bigger than wanted (scaled down mid-rollout)
        (2, 1, 0, rsv("new", 5, 5), [], {"new": 2}),
        # done
        (3, 1, 0, rsv("new", 3, 3), [rsv("old", 0, 0)], {}),
        # 25%/25% of 5 (surge 2, unavailable 1): first step
        (5, 2, 1, rsv("new", 0), [rsv("old", 5, 5)], {"new": 2}),
        (5, 2, 1, rsv("new", 2, 0), [rsv("old", 5, 5)], {"old": 4}),
    ],
)
def test_rolling_step(replicas: int, surge: int, unavailable: int, new: RsView, olds: list[RsView],
                      expected: dict[str, int]) -> None:
    assert rolling_step(replicas, surge, unavailable, new, olds) == expected


@pytest.mark.parametrize(
    ("new", "olds", "expected"),
    [
        (None, [rsv("old", 3, 3)], ({"old": 0}, False)),
        (None, [rsv("old", 0, current=2)], ({}, False)),  # old pods still running: wait
        (None, [rsv("old", 0, current=0)], ({}, True)),
        (rsv("new", 0), [rsv("old", 0, current=0)], ({"new": 3}, True)),
    ],
)
def test_recreate_step(new: RsView | None, olds: list[RsView], expected: tuple[dict[str, int], bool]) -> None:
    assert recreate_step(3, new, olds) == expected


def test_history_keeps_the_newest_revisions_and_busy_ones() -> None:
    olds = [rsv("r1", 0, revision=1), rsv("r2", 1, revision=2), rsv("r3", 0, revision=3), rsv("r4", 0, revision=4)]
    assert history_to_delete(olds, 2) == ("r1",)  # r2 is over the limit but still has pods
    assert history_to_delete(olds, 10) == ()
    assert history_to_delete(olds, 0) == ("r1", "r3", "r4")


# whole plans ---------------------------------------------------------------------------------

TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


def deployment(replicas: int = 3, template: dict[str, Any] | None = None, *, status: dict[str, Any] | None = None,
               generation: int = 1, paused: bool = False, strategy: dict[str, Any] | None = None,
               revision: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "default", "uid": UID, "generation": generation}
    if revision:
        meta["annotations"] = {REVISION: revision}
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                            "template": template or TEMPLATE, "strategy": strategy or {"type": "RollingUpdate"},
                            "revisionHistoryLimit": 10}
    if paused:
        spec["paused"] = True
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec, "status": status or {}}


def replicaset(template: dict[str, Any], replicas: int, available: int, revision: int,
               created: str) -> dict[str, Any]:
    pod_hash = template_hash(template)
    labels = {**template["metadata"]["labels"], "pod-template-hash": pod_hash}
    return {
        "metadata": {"name": f"web-{pod_hash}", "namespace": "default", "uid": f"rs-{revision}",
                     "creationTimestamp": created, "labels": labels, "annotations": {REVISION: str(revision)},
                     "ownerReferences": [{"uid": UID, "controller": True, "kind": "Deployment", "name": "web"}]},
        "spec": {"replicas": replicas, "minReadySeconds": 0,
                 "selector": {"matchLabels": {"app": "web", "pod-template-hash": pod_hash}},
                 "template": {**template, "metadata": {"labels": labels}}},
        "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available},
    }


V2 = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_first_reconcile_creates_the_replicaset_with_all_replicas() -> None:
    plan = plan_deployment(deployment(3), [], NOW)
    assert plan.create is not None
    pod_hash = template_hash(TEMPLATE)
    assert plan.create["metadata"]["name"] == f"web-{pod_hash}"
    assert plan.create["spec"]["replicas"] == 3
    assert plan.create["spec"]["template"]["metadata"]["labels"] == {"app": "web", "pod-template-hash": pod_hash}
    assert plan.create["spec"]["selector"]["matchLabels"]["pod-template-hash"] == pod_hash
    assert plan.create["metadata"]["annotations"][REVISION] == "1"
    assert plan.create["metadata"]["ownerReferences"][0]["uid"] == UID
    assert plan.revision == "1"
    assert condition(plan.status, "Progressing")["reason"] == "NewReplicaSetCreated"
    assert condition(plan.status, "Available")["reason"] == "MinimumReplicasUnavailable"
    assert [n.message for n in plan.notes] == [f"Scaled up replica set web-{pod_hash} to 3 from 0"]


def test_new_template_creates_second_replicaset_within_surge() -> None:
    old = replicaset(TEMPLATE, 4, 4, 1, "t1")
    plan = plan_deployment(deployment(4, V2, revision="1"), [old], NOW)
    assert plan.create is not None
    assert plan.create["spec"]["replicas"] == 1  # 25% surge of 4
    assert plan.create["metadata"]["annotations"][REVISION] == "2"
    assert plan.status.get("updatedReplicas", 0) == 0


def test_rollout_completes_and_reports_it() -> None:
    old = replicaset(TEMPLATE, 0, 0, 1, "t1")
    old["status"] = {"replicas": 0}
    new = replicaset(V2, 3, 3, 2, "t2")
    new["metadata"]["annotations"].update({DESIRED: "3", MAX_REPLICAS: "4"})
    plan = plan_deployment(deployment(3, V2, revision="2"), [old, new], NOW)
    assert plan.create is None and plan.changes == () and plan.delete == ()
    assert plan.status["replicas"] == plan.status["updatedReplicas"] == plan.status["availableReplicas"] == 3
    assert plan.status["observedGeneration"] == 1
    assert condition(plan.status, "Progressing")["reason"] == "NewReplicaSetAvailable"
    assert condition(plan.status, "Available")["reason"] == "MinimumReplicasAvailable"


def test_undo_makes_the_old_replicaset_the_newest_revision() -> None:
    first = replicaset(TEMPLATE, 0, 0, 1, "t1")
    first["status"] = {"replicas": 0}
    second = replicaset(V2, 3, 3, 2, "t2")
    plan = plan_deployment(deployment(3, TEMPLATE, revision="2", generation=3), [first, second], NOW)
    assert plan.create is None
    change = next(c for c in plan.changes if c.name == first["metadata"]["name"])
    assert dict(change.annotations)[REVISION] == "3"
    assert change.replicas == 1  # and it starts scaling up
    assert plan.revision == "3"


def test_paused_deployment_does_not_roll() -> None:
    old = replicaset(TEMPLATE, 3, 3, 1, "t1")
    plan = plan_deployment(deployment(3, V2, paused=True, revision="1"), [old], NOW)
    assert plan.create is None and plan.changes == ()


def test_paused_deployment_still_scales() -> None:
    rs = replicaset(TEMPLATE, 3, 3, 1, "t1")
    plan = plan_deployment(deployment(5, TEMPLATE, paused=True, revision="1"), [rs], NOW)
    assert [(c.name, c.replicas) for c in plan.changes] == [(rs["metadata"]["name"], 5)]
    assert condition(plan.status, "Progressing")["reason"] == "DeploymentPaused"


def test_name_collision_bumps_collision_count() -> None:
    squatter = replicaset(TEMPLATE, 1, 1, 1, "t0")
    squatter["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True, "kind": "Deployment"}]
    plan = plan_deployment(deployment(3), [squatter], NOW)
    assert plan.create is None and plan.status["collisionCount"] == 1
    again = plan_deployment(deployment(3, status={"collisionCount": 1}), [squatter], NOW)
    assert again.create is not None
    assert again.create["metadata"]["name"] == f"web-{template_hash(TEMPLATE, 1)}"


def test_recreate_scales_old_to_zero_before_creating() -> None:
    old = replicaset(TEMPLATE, 3, 3, 1, "t1")
    plan = plan_deployment(deployment(3, V2, strategy={"type": "Recreate"}, revision="1"), [old], NOW)
    assert plan.create is None and [(c.name, c.replicas) for c in plan.changes] == [(old["metadata"]["name"], 0)]
    old["spec"]["replicas"] = 0
    old["status"] = {"replicas": 0}
    plan = plan_deployment(deployment(3, V2, strategy={"type": "Recreate"}, revision="1"), [old], NOW)
    assert plan.create is not None and plan.create["spec"]["replicas"] == 3


def test_scale_down_of_a_settled_deployment() -> None:
    rs = replicaset(TEMPLATE, 5, 5, 1, "t1")
    plan = plan_deployment(deployment(2, revision="1", generation=2), [rs], NOW)
    assert [(c.name, c.replicas) for c in plan.changes] == [(rs["metadata"]["name"], 2)]
    assert [n.message for n in plan.notes] == [f"Scaled down replica set {rs['metadata']['name']} to 2 from 5"]


def test_history_limit_deletes_oldest_empty_replicasets() -> None:
    templates = [{"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": f"i:{i}"}]}}
                 for i in range(4)]
    rses = [replicaset(t, 0, 0, i + 1, f"t{i}") for i, t in enumerate(templates[:3])]
    for rs in rses:
        rs["status"] = {"replicas": 0}
    current = replicaset(templates[3], 2, 2, 4, "t3")
    d = deployment(2, templates[3], revision="4")
    d["spec"]["revisionHistoryLimit"] = 1
    plan = plan_deployment(d, [*rses, current], NOW)
    assert set(plan.delete) == {rses[0]["metadata"]["name"], rses[1]["metadata"]["name"]}
