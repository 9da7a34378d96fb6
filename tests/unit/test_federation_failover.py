"""Karmada failover as pure decisions: taint eviction, application failover, graceful eviction."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.failover import (
    EvictionTask,
    FailoverSettings,
    application_evictions,
    assess_tasks,
    dump_tasks,
    interpret_health,
    merge_tasks,
    parse_tasks,
    taint_evictions,
)
from tether.federation.model import ClusterInfo, Taint

T0 = 1_700_000_000.0
ON = FailoverSettings(enabled=True)
DRAIN = Taint("drain", "NoExecute", added_s=T0)
CLUSTERS = {"a": ClusterInfo("a", taints=(DRAIN,)), "b": ClusterInfo("b")}


def test_taint_eviction_needs_failover_on() -> None:
    assert taint_evictions({"a": 2, "b": 2}, CLUSTERS, {}, None, FailoverSettings(), T0).tasks == ()


@pytest.mark.parametrize(
    ("failover", "settings", "mode"),
    [
        (None, ON, "Gracefully"),
        (None, FailoverSettings(enabled=True, purge_mode="Directly"), "Directly"),
        ({"cluster": {}}, FailoverSettings(enabled=True, purge_mode="Directly"), "Gracefully"),
        ({"cluster": {"purgeMode": "Directly"}}, ON, "Directly"),
        ({"cluster": {"purgeMode": "Immediately"}}, ON, "Directly"),  # older Karmada spelling
    ],
)
def test_taint_eviction_purge_mode(failover: Any, settings: FailoverSettings, mode: str) -> None:
    result = taint_evictions({"a": 2, "b": 2}, CLUSTERS, {}, failover, settings, T0)
    [task] = result.tasks
    assert (task.from_cluster, task.purge_mode, task.replicas) == ("a", mode, 2)
    assert (task.reason, task.producer) == ("TaintUntolerated", "TaintManager")
    assert "drain:NoExecute" in task.message


def test_tolerated_taint_evicts_when_toleration_seconds_run_out() -> None:
    placement = {"clusterTolerations": [{"key": "drain", "operator": "Exists",
                                         "tolerationSeconds": 60}]}
    early = taint_evictions({"a": 1}, CLUSTERS, placement, None, ON, T0 + 10)
    assert (early.tasks, early.recheck_at) == ((), T0 + 60)
    assert len(taint_evictions({"a": 1}, CLUSTERS, placement, None, ON, T0 + 60).tasks) == 1
    forever = {"clusterTolerations": [{"key": "drain", "operator": "Exists"}]}
    assert taint_evictions({"a": 1}, CLUSTERS, forever, None, ON, T0 + 1e6) == \
        taint_evictions({}, {}, {}, None, ON, T0)


DEPLOY = {"kind": "Deployment", "spec": {"replicas": 3}}


@pytest.mark.parametrize(
    ("manifest", "member", "health"),
    [
        (DEPLOY, None, "Unknown"),
        (DEPLOY, {"generation": 2, "status": {"observedGeneration": 2, "updatedReplicas": 3,
                                               "availableReplicas": 3}}, "Healthy"),
        (DEPLOY, {"generation": 2, "status": {"observedGeneration": 1, "updatedReplicas": 3,
                                               "availableReplicas": 3}}, "Unhealthy"),
        (DEPLOY, {"generation": 2, "status": {"observedGeneration": 2, "updatedReplicas": 3,
                                               "availableReplicas": 1}}, "Unhealthy"),
        (DEPLOY, {"generation": 2, "status": {"observedGeneration": 2, "updatedReplicas": 2,
                                               "availableReplicas": 2}}, "Unhealthy"),
        ({"kind": "Service", "spec": {"type": "ClusterIP"}}, {"status": {}}, "Healthy"),
        ({"kind": "Service", "spec": {"type": "LoadBalancer"}}, {"status": {}}, "Unhealthy"),
        ({"kind": "Service", "spec": {"type": "LoadBalancer"}},
         {"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}, "Healthy"),
        ({"kind": "PersistentVolumeClaim"}, {"status": {"phase": "Bound"}}, "Healthy"),
        ({"kind": "Pod"}, {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}}, "Healthy"),
        ({"kind": "Pod"}, {"status": {"phase": "Running"}}, "Unhealthy"),
        ({"kind": "ConfigMap"}, {"status": {}}, "Unknown"),  # no interpreter
    ],
)
def test_interpret_health(manifest: dict[str, Any], member: dict[str, Any] | None,
                          health: str) -> None:
    assert interpret_health(manifest, member) == health


APP = {"decisionConditions": {"tolerationSeconds": 30}, "purgeMode": "Gracefully",
       "gracePeriodSeconds": 120}


def test_application_failover_waits_toleration_seconds() -> None:
    sick = {"a": "Unhealthy", "b": "Healthy"}
    first = application_evictions({"a": 2, "b": 2}, sick, {}, APP, T0)
    assert first.tasks == () and dict(first.unhealthy_since) == {"a": T0}
    assert first.recheck_at == T0 + 30
    later = application_evictions({"a": 2, "b": 2}, sick, first.unhealthy_since, APP, T0 + 30)
    [task] = later.tasks
    assert (task.from_cluster, task.reason, task.purge_mode, task.grace_period_s,
            task.replicas) == ("a", "ApplicationFailure", "Gracefully", 120, 2)
    # healthy again before the time is up: forgotten
    well = application_evictions({"a": 2}, {"a": "Healthy"}, first.unhealthy_since, APP, T0 + 29)
    assert well.tasks == () and dict(well.unhealthy_since) == {}
    # Never: the copy is kept until someone removes the task
    never = application_evictions({"a": 1}, {"a": "Unhealthy"}, {}, {
        "decisionConditions": {"tolerationSeconds": 0}, "purgeMode": "Never"}, T0)
    assert never.tasks[0].suppress_deletion is True
    # default toleration is 300 s
    default = application_evictions({"a": 1}, {"a": "Unhealthy"}, {"a": T0}, {}, T0 + 299)
    assert default.tasks == () and default.recheck_at == T0 + 300


def _task(cluster: str = "a", **extra: Any) -> EvictionTask:
    return EvictionTask(cluster, extra.pop("purge_mode", "Gracefully"), "TaintUntolerated",
                        "TaintManager", created_s=extra.pop("created_s", T0), **extra)


@pytest.mark.parametrize(
    ("task", "health", "now", "done"),
    [
        (_task(), {"b": "Healthy"}, T0 + 1, True),  # the replacement is healthy
        (_task(), {"b": "Healthy", "c": "Unknown"}, T0 + 1, False),  # every target must be
        (_task(), {}, T0 + 1, False),  # nothing scheduled yet
        (_task(), {"b": "Unhealthy"}, T0 + 601, True),  # the hub's timeout (600 s)
        (_task(grace_period_s=30), {"b": "Unhealthy"}, T0 + 31, True),
        (_task(grace_period_s=30), {"b": "Unhealthy"}, T0 + 29, False),
        (_task(suppress_deletion=True), {"b": "Healthy"}, T0 + 9999, False),  # Never
        (_task(suppress_deletion=False), {}, T0, True),
    ],
)
def test_graceful_eviction_assessment(task: EvictionTask, health: dict[str, str], now: float,
                                      done: bool) -> None:
    result = assess_tasks([task], health, FailoverSettings(), now)
    assert (result.done == ("a",)) is done
    assert (result.kept == (task,)) is (not done)


def test_new_task_gets_its_creation_time_and_recheck() -> None:
    fresh = _task(created_s=None)
    result = assess_tasks([fresh], {}, FailoverSettings(graceful_timeout_s=50), T0)
    assert result.kept[0].created_s == T0
    timed = assess_tasks([_task()], {}, FailoverSettings(graceful_timeout_s=50), T0 + 10)
    assert timed.recheck_at == T0 + 50


def test_tasks_round_trip_and_merge() -> None:
    tasks = (_task(replicas=2, message="m"), _task("b", purge_mode="Never", suppress_deletion=True))
    assert parse_tasks(dump_tasks(tasks)) == tasks
    assert parse_tasks("not json") == () and parse_tasks(None) == ()
    assert parse_tasks('[{"fromCluster": "x", "purgeMode": "Graciously"}, {"nope": 1}]') == (
        EvictionTask("x", "Gracefully", "", ""),)
    merged = merge_tasks(tasks, [_task("a", purge_mode="Directly"), _task("c")])
    assert [(t.from_cluster, t.purge_mode) for t in merged] == [
        ("a", "Gracefully"), ("b", "Never"), ("c", "Gracefully")]
