"""The Karmada dialect: resource templates + (Cluster)PropagationPolicy + (Cluster)OverridePolicy.

Policy matching (Karmada's detector): a PropagationPolicy only claims resources in its own
namespace, a ClusterPropagationPolicy any resource (and only it can claim cluster-scoped ones).
Every matching PropagationPolicy is considered before any ClusterPropagationPolicy. Among
candidates: higher `spec.priority` (default 0) wins, then the more explicit selector match
(name > labelSelector > apiVersion+kind only), then the alphabetically first name. A selector
must match apiVersion and kind (and namespace if set); a `name` makes its labelSelector ignored.

Override order (Karmada's override manager): ClusterOverridePolicies first, then — for namespaced
resources — OverridePolicies of the resource's namespace. Within each group policies are applied
from the least to the most explicit selector match (match-all, including policies without
selectors, then labelSelector, then name) and by name within a tier, so the most specific policy
is applied last and wins. In a policy, `overrideRules` apply in order (the deprecated top-level
`targetCluster` + `overriders` pair when there are no rules); a rule without `targetCluster`
applies to every cluster.

Claims and preemption (Karmada's `preemption`, default Never): once a policy has placed a
template (its Works name it, see `binding`), the template stays with that policy while it exists
and still selects the template, even if a better match appears. A PropagationPolicy with
`preemption: Always` takes a template from a ClusterPropagationPolicy whatever the priorities,
and from a PropagationPolicy of lower `priority`; a ClusterPropagationPolicy with Always takes it
only from a ClusterPropagationPolicy of lower priority.

Scheduling (which clusters, how many replicas each) is `scheduler.schedule`; a policy Karmada's
webhook would refuse, or that uses a field tether does not implement, is not applied
(`policycheck`).

Compilation per target cluster: template without status and server metadata → the cluster's
replica share (Karmada's ReviseReplica: Deployment/StatefulSet `spec.replicas`, Job
`spec.parallelism`; those are also the only kinds whose replicas are divided, as Karmada's
InterpretReplica: `spec.replicas` defaults to 1, Job parallelism to 1; other kinds are sent
whole to every selected cluster) → overrides → `app.kubernetes.io/managed-by: tether` and
`tether.io/source`. An override that fails drops only that cluster (ApplyOverridesFailed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.objects import ObjView as Obj
from tether.objects.selectors import matches_label_selector

from ._util import as_int, items, mapping, nested, thaw
from .affinity import cluster_matches_affinity
from .aggregation import aggregate_status
from .binding import AFFINITY_ANNOTATION, PLACEMENT_ANNOTATION
from .capacity import replica_request
from .dependencies import dependencies
from .metadata import stamp, strip_server_fields
from .model import (
    ClusterFailure,
    ClusterInfo,
    ConflictResolution,
    PropagationPlan,
    ResourceRef,
    WorkItem,
)
from .overrides import OverrideError, apply_overriders
from .policycheck import INVALID_POLICY, policy_problems
from .scheduler import Groups, Previous, schedule

PROPAGATION_POLICY = "PropagationPolicy"
CLUSTER_PROPAGATION_POLICY = "ClusterPropagationPolicy"
OVERRIDE_POLICY = "OverridePolicy"
CLUSTER_OVERRIDE_POLICY = "ClusterOverridePolicy"

# Karmada's implicit priorities of a selector match.
MISMATCH, MATCH_ALL, MATCH_LABEL_SELECTOR, MATCH_NAME = 0, 1, 2, 3

# kind → the field Karmada's ReviseReplica sets.
REPLICA_FIELDS = {"Deployment": "replicas", "StatefulSet": "replicas", "Job": "parallelism"}


def _meta(obj: Obj, field: str) -> str:
    return str(nested(obj, "metadata", field) or "")


def selector_priority(template: Obj, selector: Any) -> int:
    """How explicitly one resourceSelector matches the template (0 = not at all)."""
    sel = mapping(selector)
    if sel.get("apiVersion") != template.get("apiVersion") or sel.get("kind") != template.get(
        "kind"
    ):
        return MISMATCH
    if sel.get("namespace") and sel.get("namespace") != _meta(template, "namespace"):
        return MISMATCH
    if sel.get("name"):
        return MATCH_NAME if sel.get("name") == _meta(template, "name") else MISMATCH
    if sel.get("labelSelector") is None:
        return MATCH_ALL
    labels = {str(k): str(v) for k, v in mapping(nested(template, "metadata", "labels")).items()}
    if matches_label_selector(sel.get("labelSelector"), labels):
        return MATCH_LABEL_SELECTOR
    return MISMATCH


def selectors_priority(template: Obj, selectors: Sequence[Any]) -> int:
    return max((selector_priority(template, s) for s in selectors), default=MISMATCH)


def _best_policy(template: Obj, policies: Sequence[Obj]) -> Obj | None:
    ranked = []
    for policy in policies:
        implicit = selectors_priority(template, items(nested(policy, "spec", "resourceSelectors")))
        if implicit > MISMATCH:
            explicit = as_int(nested(policy, "spec", "priority"))
            ranked.append(((-explicit, -implicit, _meta(policy, "name")), policy))
    return min(ranked, key=lambda r: r[0])[1] if ranked else None


def _candidates(template: Obj, policies: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
    namespace = _meta(template, "namespace")
    namespaced = [
        p for p in policies
        if p.get("kind") == PROPAGATION_POLICY and namespace and _meta(p, "namespace") == namespace
    ]
    cluster_wide = [p for p in policies if p.get("kind") == CLUSTER_PROPAGATION_POLICY]
    return namespaced, cluster_wide


def _priority(policy: Obj) -> int:
    return as_int(nested(policy, "spec", "priority"))


def _preempts(candidate: Obj, holder: Obj) -> bool:
    if nested(candidate, "spec", "preemption") != "Always" or candidate is holder:
        return False
    if candidate.get("kind") == PROPAGATION_POLICY:
        return holder.get("kind") == CLUSTER_PROPAGATION_POLICY or (
            _priority(candidate) > _priority(holder))
    return holder.get("kind") == CLUSTER_PROPAGATION_POLICY and (
        _priority(candidate) > _priority(holder))


def match_policy(template: Obj, policies: Sequence[Obj], claimed_by: str = "") -> Obj | None:
    """The (Cluster)PropagationPolicy that claims `template`, or None. `claimed_by` names the
    policy that placed it last (`<Kind>/<namespace>/<name>`, "" when none)."""
    namespaced, cluster_wide = _candidates(template, policies)
    best = _best_policy(template, namespaced) or _best_policy(template, cluster_wide)
    holder = next((p for p in (*namespaced, *cluster_wide)
                   if _ref(p) == claimed_by and selectors_priority(
                       template, items(nested(p, "spec", "resourceSelectors"))) > MISMATCH), None)
    if holder is None or best is None:
        return best
    preempting = [p for p in (*namespaced, *cluster_wide) if _preempts(p, holder)
                  and selectors_priority(template, items(nested(p, "spec", "resourceSelectors")))
                  > MISMATCH]
    if not preempting:
        return holder
    return (_best_policy(template, [p for p in preempting if p.get("kind") == PROPAGATION_POLICY])
            or _best_policy(template, preempting))


def _ref(policy: Obj) -> str:
    return f"{policy.get('kind', '')}/{_meta(policy, 'namespace')}/{_meta(policy, 'name')}"


def _override_rank(template: Obj, policy: Obj) -> int:
    selectors = items(nested(policy, "spec", "resourceSelectors"))
    return selectors_priority(template, selectors) if selectors else MATCH_ALL


def applicable_overrides(template: Obj, ops: Sequence[Obj]) -> list[Obj]:
    """The override policies that apply to `template`, in application order."""
    namespace = _meta(template, "namespace")
    cluster_wide = [p for p in ops if p.get("kind") == CLUSTER_OVERRIDE_POLICY]
    namespaced = [
        p for p in ops
        if p.get("kind") == OVERRIDE_POLICY and namespace and _meta(p, "namespace") == namespace
    ]
    ordered: list[Obj] = []
    for group in (cluster_wide, namespaced):
        ranked = [(_override_rank(template, p), _meta(p, "name"), p) for p in group]
        ordered += [p for rank, _, p in sorted(ranked, key=lambda r: r[:2]) if rank > MISMATCH]
    return ordered


def _rules(policy: Obj) -> list[tuple[Any, Any]]:
    spec = mapping(policy.get("spec"))
    rules = items(spec.get("overrideRules"))
    if rules:
        return [(mapping(r).get("targetCluster"), mapping(r).get("overriders")) for r in rules]
    return [(spec.get("targetCluster"), spec.get("overriders"))]


def apply_override_policies(
    obj: Obj, policies: Sequence[Obj], cluster: ClusterInfo
) -> dict[str, Any]:
    """Apply already ordered override policies for one cluster (raises OverrideError)."""
    doc = thaw(obj)
    for policy in policies:
        for target, overriders in _rules(policy):
            if target is None or cluster_matches_affinity(cluster, target):
                doc = apply_overriders(doc, overriders)
    return dict(doc)


def workload_replicas(template: Obj) -> int | None:
    """Karmada's InterpretReplica for the kinds whose replicas it can revise, else None."""
    field = REPLICA_FIELDS.get(str(template.get("kind", "")))
    if field is None:
        return None
    value = nested(template, "spec", field)
    return as_int(value) if value is not None else 1


def compile_template(
    template: Obj,
    policy: Obj,
    overrides: Sequence[Obj],
    clusters: Sequence[ClusterInfo],
    *,
    previous: Previous | None = None,
    fresh: bool = False,
    groups: Groups | None = None,
) -> PropagationPlan:
    """Compile a resource template under its propagation policy and the override policies.

    `previous`: the template's last schedule (see `binding`); `fresh`: schedule as if nothing
    ran (a rebalance); `groups`: workload (anti-)affinity peers."""
    source = ResourceRef(
        str(template.get("apiVersion", "")), str(template.get("kind", "")),
        _meta(template, "namespace"), _meta(template, "name"),
    )
    spec = mapping(policy.get("spec"))
    resolution: ConflictResolution = (
        "Overwrite" if spec.get("conflictResolution") == "Overwrite" else "Abort"
    )
    common: dict[str, Any] = {
        "source": source,
        "dialect": "karmada",
        "conflict_resolution": resolution,
        "preserve_on_deletion": bool(spec.get("preserveResourcesOnDeletion")),
        "dependencies": dependencies(template) if spec.get("propagateDeps") else (),
    }
    problems = policy_problems(spec)
    if problems:
        return PropagationPlan(error_reason=INVALID_POLICY, hold=True,
                               error_message=f"policy {_ref(policy)} is not applied: "
                               + "; ".join(problems), **common)
    placement = mapping(spec.get("placement"))
    total = workload_replicas(template)
    result = schedule(placement, clusters, replicas=total,
                      request=replica_request(template) if total is not None else None,
                      previous=previous, fresh=fresh, groups=groups)
    annotations = {PLACEMENT_ANNOTATION: result.placement, AFFINITY_ANNOTATION:
                   result.affinity_name}
    if not result.ok:
        return PropagationPlan(failures=result.failures, error_reason=result.reason,
                               error_message=result.message, work_annotations=annotations,
                               **common)
    by_name = {c.name: c for c in clusters}
    base = strip_server_fields(thaw(template))
    policies = applicable_overrides(template, overrides)
    field = REPLICA_FIELDS.get(source.kind, "")
    works: list[WorkItem] = []
    failures = list(result.failures)
    for name, share in result.targets.items():
        cluster = by_name[name]
        obj = thaw(base)
        if share is not None and field:
            obj.setdefault("spec", {})[field] = share
        try:
            if policies:  # (it copies the object: a second copy per cluster when none apply)
                obj = apply_override_policies(obj, policies, cluster)
        except OverrideError as err:
            failures.append(ClusterFailure(cluster.name, "ApplyOverridesFailed", str(err)))
            continue
        stamp(obj, "karmada", source)
        works.append(WorkItem(cluster.name, obj, share))
    return PropagationPlan(
        works=tuple(works), failures=tuple(sorted(failures, key=lambda f: f.cluster)),
        work_annotations=annotations, **common
    )


__all__ = [
    "aggregate_status",
    "applicable_overrides",
    "compile_template",
    "dependencies",
    "match_policy",
    "workload_replicas",
]
