"""Where a pod may run (pure): the default scheduler's filters and a simple spreading score.

Filters run in kube-scheduler's order and the first one a node fails is that node's reason:
NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity (nodeSelector and
required node affinity), NodeResourcesFit (only the `pods` count). Among nodes that pass, the
score prefers preferred-affinity weight, then fewer untolerated PreferNoSchedule taints, then
fewer pods (spreading), then the name, so the choice is deterministic.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.objects.selectors import matches_node_selector_term

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^(\d+)(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


@dataclass(frozen=True)
class Decision:
    node: str | None  # None: no node fits, and `message` says why
    message: str = ""
    reasons: tuple[tuple[str, int], ...] = ()  # (reason, how many nodes) when unschedulable


def quantity(text: Any, default: int = 0) -> int:
    """A plain count out of a resource quantity ("110", "1M", "2k"); `default` if unreadable."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        return default
    whole = int(match.group(1)) * _SUFFIXES[match.group(3) or ""]
    fraction = float(match.group(2) or 0) * _SUFFIXES[match.group(3) or ""]
    return whole + int(fraction)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint: empty effect matches all effects; empty key with Exists
    matches every taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def _untolerated(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]],
                 effects: tuple[str, ...]) -> list[Mapping[str, Any]]:
    return [t for t in taints if t.get("effect") in effects and not any(tolerates(tol, t) for tol in tolerations)]


def _node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}


def matches_selector_and_affinity(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(matches_node_selector_term(t, node) for t in required.get("nodeSelectorTerms") or [])


def _taint_text(taint: Mapping[str, Any]) -> str:
    return f"{{{taint.get('key', '')}: {taint.get('value', '')}}}"


def filter_node(pod: Mapping[str, Any], node: Mapping[str, Any], pods_on_node: int) -> str | None:
    """Why `pod` cannot go to `node`, in kube-scheduler's words; None when it can."""
    spec = node.get("spec") or {}
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    if spec.get("unschedulable") and not any(
        tolerates(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}) for t in tolerations
    ):
        return UNSCHEDULABLE
    blocking = _untolerated(spec.get("taints") or [], tolerations, ("NoSchedule", "NoExecute"))
    if blocking:
        return f"node(s) had untolerated taint {_taint_text(blocking[0])}"
    if not matches_selector_and_affinity(pod, node):
        return AFFINITY
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "pods" in allocatable and pods_on_node + 1 > quantity(allocatable["pods"]):
        return TOO_MANY_PODS
    return None


def _preference(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    preferred = _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return sum(int(p.get("weight", 0)) for p in preferred if matches_node_selector_term(p.get("preference") or {}, node))


def choose_node(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
                pod_counts: Mapping[str, int]) -> Decision:
    """The node `pod` should be bound to, or why none fits (message as kube-scheduler's FitError)."""
    fits: list[Mapping[str, Any]] = []
    reasons: Counter[str] = Counter()
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        reason = filter_node(pod, node, pod_counts.get(name, 0))
        if reason is None:
            fits.append(node)
        else:
            reasons[reason] += 1
    if fits:
        tolerations = (pod.get("spec") or {}).get("tolerations") or []

        def score(node: Mapping[str, Any]) -> tuple[int, int, int, str]:
            name = str((node.get("metadata") or {}).get("name", ""))
            soft = _untolerated((node.get("spec") or {}).get("taints") or [], tolerations, ("PreferNoSchedule",))
            return (-_preference(pod, node), len(soft), pod_counts.get(name, 0), name)

        best = min(fits, key=score)
        return Decision(node=str((best.get("metadata") or {}).get("name", "")))
    # As FitError.Error(): "<count> <reason>" strings, sorted, joined by ", ".
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    message = f"0/{len(nodes)} nodes are available"
    message += ": " + ", ".join(histogram) + "." if histogram else "."
    if not nodes:
        message = "no nodes available to schedule pods"
    return Decision(node=None, message=message, reasons=tuple(sorted(reasons.items())))
