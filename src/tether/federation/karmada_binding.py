"""The Karmada binding step of a template's reconcile, between reading its Works and writing them.

What Karmada spreads over its detector, scheduler, taint manager, application failover and
graceful eviction controllers happens here for one template, from what the hub already has in
memory (no API calls): the claim (`binding.Binding.policy`), failover (`failover`), suspension,
`activationPreference: Lazy`, `dependentOverrides`, workload affinity groups, and the Work
annotations that remember the result. `KarmadaController` calls `prepare` before compiling,
`finish` after, and writes what they return.

- Suspension: `suspension.dispatching: true` leaves every Work of the template as it is (a
  template change is not dispatched; the `Propagated` condition says so, reason
  `SuspendDispatching`); `dispatchingOnClusters.clusterNames` does the same for those clusters
  only (their Work is neither written nor deleted, none is created there).
- Lazy activation: when the policy (or the policy claiming the template) changed since the Works
  were written and the template did not, the Works stay as they are until the template changes
  (Karmada's `activationPreference: Lazy`); the condition says a policy change is pending.
- dependentOverrides: the policy takes effect only once every OverridePolicy it names exists (in
  its namespace; ClusterOverridePolicies for a ClusterPropagationPolicy); until then nothing is
  written and the condition names what is missing (`DependentOverridesNotFound`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import works as W
from ._util import items, mapping, nested
from .binding import (
    EVICTION_ANNOTATION,
    POLICY_ANNOTATION,
    POLICY_HASH_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    Binding,
    annotate,
    policy_hash,
    policy_ref,
    template_hash,
)
from .failover import (
    HEALTHY,
    UNKNOWN,
    EvictionTask,
    FailoverSettings,
    application_evictions,
    assess_tasks,
    dump_tasks,
    interpret_health,
    merge_tasks,
    taint_evictions,
)
from .model import ClusterFailure, ClusterInfo, PropagationPlan, ResourceRef, WorkItem
from .policycheck import dispatching_suspended, lazy, suspended_clusters
from .scheduler import Groups, Previous
from .workinfo import WorkInfo, work_up_to_date

SUSPEND_DISPATCHING = "SuspendDispatching"
EVICTING = "Evicting"
POLICY_CHANGE_PENDING = "PolicyChangePending"
DEPENDENT_OVERRIDES_NOT_FOUND = "DependentOverridesNotFound"


@dataclass(frozen=True)
class Prepared:
    """What compiling needs, and what `finish` carries on with."""

    previous: Previous
    tasks: tuple[EvictionTask, ...]
    groups: Groups = field(default_factory=Groups)
    held: PropagationPlan | None = None  # set: write nothing, report this plan
    recheck_at: float | None = None


@dataclass(frozen=True)
class Finished:
    plan: PropagationPlan
    desired: list[W.DesiredWork]
    tasks_annotation: str | None  # the new template annotation value ("" removes it), None: same
    recheck_at: float | None = None


def work_health(work: WorkInfo | None, ref: ResourceRef) -> str:
    """The health of the template's copy as the Work last reported it."""
    if work is None or not work.applied_ok:
        return UNKNOWN
    entry = work.manifest_status(ref)
    manifest = work.manifest(ref)
    if entry is None or manifest is None:
        return UNKNOWN
    return interpret_health(manifest, {"status": entry.status, "generation": entry.generation})


def held_plan(plan: PropagationPlan, binding: Binding, notice_reason: str, message: str,
              *, error: bool = False) -> PropagationPlan:
    """`plan` turned into "keep every Work as it is", reporting what the Works hold now."""
    works = []
    for cluster, work in sorted(binding.works.items()):
        manifest = work.manifest(plan.source) or {}
        works.append(WorkItem(cluster, manifest, binding.scheduled.get(cluster)))
    notices = tuple(ClusterFailure(c, notice_reason, message) for c in sorted(binding.works))
    if error:
        return replace(plan, works=tuple(works), hold=True, notices=notices,
                       error_reason=notice_reason, error_message=message)
    return replace(plan, works=tuple(works), failures=(), hold=True, notices=notices,
                   error_reason="", error_message="")


@dataclass
class BindingStep:
    settings: FailoverSettings = field(default_factory=FailoverSettings)
    clock: Callable[[], float] = field(default=lambda: 0.0)
    # application failover: per template key, since when each cluster's copy is unhealthy
    unhealthy: dict[Any, dict[str, float]] = field(default_factory=dict)

    def forget(self, key: Any) -> None:
        self.unhealthy.pop(key, None)

    def prepare(self, key: Any, ref: ResourceRef, policy: Mapping[str, Any], binding: Binding,
                clusters: Sequence[ClusterInfo], all_clusters: Mapping[str, ClusterInfo],
                groups: Groups) -> Prepared:
        now = self.clock()
        spec = mapping(policy.get("spec"))
        scheduled = dict(binding.scheduled)
        evictions = taint_evictions(scheduled, all_clusters, spec.get("placement"),
                                    spec.get("failover"), self.settings, now)
        new = list(evictions.tasks)
        recheck = evictions.recheck_at
        application = nested(spec, "failover", "application")
        if application is not None:
            health = {c: work_health(binding.works.get(c), ref) for c in scheduled}
            check = application_evictions(scheduled, health, self.unhealthy.get(key, {}),
                                          application, now)
            self.unhealthy[key] = dict(check.unhealthy_since)
            new += [t for t in check.tasks if t.from_cluster not in {n.from_cluster for n in new}]
            recheck = _earliest(recheck, check.recheck_at)
        else:
            self.unhealthy.pop(key, None)
        tasks = merge_tasks(binding.tasks, new)
        evicting = frozenset(t.from_cluster for t in tasks)
        previous = replace(binding.previous, evicting=evicting,
                           clusters={c: r for c, r in scheduled.items() if c not in evicting})
        return Prepared(previous, tasks, groups, recheck_at=recheck)

    def finish(self, plan: PropagationPlan, prepared: Prepared, binding: Binding,
               template: Mapping[str, Any], policy: Mapping[str, Any],
               desired_of: Callable[[PropagationPlan], list[W.DesiredWork]],
               dependent_missing: Sequence[str] = ()) -> Finished:
        now = self.clock()
        spec = mapping(policy.get("spec"))
        t_hash, p_hash = template_hash(template), policy_hash(policy)
        notices: list[ClusterFailure] = []
        retained: set[str] = set()
        if dependent_missing:
            plan = held_plan(plan, binding, DEPENDENT_OVERRIDES_NOT_FOUND,
                             "waiting for " + ", ".join(dependent_missing)
                             + " (spec.dependentOverrides of " + policy_ref(policy) + ")",
                             error=True)
        elif plan.hold:
            pass  # an invalid policy: keep what runs, report why
        elif dispatching_suspended(spec):
            plan = held_plan(plan, binding, SUSPEND_DISPATCHING,
                             f"dispatching is suspended by {policy_ref(policy)} "
                             "(spec.suspension.dispatching)")
        elif (lazy(spec) and binding.works and binding.policy_hash
              and binding.policy_hash != p_hash and binding.template_hash == t_hash):
            plan = held_plan(plan, binding, POLICY_CHANGE_PENDING,
                             f"{policy_ref(policy)} changed; with activationPreference: Lazy it "
                             "applies at the template's next change")
        else:
            paused = suspended_clusters(spec)
            notices += [ClusterFailure(c, SUSPEND_DISPATCHING,
                                       f"dispatching to {c} is suspended by {policy_ref(policy)} "
                                       "(spec.suspension.dispatchingOnClusters)")
                        for c in sorted(paused)
                        if c in binding.works or any(w.cluster == c for w in plan.works)]
            retained |= paused
            plan = replace(plan, works=tuple(w for w in plan.works if w.cluster not in paused))
        desired: list[W.DesiredWork] = []
        if not plan.hold:
            annotations = {**plan.work_annotations, POLICY_ANNOTATION: policy_ref(policy)}
            if lazy(spec):  # only Lazy needs them; elsewhere a policy edit rewrites no Work
                annotations.update({POLICY_HASH_ANNOTATION: p_hash,
                                    TEMPLATE_HASH_ANNOTATION: t_hash})
            desired = annotate(desired_of(plan), annotations,
                               {w.cluster: w.replicas for w in plan.works})
        # graceful eviction: a task ends once every cluster scheduled now runs the current Work
        # and reports its copy Healthy (or when it times out)
        by_cluster = {d.cluster: d for d in desired}
        target_health: dict[str, str] = {}
        if prepared.tasks and not plan.error_reason and not plan.hold:
            for item in plan.works:
                work = binding.works.get(item.cluster)
                wanted = by_cluster.get(item.cluster)
                current = wanted is not None and work_up_to_date(work, wanted)
                target_health[item.cluster] = (work_health(work, plan.source) if current
                                               else UNKNOWN)
        assessment = assess_tasks(prepared.tasks, target_health, self.settings, now)
        kept = assessment.kept
        retained |= {t.from_cluster for t in kept if t.keeps_workload}
        notices += [ClusterFailure(t.from_cluster, EVICTING, _eviction_message(t, self.settings))
                    for t in kept]
        # the reason that holds the whole template first: the condition takes its reason from it
        plan = replace(plan, retained=frozenset(retained) | plan.retained,
                       notices=tuple(sorted([*plan.notices, *notices],
                                            key=lambda n: (n.reason == EVICTING, n.cluster,
                                                           n.reason))))
        before = nested(template, "metadata", "annotations", EVICTION_ANNOTATION)
        after = dump_tasks(kept) if kept else ""
        changed = after != (before or "")
        return Finished(plan, desired, after if changed else None,
                        _earliest(prepared.recheck_at, assessment.recheck_at))


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _eviction_message(task: EvictionTask, settings: FailoverSettings) -> str:
    if task.suppress_deletion:
        until = "until the task is removed (purgeMode Never)"
    elif not task.keeps_workload:
        until = "its copy is deleted (purgeMode Directly)"
    else:
        timeout = (task.grace_period_s if task.grace_period_s is not None
                   else int(settings.graceful_timeout_s))
        until = (f"its copy runs until the clusters now scheduled are healthy, at most {timeout}s "
                 "(purgeMode Gracefully)")
    return f"{task.reason}: {task.message}; {until}"


def workload_groups(template: Mapping[str, Any], policy: Mapping[str, Any],
                    peers: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None,
                                          frozenset[str]]]) -> Groups:
    """The workload (anti-)affinity peers of `template`: `peers` yields every other template
    with the policy that claims it (None: unclaimed) and the clusters it runs on."""
    spec = mapping(nested(policy, "spec", "placement", "workloadAffinity"))
    if not spec:
        return Groups()
    namespace = nested(template, "metadata", "namespace")
    labels = mapping(nested(template, "metadata", "labels"))
    wanted: dict[str, tuple[str, str]] = {}  # term → (label key, value)
    for term in ("affinity", "antiAffinity"):
        key = str(nested(spec, term, "groupByLabelKey") or "")
        if key and labels.get(key):
            wanted[term] = (key, str(labels[key]))
    affinity: list[frozenset[str]] = []
    anti: list[frozenset[str]] = []
    for peer, peer_policy, clusters in peers:
        if nested(peer, "metadata", "namespace") != namespace or peer_policy is None:
            continue
        peer_labels = mapping(nested(peer, "metadata", "labels"))
        peer_spec = mapping(nested(peer_policy, "spec", "placement", "workloadAffinity"))
        for term, (key, value) in wanted.items():
            if peer_labels.get(key) != value or nested(peer_spec, term,
                                                       "groupByLabelKey") != key:
                continue
            (affinity if term == "affinity" else anti).append(clusters)
    return Groups(tuple(c for c in affinity if c), tuple(anti))


def dependent_overrides_missing(policy: Mapping[str, Any],
                                overrides: Sequence[Mapping[str, Any]]) -> list[str]:
    """The OverridePolicies named by `spec.dependentOverrides` that do not exist."""
    names = [str(n) for n in items(nested(policy, "spec", "dependentOverrides"))]
    if not names:
        return []
    cluster_wide = policy.get("kind") == "ClusterPropagationPolicy"
    namespace = nested(policy, "metadata", "namespace")
    present = {
        str(nested(op, "metadata", "name")) for op in overrides
        if (op.get("kind") == "ClusterOverridePolicy") == cluster_wide
        and (cluster_wide or nested(op, "metadata", "namespace") == namespace)
    }
    if cluster_wide:
        return [f"ClusterOverridePolicy {n}" for n in names if n not in present]
    return [f"OverridePolicy {namespace}/{n}" for n in names if n not in present]


__all__ = ["HEALTHY", "BindingStep", "Finished", "Prepared"]
