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

from tether.objects.selectors import matches_label_selector

from ._util import as_int, items, mapping, nested, thaw
from .aggregation import aggregate_status
from .dependencies import dependencies
from .metadata import stamp, strip_server_fields
from .model import (
    ClusterFailure,
    ClusterInfo,
    ConflictResolution,
    Obj,
    PropagationPlan,
    ResourceRef,
    WorkItem,
)
from .overrides import OverrideError, apply_overriders
from .placement import cluster_matches_affinity, karmada_placement
from .replicas import ReplicaSchedulingError, karmada_divide

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


def match_policy(template: Obj, policies: Sequence[Obj]) -> Obj | None:
    """The (Cluster)PropagationPolicy that claims `template`, or None."""
    namespace = _meta(template, "namespace")
    namespaced = [
        p for p in policies
        if p.get("kind") == PROPAGATION_POLICY and namespace and _meta(p, "namespace") == namespace
    ]
    cluster_wide = [p for p in policies if p.get("kind") == CLUSTER_PROPAGATION_POLICY]
    return _best_policy(template, namespaced) or _best_policy(template, cluster_wide)


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
) -> PropagationPlan:
    """Compile a resource template under its propagation policy and the override policies."""
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
    placement = mapping(spec.get("placement"))
    decision = karmada_placement(placement, clusters)
    if not decision.selected:
        return PropagationPlan(failures=decision.failures, error_reason=decision.reason,
                               error_message=decision.message, **common)
    by_name = {c.name: c for c in clusters}
    selected = [by_name[name] for name in decision.selected]
    total = workload_replicas(template)
    shares: dict[str, int] | None = None
    if total:
        try:
            shares = karmada_divide(placement.get("replicaScheduling"), total, selected)
        except ReplicaSchedulingError as err:
            return PropagationPlan(failures=decision.failures, error_reason=err.reason,
                                   error_message=err.message, **common)
    base = strip_server_fields(thaw(template))
    policies = applicable_overrides(template, overrides)
    field = REPLICA_FIELDS.get(source.kind, "")
    works: list[WorkItem] = []
    failures = list(decision.failures)
    for cluster in selected if shares is None else [by_name[n] for n in sorted(shares)]:
        obj = thaw(base)
        replicas = total
        if shares is not None:
            replicas = shares[cluster.name]
            obj.setdefault("spec", {})[field] = replicas
        try:
            obj = apply_override_policies(obj, policies, cluster)
        except OverrideError as err:
            failures.append(ClusterFailure(cluster.name, "ApplyOverridesFailed", str(err)))
            continue
        stamp(obj, "karmada", source)
        works.append(WorkItem(cluster.name, obj, replicas))
    return PropagationPlan(
        works=tuple(works), failures=tuple(sorted(failures, key=lambda f: f.cluster)), **common
    )


__all__ = [
    "aggregate_status",
    "applicable_overrides",
    "compile_template",
    "dependencies",
    "match_policy",
    "workload_replicas",
]
