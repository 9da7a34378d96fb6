"""Job → Pods run to completion, as the Kubernetes 1.37 Job controller runs them.

- `parallelism` pods at once, never more than the completions still missing; without
  `completions` (a work queue) the Job is done once one pod succeeded and none still runs.
- `completionMode: Indexed`: one pod per completion index `0..completions-1`, named
  `<job>-<index>-<suffix>` with hostname `<job>-<index>`, the index in the annotation and label
  `batch.kubernetes.io/job-completion-index` and in `JOB_COMPLETION_INDEX`; status keeps
  `completedIndexes` ("0-2,4") and counts an index once however often it succeeded.
- `backoffLimit`: more failed pods than the limit (or, with `restartPolicy: OnFailure`, as many
  container restarts in running pods) fails the Job with `BackoffLimitExceeded`; a failed pod
  is replaced after a back-off that doubles from `BACKOFF_BASE_S` (the real controller starts at
  10 s; local clusters favour fast feedback).
- `activeDeadlineSeconds` from `status.startTime`: `DeadlineExceeded`.
- Terminal conditions as 1.37 sets them: `SuccessCriteriaMet` or `FailureTarget` first, the
  remaining pods are deleted, and `Complete` or `Failed` (same reason) once none is left running.
- `ttlSecondsAfterFinished`: that long after `Complete`/`Failed`, the Job is deleted in the
  foreground, so its pods go first (the TTL-after-finished controller's job).

Counts come from the Job's pods, never decreasing below what status already says: the real
controller tracks finished pods with a finalizer so deleted ones still count; here pods a Job
owns stay until the Job goes, so the floor only covers someone deleting finished pods by hand.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.local.errors import ApiError
from tether.local.workloads.common import (
    BURST_PER_PASS,
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
    terminating,
)
from tether.local.workloads.replicaset import deletion_order
from tether.local.workloads.runtime import PODS, Controller
from tether.objects import Obj
from tether.objects.times import parse_time, rfc3339

RESOURCE = "batch/jobs"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0


@dataclass(frozen=True)
class JobPlan:
    create: int = 0
    indexes: tuple[int, ...] = ()  # Indexed Jobs: the completion index of each pod to create
    delete: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    notes: tuple[Note, ...] = ()
    requeue_after: float | None = None
    delete_job: bool = False  # ttlSecondsAfterFinished has passed


def indexed(job: Obj) -> bool:
    spec = job.get("spec") or {}
    return spec.get("completionMode") == "Indexed" and isinstance(spec.get("completions"), int)


def job_pod(job: Obj, index: int | None = None) -> Obj:
    name = meta(job).get("name", "")
    uid = meta(job).get("uid", "")
    # The real API server puts these on the template when the Job is created; ours does not,
    # so the controller adds them, and `kubectl get pods -l job-name=...` works.
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name}
    if index is not None:
        labels[COMPLETION_INDEX] = str(index)
    pod = pod_from_template(job, (job.get("spec") or {}).get("template"), extra_labels=labels)
    if index is None:
        pod["metadata"]["generateName"] = f"{name}-"
        return pod
    pod["metadata"]["generateName"] = f"{name}-{index}-"
    pod["metadata"].setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
    spec = pod["spec"]
    spec["hostname"] = f"{name}-{index}"
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            env = container.setdefault("env", [])
            if not any(v.get("name") == COMPLETION_INDEX_ENV for v in env if isinstance(v, dict)):
                env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}})
    return pod


def pod_index(pod: Obj) -> int | None:
    m = meta(pod)
    raw = (m.get("annotations") or {}).get(COMPLETION_INDEX, (m.get("labels") or {}).get(COMPLETION_INDEX))
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def parse_indexes(text: Any) -> set[int]:
    """`completedIndexes` ("1,3-5") as a set; what does not parse is ignored."""
    found: set[int] = set()
    for part in str(text or "").split(","):
        low, _, high = part.strip().partition("-")
        try:
            start = int(low)
            end = int(high) if high else start
        except ValueError:
            continue
        found.update(range(start, end + 1))
    return found


def format_indexes(indexes: Iterable[int]) -> str:
    ranges: list[str] = []
    ordered = sorted(set(indexes))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


def finished_condition(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            return kind
    return None


def _is_true(job: Obj, kind: str) -> Obj | None:
    cond = condition(job, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def _conditions(old: list[Obj], stamp: str, *types_reason: tuple[str, tuple[str, str]]) -> list[Obj]:
    out = old
    for kind, (reason, message) in types_reason:
        out = set_condition(out, {"type": kind, "status": "True", "reason": reason, "message": message,
                                  "lastProbeTime": stamp}, stamp)
    return out


def _restarts(pods: Iterable[Obj]) -> int:
    total = 0
    for pod in pods:
        status = pod.get("status") or {}
        for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            if isinstance(entry, dict):
                total += int(entry.get("restartCount") or 0)
    return total


def past_backoff_limit(spec: Obj, failed: int, running: list[Obj]) -> bool:
    limit = int_field(spec, "backoffLimit", default=6)
    if failed > limit:
        return True
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    restarts = _restarts(running)  # each container restart of a running pod is a failure
    return restarts > 0 if limit == 0 else restarts >= limit


def _finished_at(pod: Obj) -> dt.datetime | None:
    status = pod.get("status") or {}
    times = [parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for s in status.get("containerStatuses") or [] if isinstance(s, dict)]
    found = [t for t in times if t is not None]
    if found:
        return max(found)
    ready_cond = condition(pod, "Ready")
    return parse_time((ready_cond or {}).get("lastTransitionTime")) or parse_time(status.get("startTime"))


def replacement_delay(failed_pods: list[Obj], now: dt.datetime) -> float:
    """Seconds until a failed pod may be replaced: the back-off since the latest failure."""
    if not failed_pods:
        return 0.0
    latest = max((t for t in (_finished_at(p) for p in failed_pods) if t is not None), default=None)
    if latest is None:
        return 0.0
    backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** (len(failed_pods) - 1))
    return max(0.0, (latest - now).total_seconds() + backoff)


def _ttl_plan(job: Obj, status: Obj, now: dt.datetime) -> JobPlan:
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        return JobPlan(status=status)
    kind = finished_condition(job) or ""
    done = parse_time((condition(job, kind) or {}).get("lastTransitionTime")) or now
    left = (done + dt.timedelta(seconds=ttl) - now).total_seconds()
    if left <= 0:
        return JobPlan(status=status, delete_job=True)
    return JobPlan(status=status, requeue_after=left)


def plan_job(job: Obj, pods: Iterable[Obj], now: dt.datetime) -> JobPlan:
    stamp = rfc3339(now)
    spec = job.get("spec") or {}
    old: Obj = job.get("status") or {}
    owned = [p for p in pods if controlled_by(p, job)]
    running = [p for p in owned if active(p)]
    gone = [p for p in owned if terminating(p) and phase(p) not in ("Succeeded", "Failed")]
    failed_pods = [p for p in owned if phase(p) == "Failed"]
    failed = max(int_field(old, "failed"), len(failed_pods))
    completions: Any = spec.get("completions")
    by_index = indexed(job)
    done_indexes: set[int] = set()
    if by_index:
        done_indexes = {i for i in parse_indexes(old.get("completedIndexes")) if i < completions}
        done_indexes |= {i for p in owned if phase(p) == "Succeeded"
                         and (i := pod_index(p)) is not None and 0 <= i < completions}
        succeeded = len(done_indexes)
    else:
        succeeded = max(int_field(old, "succeeded"), sum(1 for p in owned if phase(p) == "Succeeded"))
    status: Obj = {k: v for k, v in old.items() if k in ("startTime", "completionTime", "conditions")}
    status.update({"active": len(running), "succeeded": succeeded, "failed": failed,
                   "terminating": len(gone), "ready": sum(1 for p in running if ready(p)),
                   "uncountedTerminatedPods": {}})
    if by_index:
        status["completedIndexes"] = format_indexes(done_indexes)
    status = {k: v for k, v in status.items() if v or k in ("ready", "terminating", "uncountedTerminatedPods")}
    conditions: list[Obj] = list(old.get("conditions") or [])
    everyone = tuple(meta(p).get("name", "") for p in running)
    if finished_condition(job) is not None:
        # Finished: nothing runs on; the Job itself may be due to go (ttlSecondsAfterFinished).
        return _ttl_plan(job, status, now)
    if meta(job).get("deletionTimestamp"):
        return JobPlan(status=status)
    # A terminal state already decided: the rest of the pods go, then the final condition.
    for target, final in (("FailureTarget", "Failed"), ("SuccessCriteriaMet", "Complete")):
        decided = _is_true(job, target)
        if decided is None:
            continue
        reason = (str(decided.get("reason", "")), str(decided.get("message", "")))
        return _finish(status, conditions, stamp, final, reason, everyone, gone)
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
    if past_backoff_limit(spec, failed, running):
        failure = BACKOFF_EXCEEDED
    elif isinstance(deadline, int) and (now - start).total_seconds() >= deadline:
        failure = DEADLINE_EXCEEDED
    if failure is not None:
        conditions = _conditions(conditions, stamp, ("FailureTarget", failure))
        return _finish(status, conditions, stamp, "Failed", failure, everyone, gone)
    parallelism = int_field(spec, "parallelism", default=1)
    if by_index:
        return _plan_indexed(job, status, conditions, stamp, running, done_indexes, parallelism,
                             replacement_delay(failed_pods, now), deadline, start, now)
    if isinstance(completions, int):
        reached = succeeded >= completions
        want = max(min(parallelism, completions - succeeded), 0)
    else:  # a work queue: done when one pod succeeded and none still runs; no new pods after
        reached = succeeded > 0 and not running
        want = len(running) if succeeded else parallelism
    if reached:
        conditions = _conditions(conditions, stamp, ("SuccessCriteriaMet", COMPLETIONS_REACHED))
        return _finish(status, conditions, stamp, "Complete", COMPLETIONS_REACHED, everyone, gone)
    if conditions:
        status["conditions"] = conditions
    diff = len(running) - want
    victims = tuple(meta(p).get("name", "") for p in deletion_order(running)[: max(diff, 0)])
    create, wait = max(-diff, 0), _deadline_wait(deadline, start, now)
    delay = replacement_delay(failed_pods, now) if create else 0.0
    if delay > 0:
        create, wait = 0, delay if wait is None else min(wait, delay)
    return JobPlan(create=create, delete=victims, status=status, requeue_after=wait)


def _deadline_wait(deadline: Any, start: dt.datetime, now: dt.datetime) -> float | None:
    if not isinstance(deadline, int):
        return None
    return max(deadline - (now - start).total_seconds(), 0.0)


def _finish(status: Obj, conditions: list[Obj], stamp: str, final: str, reason: tuple[str, str],
            everyone: tuple[str, ...], gone: list[Obj]) -> JobPlan:
    """Delete what still runs; once nothing does, add the final condition (and say so)."""
    if everyone or gone:
        status["conditions"] = conditions
        return JobPlan(delete=everyone, status=status)
    status["conditions"] = _conditions(conditions, stamp, (final, reason))
    if final == "Complete":
        status["completionTime"] = stamp
        return JobPlan(status=status, notes=(Note("Completed", "Job completed"),))
    return JobPlan(status=status, notes=(Note(reason[0], reason[1], "Warning"),))


def _plan_indexed(job: Obj, status: Obj, conditions: list[Obj], stamp: str, running: list[Obj],
                  done: set[int], parallelism: int, delay: float, deadline: Any, start: dt.datetime,
                  now: dt.datetime) -> JobPlan:
    completions = int((job.get("spec") or {})["completions"])
    if len(done) >= completions:
        conditions = _conditions(conditions, stamp, ("SuccessCriteriaMet", COMPLETIONS_REACHED))
        return _finish(status, conditions, stamp, "Complete", COMPLETIONS_REACHED,
                       tuple(meta(p).get("name", "") for p in running), [])
    if conditions:
        status["conditions"] = conditions
    keep: dict[int, Obj] = {}
    extra: list[Obj] = []
    for pod in sorted(running, key=lambda p: str(meta(p).get("creationTimestamp", ""))):
        index = pod_index(pod)
        if index is None or not 0 <= index < completions or index in done or index in keep:
            extra.append(pod)  # a duplicate, or an index that needs no pod (any more)
        else:
            keep[index] = pod
    room = max(parallelism - len(keep), 0)
    # completions may be 10^9: look at no more indexes than this pass can create
    wanted = (i for i in range(completions) if i not in done and i not in keep)
    missing = list(itertools.islice(wanted, min(room, BURST_PER_PASS)))
    over = len(keep) - parallelism
    if over > 0:  # parallelism went down: the highest indexes wait
        extra += [keep[i] for i in sorted(keep)[-over:]]
    wait = _deadline_wait(deadline, start, now)
    if missing and delay > 0:
        missing, wait = [], delay if wait is None else min(wait, delay)
    return JobPlan(create=len(missing), indexes=tuple(missing), delete=tuple(meta(p).get("name", "") for p in extra),
                   status=status, requeue_after=wait)


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
        if plan.delete_job:
            self._expire(job)
            return
        for pod_name in self.bounded_deletes(key, plan.delete):
            pod = self.store.get(PODS, namespace, pod_name)
            if pod is not None and self.writer.delete(PODS, pod):
                self.writer.record(job, Note("SuccessfulDelete", f"Deleted pod: {pod_name}"))
            await asyncio.sleep(0)
        by_index = indexed(job)

        def missing() -> Sequence[int]:
            """Planned again before every batch: the completion indexes still to create, or (not
            Indexed) as many numbers as pods are missing."""
            current = self.store.get(RESOURCE, namespace, name)
            if current is None or meta(current).get("uid") != uid:
                return ()
            again = plan_job(current, self.children_in(namespace), dt.datetime.now(dt.UTC))
            if again.delete_job:
                return ()
            return again.indexes if by_index else range(again.create)

        def create_pod(index: int) -> bool:
            created = self.writer.create(PODS, job_pod(job, index) if by_index else job_pod(job))
            if created is None:
                return False
            self.writer.record(job, Note("SuccessfulCreate", f"Created pod: {meta(created)['name']}"))
            return True

        if plan.create:
            await self.create_in_batches(key, missing, create_pod)
        current = self.store.get(RESOURCE, namespace, name)
        if current is not None and meta(current).get("uid") == uid:
            before = finished_condition(current)
            self.writer.write_status(RESOURCE, current, plan.status)
            if before is None:
                for note in plan.notes:
                    self.writer.record(job, note)
        if plan.requeue_after is not None:
            self.engine.enqueue(key, delay_s=plan.requeue_after + 0.05)

    def _expire(self, job: Obj) -> None:
        """ttlSecondsAfterFinished: delete the Job, its pods first (foreground)."""
        m = meta(job)
        options = {"preconditions": {"uid": m.get("uid")}, "propagationPolicy": "Foreground"}
        try:
            self.ops.delete(self.writer.rt(RESOURCE), m.get("namespace", ""), m.get("name", ""), options,
                            self.writer.opts)
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
