"""Job → Pods run to completion: `completions` successes, `parallelism` at a time, and
`backoffLimit` failures before giving up.

Counts come from the Job's pods, never decreasing below what status already says: the real
controller tracks finished pods with a finalizer so deleted ones still count; here pods a Job
owns stay until the Job goes, so the floor only covers someone deleting finished pods by hand.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether.local.workloads.common import (
    Note,
    NsName,
    active,
    condition,
    controlled_by,
    int_field,
    meta,
    phase,
    pod_from_template,
    ready,
    set_condition,
)
from tether.local.workloads.replicaset import deletion_order
from tether.local.workloads.runtime import PODS, Controller
from tether.objects import Obj
from tether.objects.times import parse_time, rfc3339

RESOURCE = "batch/jobs"
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")


@dataclass(frozen=True)
class JobPlan:
    create: int = 0
    delete: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    notes: tuple[Note, ...] = ()
    requeue_after: float | None = None


def job_pod(job: Obj) -> Obj:
    name = meta(job).get("name", "")
    uid = meta(job).get("uid", "")
    # The real API server puts these on the template when the Job is created; ours does not,
    # so the controller adds them, and `kubectl get pods -l job-name=...` works.
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name}
    pod = pod_from_template(job, (job.get("spec") or {}).get("template"), extra_labels=labels)
    pod["metadata"]["generateName"] = f"{name}-"
    return pod


def finished_condition(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            return kind
    return None


def _conditions(old: list[Obj], stamp: str, *types_reason: tuple[str, tuple[str, str]]) -> list[Obj]:
    out = old
    for kind, (reason, message) in types_reason:
        out = set_condition(out, {"type": kind, "status": "True", "reason": reason, "message": message,
                                  "lastProbeTime": stamp}, stamp)
    return out


def plan_job(job: Obj, pods: Iterable[Obj], now: dt.datetime) -> JobPlan:
    stamp = rfc3339(now)
    spec = job.get("spec") or {}
    old: Obj = job.get("status") or {}
    owned = [p for p in pods if controlled_by(p, job)]
    running = [p for p in owned if active(p)]
    succeeded = max(int_field(old, "succeeded"), sum(1 for p in owned if phase(p) == "Succeeded"))
    failed = max(int_field(old, "failed"), sum(1 for p in owned if phase(p) == "Failed"))
    status: Obj = {k: v for k, v in old.items() if k in ("startTime", "completionTime", "conditions")}
    status.update({"active": len(running), "succeeded": succeeded, "failed": failed,
                   "ready": sum(1 for p in running if ready(p)), "uncountedTerminatedPods": {}})
    status = {k: v for k, v in status.items() if v or k in ("ready", "uncountedTerminatedPods")}
    conditions: list[Obj] = list(old.get("conditions") or [])
    everyone = tuple(meta(p).get("name", "") for p in running)
    done = finished_condition(job)
    if done is not None or meta(job).get("deletionTimestamp"):
        # Finished: nothing runs on. (A failed Job's pods were already told to go.)
        return JobPlan(delete=everyone if done == "Failed" else (), status=status)
    if spec.get("suspend"):
        status["conditions"] = set_condition(conditions, {"type": "Suspended", "status": "True",
                                                          "reason": "JobSuspended", "message": "Job suspended"}, stamp)
        return JobPlan(delete=everyone, status=status)
    if condition(job, "Suspended") is not None:
        conditions = set_condition(conditions, {"type": "Suspended", "status": "False", "reason": "JobResumed",
                                                "message": "Job resumed"}, stamp)
    start = parse_time(status.get("startTime")) or now
    status["startTime"] = rfc3339(start)
    deadline = spec.get("activeDeadlineSeconds")
    failure: tuple[str, str] | None = None
    if failed > int_field(spec, "backoffLimit", default=6):
        failure = BACKOFF_EXCEEDED
    elif isinstance(deadline, int) and (now - start).total_seconds() >= deadline:
        failure = DEADLINE_EXCEEDED
    if failure is not None:
        status["conditions"] = _conditions(conditions, stamp, ("FailureTarget", failure), ("Failed", failure))
        return JobPlan(delete=everyone, status=status, notes=(Note(failure[0], failure[1], "Warning"),))
    completions: Any = spec.get("completions")
    parallelism = int_field(spec, "parallelism", default=1)
    if isinstance(completions, int):
        complete = succeeded >= completions
        want = max(min(parallelism, completions - succeeded), 0)
    else:  # a work queue: done when one pod succeeded and none still runs; no new pods after
        complete = succeeded > 0 and not running
        want = len(running) if succeeded else parallelism
    if complete:
        status["conditions"] = _conditions(conditions, stamp, ("SuccessCriteriaMet", COMPLETIONS_REACHED),
                                           ("Complete", COMPLETIONS_REACHED))
        status["completionTime"] = stamp
        return JobPlan(delete=everyone, status=status, notes=(Note("Completed", "Job completed"),))
    if conditions:
        status["conditions"] = conditions
    diff = len(running) - want
    victims = tuple(meta(p).get("name", "") for p in deletion_order(running)[: max(diff, 0)])
    wait = None
    if isinstance(deadline, int):
        wait = max(deadline - (now - start).total_seconds(), 0.0)
    return JobPlan(create=max(-diff, 0), delete=victims, status=status, requeue_after=wait)


class JobController(Controller):
    manager = "job-controller"
    resource = RESOURCE
    kind = "Job"

    async def reconcile(self, key: NsName) -> None:
        namespace, name = key
        job = self.store.get(RESOURCE, namespace, name)
        if job is None:
            return
        plan = plan_job(job, self.children_in(namespace), dt.datetime.now(dt.UTC))
        uid = meta(job).get("uid", "")
        for pod_name in plan.delete:
            pod = self.store.get(PODS, namespace, pod_name)
            if pod is not None and self.writer.delete(PODS, pod):
                self.writer.record(job, Note("SuccessfulDelete", f"Deleted pod: {pod_name}"))
        body = job_pod(job)
        for _ in range(plan.create):
            created = self.writer.create(PODS, body)
            if created is not None:
                self.writer.record(job, Note("SuccessfulCreate", f"Created pod: {meta(created)['name']}"))
        current = self.store.get(RESOURCE, namespace, name)
        if current is not None and meta(current).get("uid") == uid:
            before = finished_condition(current)
            self.writer.write_status(RESOURCE, current, plan.status)
            if before is None:
                for note in plan.notes:
                    self.writer.record(job, note)
        if plan.requeue_after is not None:
            self.engine.enqueue(key, delay_s=plan.requeue_after + 0.05)
