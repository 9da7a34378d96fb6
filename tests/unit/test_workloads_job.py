"""The Job plan: parallelism, completions, backoff, deadlines, suspension."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.objects import apply_defaults
from tether.local.workloads.job import (
    BACKOFF_BASE_S,
    COMPLETION_INDEX,
    format_indexes,
    job_pod,
    parse_indexes,
    plan_job,
)

NOW = dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.UTC)
UID = "job-uid"


def job(completions: int | None = 1, parallelism: int = 1, backoff: int = 6, *,
        status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": backoff,
                                 "template": {"spec": {"restartPolicy": "Never", "containers": []}}, **spec}
    if completions is not None:
        body_spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default", "uid": UID, "generation": 1},
            "spec": body_spec, "status": status or {}}


def pods(*phases: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"pi-{i}", "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
                          "ownerReferences": [{"uid": UID, "controller": True, "kind": "Job"}]},
             "status": {"phase": p}} for i, p in enumerate(phases)]


def types(status: dict[str, Any]) -> list[str]:
    return [c["type"] for c in status.get("conditions", []) if c["status"] == "True"]


@pytest.mark.parametrize(
    ("spec", "phases", "create", "deletes", "conditions"),
    [
        (job(1), [], 1, 0, []),
        (job(5, 2), [], 2, 0, []),
        (job(5, 2), ["Running"], 1, 0, []),
        (job(5, 2), ["Succeeded", "Succeeded", "Succeeded", "Running"], 1, 0, []),
        # fewer left to do than parallelism allows
        (job(5, 3), ["Succeeded"] * 4 + ["Running"], 0, 0, []),
        (job(3, 3), ["Succeeded", "Succeeded", "Running", "Running"], 0, 1, []),
        (job(2, 2), ["Succeeded", "Succeeded"], 0, 0, ["SuccessCriteriaMet", "Complete"]),
        # failures are replaced until backoffLimit is passed
        (job(1, backoff=2), ["Failed", "Failed"], 1, 0, []),
        # past the limit: FailureTarget while pods are deleted, Failed once none runs
        (job(1, backoff=2), ["Failed", "Failed", "Failed", "Running"], 0, 1, ["FailureTarget"]),
        (job(1, backoff=2), ["Failed", "Failed", "Failed"], 0, 0, ["FailureTarget", "Failed"]),
        # work queue (no completions): done when one succeeded and none runs
        (job(None, 3), [], 3, 0, []),
        (job(None, 3), ["Succeeded", "Running"], 0, 0, []),
        (job(None, 3), ["Succeeded", "Succeeded"], 0, 0, ["SuccessCriteriaMet", "Complete"]),
        # suspended: nothing runs
        (job(3, 2, suspend=True), ["Running", "Running"], 0, 2, ["Suspended"]),
    ],
)
def test_plan(spec: dict[str, Any], phases: list[str], create: int, deletes: int, conditions: list[str]) -> None:
    plan = plan_job(spec, pods(*phases), NOW)
    assert (plan.create, len(plan.delete), types(plan.status)) == (create, deletes, conditions)


def test_status_counts_and_times() -> None:
    ps = pods("Succeeded", "Failed", "Running", "Running")
    ps[2]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    status = plan_job(job(3, 2), ps, NOW).status
    assert (status["active"], status["succeeded"], status["failed"], status["ready"]) == (2, 1, 1, 1)
    assert status["startTime"] == "2026-01-01T01:00:00Z" and "completionTime" not in status
    done = plan_job(job(1, status={"startTime": "2026-01-01T00:00:00Z"}), pods("Succeeded"), NOW)
    assert done.status["startTime"] == "2026-01-01T00:00:00Z"
    assert done.status["completionTime"] == "2026-01-01T01:00:00Z"
    assert [n.reason for n in done.notes] == ["Completed"]


def test_counts_never_go_down_when_pods_are_removed() -> None:
    status = plan_job(job(3, status={"succeeded": 2}), pods(), NOW).status
    assert status["succeeded"] == 2


def test_active_deadline_fails_the_job() -> None:
    spec = job(3, activeDeadlineSeconds=60, status={"startTime": "2026-01-01T00:58:00Z"})
    plan = plan_job(spec, pods("Running"), NOW)
    assert types(plan.status) == ["FailureTarget"] and plan.delete == ("pi-0",)
    assert plan.status["conditions"][-1]["reason"] == "DeadlineExceeded"
    # the next look, with the pod gone: Failed, with the same reason, and an event
    spec["status"] = plan.status
    final = plan_job(spec, [], NOW)
    assert types(final.status) == ["FailureTarget", "Failed"]
    assert final.status["conditions"][-1]["reason"] == "DeadlineExceeded"
    assert [(n.reason, n.event_type) for n in final.notes] == [("DeadlineExceeded", "Warning")]


def test_finished_job_does_nothing_more() -> None:
    spec = job(1, status={"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1})
    plan = plan_job(spec, pods("Succeeded"), NOW)
    assert plan.create == 0 and plan.delete == () and plan.notes == ()


def test_job_pod_labels() -> None:
    labels = job_pod(job(1))["metadata"]["labels"]
    assert labels["job-name"] == "pi" and labels["batch.kubernetes.io/controller-uid"] == UID


def indexed_pods(*entries: tuple[int, str]) -> list[dict[str, Any]]:
    found = pods(*(p for _, p in entries))
    for pod, (index, _) in zip(found, entries, strict=True):
        pod["metadata"]["annotations"] = {COMPLETION_INDEX: str(index)}
    return found


@pytest.mark.parametrize(
    ("entries", "old_done", "create", "deletes", "done"),
    [
        ([], "", (0, 1), 0, ""),
        ([(0, "Running")], "", (1,), 0, ""),
        ([(0, "Succeeded"), (1, "Running")], "", (2,), 0, "0"),
        # a failed index is run again; one that succeeded before is not
        ([(0, "Failed"), (1, "Running")], "2", (0,), 0, "2"),
        # two pods for one index: the newer goes
        ([(1, "Running"), (1, "Running")], "0", (2,), 1, "0"),
        ([(3, "Succeeded"), (0, "Succeeded")], "1-2", (), 0, "0-3"),
    ],
)
def test_indexed_plan(entries: list[tuple[int, str]], old_done: str, create: tuple[int, ...], deletes: int,
                      done: str) -> None:
    spec = job(4, 2, completionMode="Indexed", status={"completedIndexes": old_done} if old_done else None)
    plan = plan_job(spec, indexed_pods(*entries), NOW)
    assert (plan.indexes, len(plan.delete), plan.status.get("completedIndexes", "")) == (create, deletes, done)
    assert plan.status.get("succeeded", 0) == len(parse_indexes(done))


def test_indexed_job_completes_when_every_index_succeeded() -> None:
    spec = job(3, 3, completionMode="Indexed")
    plan = plan_job(spec, indexed_pods((0, "Succeeded"), (1, "Succeeded"), (2, "Succeeded"), (2, "Succeeded")), NOW)
    assert types(plan.status) == ["SuccessCriteriaMet", "Complete"] and plan.status["succeeded"] == 3
    assert plan.status["completedIndexes"] == "0-2"


def test_indexed_pod_carries_its_index() -> None:
    spec = job(3, completionMode="Indexed")
    spec["spec"]["template"]["spec"]["containers"] = [{"name": "c", "image": "busybox"}]
    pod = job_pod(spec, 2)
    assert pod["metadata"]["generateName"] == "pi-2-" and pod["spec"]["hostname"] == "pi-2"
    assert pod["metadata"]["annotations"][COMPLETION_INDEX] == "2" and pod["metadata"]["labels"][COMPLETION_INDEX] == "2"
    env = pod["spec"]["containers"][0]["env"]
    assert env == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}]
    assert "hostname" not in spec["spec"]["template"]["spec"]  # the template is not changed


@pytest.mark.parametrize(("text", "indexes"), [("", set()), ("0", {0}), ("1,3-5,7", {1, 3, 4, 5, 7}), ("x,2", {2})])
def test_completed_indexes_round_trip(text: str, indexes: set[int]) -> None:
    assert parse_indexes(text) == indexes
    if "x" not in text:
        assert format_indexes(indexes) == text


def test_on_failure_restarts_count_against_the_backoff_limit() -> None:
    spec = job(1, backoff=2)
    spec["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    running = pods("Running")
    running[0]["status"]["containerStatuses"] = [{"name": "c", "restartCount": 2}]
    assert types(plan_job(spec, running, NOW).status) == ["FailureTarget"]
    running[0]["status"]["containerStatuses"][0]["restartCount"] = 1
    assert types(plan_job(spec, running, NOW).status) == []


def test_failed_pods_are_replaced_after_a_back_off() -> None:
    failed = pods("Failed", "Failed")
    for pod in failed:
        pod["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {
            "exitCode": 1, "finishedAt": "2026-01-01T01:00:00Z"}}}]
    plan = plan_job(job(1, backoff=6), failed, NOW)
    assert plan.create == 0 and plan.requeue_after == BACKOFF_BASE_S * 2
    later = plan_job(job(1, backoff=6), failed, NOW + dt.timedelta(seconds=BACKOFF_BASE_S * 2))
    assert later.create == 1


def test_ttl_after_finished_deletes_the_job() -> None:
    finished = {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:59:50Z"}],
                "succeeded": 1}
    waiting = plan_job(job(1, ttlSecondsAfterFinished=30, status=finished), pods("Succeeded"), NOW)
    assert not waiting.delete_job and waiting.requeue_after == 20
    due = plan_job(job(1, ttlSecondsAfterFinished=5, status=finished), pods("Succeeded"), NOW)
    assert due.delete_job
    assert not plan_job(job(1, status=finished), pods("Succeeded"), NOW).delete_job


def test_success_waits_for_extra_pods_to_go() -> None:
    plan = plan_job(job(2, 3), pods("Succeeded", "Succeeded", "Running"), NOW)
    assert types(plan.status) == ["SuccessCriteriaMet"] and plan.delete == ("pi-2",)
    spec = job(2, 3, status=plan.status)
    done = plan_job(spec, pods("Succeeded", "Succeeded"), NOW)
    assert types(done.status) == ["SuccessCriteriaMet", "Complete"] and "completionTime" in done.status


@pytest.mark.parametrize(
    ("given", "completions", "parallelism"),
    [({}, 1, 1), ({"parallelism": 2}, None, 2), ({"completions": 3}, 3, 1), ({"completions": 4, "parallelism": 2}, 4, 2)],
)
def test_job_defaults_leave_a_work_queue_without_completions(given: dict[str, Any], completions: int | None,
                                                             parallelism: int) -> None:
    body: dict[str, Any] = {"metadata": {"name": "j"}, "spec": {"template": {"metadata": {"labels": {"app": "a"}}},
                                                                **given}}
    apply_defaults("batch", "Job", body)
    spec = body["spec"]
    assert (spec.get("completions"), spec["parallelism"], spec["backoffLimit"]) == (completions, parallelism, 6)
    assert spec["completionMode"] == "NonIndexed" and spec["suspend"] is False
    assert body["metadata"]["labels"] == {"app": "a"}
