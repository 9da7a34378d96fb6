"""Whether a pod may run on a node: nodeSelector, required node affinity, taints and tolerations.

The DaemonSet controller decides this itself (it must know where a daemon pod belongs before
any scheduler sees it); these are the same rules the scheduler's filters apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.local.workloads.common import (
    meta,
)
from tether.objects import Obj
from tether.objects.selectors import matches_node_selector_term

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def required_terms(pod_spec: Obj) -> list[Any] | None:
    """The required node affinity terms, or None when the pod sets none."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return None
    return list(required.get("nodeSelectorTerms") or [])


def selects_node(pod_spec: Obj, node: Obj) -> bool:
    labels = meta(node).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    if pod_spec.get("nodeName") and pod_spec["nodeName"] != meta(node).get("name"):
        return False
    terms = required_terms(pod_spec)
    return terms is None or any(matches_node_selector_term(t, node) for t in terms)


def tolerates(tolerations: Iterable[Any], taint: Obj) -> bool:
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        operator = tol.get("operator", "Equal")
        if not tol.get("key") and operator == "Exists":
            return True
        if tol.get("key") != taint.get("key"):
            continue
        if operator == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def blocking_taints(pod_spec: Obj, node: Obj) -> list[Obj]:
    tolerations = pod_spec.get("tolerations") or []
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if isinstance(t, dict) and t.get("effect") in SCHEDULING_EFFECTS and not tolerates(tolerations, t)]


def fits(pod_spec: Obj, node: Obj) -> bool:
    return selects_node(pod_spec, node) and not blocking_taints(pod_spec, node)


def target_node(pod: Obj) -> str:
    """Where a pod is, or (not yet scheduled) where its required affinity pins it."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    for term in required_terms(spec) or []:
        for field in (term or {}).get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""
