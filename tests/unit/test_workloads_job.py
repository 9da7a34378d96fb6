"""The Job plan: parallelism, completions, backoff, deadlines, suspension."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.job import job_pod, plan_job

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
        (job(1, backoff=2), ["Failed", "Failed", "Failed", "Running"], 0, 1, ["FailureTarget", "Failed"]),
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
    assert types(plan.status) == ["FailureTarget", "Failed"] and plan.delete == ("pi-0",)
    assert plan.status["conditions"][-1]["reason"] == "DeadlineExceeded"


def test_finished_job_does_nothing_more() -> None:
    spec = job(1, status={"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1})
    plan = plan_job(spec, pods("Succeeded"), NOW)
    assert plan.create == 0 and plan.delete == () and plan.notes == ()


def test_job_pod_labels() -> None:
    labels = job_pod(job(1))["metadata"]["labels"]
    assert labels["job-name"] == "pi" and labels["batch.kubernetes.io/controller-uid"] == UID
