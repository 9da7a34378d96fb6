"""The KubeFed dialect: Federated<Kind> objects compiled to a PropagationPlan, and their status.

Per cluster the object is built as KubeFed's sync controller builds it: `spec.template`, plus the
target apiVersion/kind and the Federated object's name and namespace (a FederatedNamespace yields
a Namespace named as the object, without a namespace) → that cluster's `clusterOverrides` →
the ReplicaSchedulingPreference's replicas, if one applies (they replace a user's
`/spec/replicas` override, as KubeFed's RSP controller rewrites that override) → the labels
`kubefed.io/managed: "true"` and `app.kubernetes.io/managed-by: tether` and the annotation
`tether.io/source`. Field retention (keeping member-assigned values such as a Service's
clusterIP) needs the member's current object and is the executor's job, not this compiler's.

With an RSP (same name/namespace, for Deployments and ReplicaSets) the RSP decides the clusters,
as KubeFed's RSP controller rewrites `placement.clusters`: the ready clusters — intersected with
the placement when `intersectWithClusterSelector` is true — each with its planned replica count,
0 included. Placement failures (not found, not ready) are still reported.

A namespaced Federated object only goes to the clusters its FederatedNamespace is placed in
(`within_namespace`); the others are left out without a failure, as in KubeFed.

`federate(obj)` is `kubefedctl federate` without a server: the template keeps only
`metadata.labels` of the metadata; status, apiVersion and kind go; Namespace `spec.finalizers`,
ServiceAccount `secrets`, Service `spec.clusterIP` (and, a tether addition, `spec.clusterIPs`) and
port `nodePort`s are dropped; and the placement is `{clusterSelector: {matchLabels: {}}}`, i.e.
every cluster (checked against kubefedctl's FederatedResourceFromTargetResource).

Adoption: KubeFed's default `adoptResources: Enabled` takes over existing unmanaged objects,
which is tether's `conflict_resolution="Overwrite"`; pass `adopt_resources=False` for "Abort"
(reported per cluster as AlreadyExists by the executor). The annotation `kubefed.io/orphan:
"true"` on the Federated object means "leave member objects on deletion".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from tether.objects import ObjView as Obj

from ._util import items, mapping, nested, thaw
from .metadata import stamp, strip_server_fields
from .model import ClusterFailure, ClusterInfo, PropagationPlan, ResourceRef, WorkItem
from .overrides import OverrideError, apply_kubefed_overrides
from .placement import PlacementDecision, kubefed_placement
from .replicas import rsp_plan

FEDERATED_GROUP = "types.kubefed.io"
FEDERATED_VERSION = "v1beta1"
FEDERATED_API_VERSION = f"{FEDERATED_GROUP}/{FEDERATED_VERSION}"
ORPHAN_ANNOTATION = "kubefed.io/orphan"
RSP_KINDS = frozenset({"Deployment", "ReplicaSet"})
REPLICAS_PATH = "/spec/replicas"


class FederatedTypeNames(NamedTuple):
    kind: str  # FederatedDeployment
    plural: str  # federateddeployments
    ftc_name: str  # deployments.apps (core types: just the plural, e.g. configmaps)


def federated_type_names(kind: str, group: str, version: str, plural: str) -> FederatedTypeNames:
    """Names `kubefedctl enable` derives for a target type. `version` does not enter the names
    (an FTC targets one version, but its name does not say which)."""
    del version
    ftc_name = f"{plural}.{group}" if group else plural
    return FederatedTypeNames(f"Federated{kind}", f"federated{plural}".lower(), ftc_name)


# ---------------------------------------------------------------------------------------------
# federate


def _federated_template(obj: Obj) -> dict[str, Any]:
    template = thaw(obj)
    kind = template.get("kind")
    spec = template.get("spec")
    if kind == "Namespace" and isinstance(spec, dict):
        spec.pop("finalizers", None)
    elif kind == "ServiceAccount":
        template.pop("secrets", None)
    elif kind == "Service" and isinstance(spec, dict):
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
        for port in items(spec.get("ports")):
            if isinstance(port, dict):
                port.pop("nodePort", None)
    for key in ("apiVersion", "kind", "status"):
        template.pop(key, None)
    labels = nested(template, "metadata", "labels")
    template.pop("metadata", None)
    if isinstance(labels, dict) and labels:
        template["metadata"] = {"labels": labels}
    return dict(template)


def federate(obj: Obj) -> dict[str, Any]:
    """The Federated<Kind> object `kubefedctl federate` would create for `obj`."""
    kind = str(obj.get("kind", ""))
    name = str(nested(obj, "metadata", "name") or "")
    namespace = name if kind == "Namespace" else str(nested(obj, "metadata", "namespace") or "")
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": FEDERATED_API_VERSION,
        "kind": f"Federated{kind}",
        "metadata": metadata,
        "spec": {
            "template": _federated_template(obj),
            "placement": {"clusterSelector": {"matchLabels": {}}},
        },
    }


# ---------------------------------------------------------------------------------------------
# compile


def _base_object(
    federated: Obj, target_api_version: str, target_kind: str, name: str, namespace: str
) -> dict[str, Any]:
    obj = thaw(mapping(nested(federated, "spec", "template")))
    strip_server_fields(obj)
    obj["apiVersion"] = target_api_version
    obj["kind"] = target_kind
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    metadata["name"] = name
    metadata.pop("namespace", None)
    if namespace and target_kind != "Namespace":
        metadata["namespace"] = namespace
    # Keep apiVersion, kind, metadata first, as kubectl prints them.
    return {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), "metadata": metadata,
            **{k: v for k, v in obj.items() if k != "metadata"}}


def _overrides_by_cluster(federated: Obj) -> tuple[dict[str, list[Any]], set[str]]:
    by_cluster: dict[str, list[Any]] = {}
    duplicated: set[str] = set()
    for entry in items(nested(federated, "spec", "overrides")):
        cluster = str(mapping(entry).get("clusterName", ""))
        if cluster in by_cluster:
            duplicated.add(cluster)
        by_cluster.setdefault(cluster, []).extend(items(mapping(entry).get("clusterOverrides")))
    return by_cluster, duplicated


def _rsp_decision(
    rsp: Obj, decision: PlacementDecision, clusters: Sequence[ClusterInfo], key: str,
    current: Mapping[str, int] | None,
) -> tuple[PlacementDecision, dict[str, int]]:
    spec = mapping(rsp.get("spec"))
    candidates = sorted(c.name for c in clusters if c.ready)
    if spec.get("intersectWithClusterSelector"):
        candidates = [c for c in candidates if c in decision.selected]
    plan = rsp_plan(spec, candidates, key, current)
    return PlacementDecision(tuple(candidates), decision.failures), plan


def compile_federated(
    federated: Obj,
    *,
    target_api_version: str,
    target_kind: str,
    clusters: Sequence[ClusterInfo],
    rsp: Obj | None = None,
    current_replicas: Mapping[str, int] | None = None,
    adopt_resources: bool = True,
) -> PropagationPlan:
    """Compile a Federated<Kind> object (and its RSP, if any) into per-cluster objects.
    `current_replicas`: what each cluster was last given (an RSP without `rebalance` keeps it)."""
    name = str(nested(federated, "metadata", "name") or "")
    namespace = str(nested(federated, "metadata", "namespace") or "")
    source = ResourceRef(
        str(federated.get("apiVersion", FEDERATED_API_VERSION)),
        str(federated.get("kind", f"Federated{target_kind}")),
        namespace,
        name,
    )
    decision = kubefed_placement(nested(federated, "spec", "placement"), clusters)
    planned: dict[str, int] = {}
    target_kind_of_rsp = nested(rsp, "spec", "targetKind") if rsp is not None else None
    if (
        rsp is not None
        and target_kind in RSP_KINDS
        and target_kind_of_rsp in (None, f"Federated{target_kind}")
    ):
        decision, planned = _rsp_decision(rsp, decision, clusters, f"{namespace}/{name}",
                                          current_replicas)
    base = _base_object(federated, target_api_version, target_kind, name, namespace)
    overrides, duplicated = _overrides_by_cluster(federated)
    works: list[WorkItem] = []
    failures = list(decision.failures)
    for cluster in decision.selected:
        if cluster in duplicated:
            failures.append(ClusterFailure(
                cluster, "ApplyOverridesFailed",
                f"spec.overrides: cluster {cluster!r} appears more than once",
            ))
            continue
        obj = thaw(base)
        cluster_overrides = overrides.get(cluster, ())
        if cluster in planned:
            # KubeFed's RSP controller writes its count into the `/spec/replicas` override of
            # every scheduled cluster, replacing the user's: the RSP's total always holds.
            cluster_overrides = [o for o in cluster_overrides
                                 if mapping(o).get("path") != REPLICAS_PATH]
        try:
            obj = apply_kubefed_overrides(obj, cluster_overrides)
        except OverrideError as err:
            failures.append(ClusterFailure(cluster, "ApplyOverridesFailed", str(err)))
            continue
        if cluster in planned:
            obj.setdefault("spec", {})["replicas"] = planned[cluster]
        stamp(obj, "kubefed", source)
        replicas = nested(obj, "spec", "replicas")
        works.append(WorkItem(cluster, obj, replicas if isinstance(replicas, int) else None))
    orphan = nested(federated, "metadata", "annotations", ORPHAN_ANNOTATION) == "true"
    return PropagationPlan(
        source=source,
        dialect="kubefed",
        works=tuple(works),
        failures=tuple(sorted(failures, key=lambda f: f.cluster)),
        conflict_resolution="Overwrite" if adopt_resources else "Abort",
        preserve_on_deletion=orphan,
    )


def within_namespace(plan: PropagationPlan, federated_namespace: Obj,
                     clusters: Sequence[ClusterInfo]) -> PropagationPlan:
    """A namespaced Federated object's plan bounded by its FederatedNamespace's placement: as
    KubeFed's sync controller intersects the two, a cluster the namespace is not placed in is
    simply not a target (no failure: Propagation stays True for the clusters that are)."""
    decision = kubefed_placement(nested(federated_namespace, "spec", "placement"), clusters)
    placed = set(decision.selected) | {f.cluster for f in decision.failures
                                       if f.reason == "ClusterNotReady"}
    known = {c.name for c in clusters}
    return replace(plan, works=tuple(w for w in plan.works if w.cluster in placed),
                   failures=tuple(f for f in plan.failures
                                  if f.cluster in placed or f.cluster not in known))


# ---------------------------------------------------------------------------------------------
# status


@dataclass(frozen=True)
class ClusterResult:
    """What the executor observed for one cluster's object."""

    applied: bool
    reason: str = ""  # a KubeFed per-cluster status when not applied, e.g. CreationFailed
    message: str = ""
    observed_status: Obj | None = None  # the member object's `.status`
    latency_seconds: float | None = None  # template change seen → applied in the member


def kubefed_status(
    plan: PropagationPlan,
    results: Mapping[str, ClusterResult],
    *,
    generation: int | None = None,
    now: str | None = None,
) -> dict[str, Any]:
    """The Federated object's `status`: a `Propagation` condition and `clusters[]`.

    A cluster with an error gets `status: <reason>` (ClusterNotReady, ApplyOverridesFailed,
    CreationFailed, UpdateFailed, AlreadyExists, ...); a healthy one only its name, plus
    `remoteStatus` when its status was observed. Propagation is True when no cluster has an
    error; otherwise False with `plan.error_reason` or `CheckClusters`. Clusters with no result
    yet carry no status and do not fail the condition. `now` (RFC 3339) stamps the condition.
    """
    entries: dict[str, dict[str, Any]] = {}
    for failure in plan.failures:
        entries[failure.cluster] = {"name": failure.cluster, "status": failure.reason}
    for work in plan.works:
        entry: dict[str, Any] = {"name": work.cluster}
        result = results.get(work.cluster)
        if result is not None:
            if not result.applied:
                entry["status"] = result.reason or "CreationFailed"
            if result.observed_status is not None:
                entry["remoteStatus"] = thaw(result.observed_status)
        entries[work.cluster] = entry
    clusters = [entries[name] for name in sorted(entries)]
    healthy = not plan.error_reason and all("status" not in e for e in clusters)
    condition: dict[str, Any] = {"type": "Propagation", "status": "True" if healthy else "False"}
    if not healthy:
        condition["reason"] = plan.error_reason or "CheckClusters"
        if plan.error_message:
            condition["message"] = plan.error_message
    if now is not None:
        condition["lastUpdateTime"] = now
        condition["lastTransitionTime"] = now
    status: dict[str, Any] = {"conditions": [condition], "clusters": clusters}
    if generation is not None:
        status["observedGeneration"] = generation
    return status


__all__ = [
    "FEDERATED_API_VERSION",
    "ClusterResult",
    "FederatedTypeNames",
    "compile_federated",
    "federate",
    "federated_type_names",
    "kubefed_status",
    "within_namespace",
]
