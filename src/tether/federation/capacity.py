"""Cluster capacity: a member's `resourceSummary` and how many more replicas of a workload fit.

Facts from Karmada that this follows:

- `status.resourceSummary` of a Cluster (cluster status controller): `allocatable` is the sum of
  every node's `status.allocatable`; `allocated` sums the requests of pods bound to a node
  (`spec.nodeName` set) that are neither Succeeded nor Failed, plus their count as `pods`;
  `allocating` does the same for pods not bound yet. A pod's request is the sum of its containers'
  requests, at least the largest init container request per resource, plus `spec.overhead`.
- A workload's per-replica requirement (`replicaRequirements.resourceRequest`, from the pod
  template): the same sum, where a container with limits but no request for a resource counts its
  limit. No requests and no limits at all: no requirement.
- The general estimator (no scheduler-estimator, no resource models): a cluster without
  `resourceSummary` can take 0 replicas; else `allowed pods = allocatable.pods - allocated.pods -
  allocating.pods` (0 when negative), and for each requested resource (cpu in millicores, others
  in units) `(allocatable - allocated - allocating) / request`, 0 when the cluster does not list
  the resource; the smallest of these wins. Without a requirement: the allowed pods.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from ._util import items, mapping, nested

CPU, MEMORY, PODS = "cpu", "memory", "pods"

# Kubernetes quantity suffixes (binary and decimal SI).
_SUFFIXES: Mapping[str, Decimal] = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")

Resources = dict[str, int]  # cpu in millicores, everything else in units (bytes, pods, ...)


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (`500m`, `1Gi`, `2`, `1e3`) as a number, None when malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2)
    try:
        if suffix and suffix[0] in "eE" and len(suffix) > 1:
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIXES[suffix] if suffix else Decimal(number)
    except InvalidOperation:
        return None


def amount(resource: str, value: Any) -> int | None:
    """A quantity in the unit the estimator counts in: millicores for cpu, else units, rounded
    up (Quantity.MilliValue / Value)."""
    number = quantity(value)
    if number is None:
        return None
    return math.ceil(number * 1000) if resource == CPU else math.ceil(number)


def resource_list(raw: Any) -> Resources:
    out: Resources = {}
    for key, value in mapping(raw).items():
        parsed = amount(str(key), value)
        if parsed is not None:
            out[str(key)] = parsed
    return out


def format_resources(resources: Mapping[str, int]) -> dict[str, str]:
    """The inverse of `resource_list`, as a ResourceList would print (zero entries left out)."""
    out: dict[str, str] = {}
    for key in sorted(resources):
        value = resources[key]
        if value <= 0:
            continue
        if key == CPU:
            out[key] = str(value // 1000) if value % 1000 == 0 else f"{value}m"
        elif key == MEMORY or key.startswith(("hugepages-", "ephemeral-storage")):
            out[key] = _binary(value)
        else:
            out[key] = str(value)
    return out


def _binary(value: int) -> str:
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def _add(into: Resources, more: Mapping[str, int]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value


# pods and templates -----------------------------------------------------------------------------


def _container_requests(container: Any, *, limits_fill: bool) -> Resources:
    res = mapping(mapping(container).get("resources"))
    requests = resource_list(res.get("requests"))
    if limits_fill:
        for key, value in resource_list(res.get("limits")).items():
            requests.setdefault(key, value)
    return requests


def pod_request(pod_spec: Any, *, limits_fill: bool = False) -> Resources:
    """Karmada's AddPodRequest (AddPodTemplateRequest with `limits_fill`)."""
    spec = mapping(pod_spec)
    total: Resources = {}
    for container in items(spec.get("containers")):
        _add(total, _container_requests(container, limits_fill=limits_fill))
    for container in items(spec.get("initContainers")):
        for key, value in _container_requests(container, limits_fill=limits_fill).items():
            total[key] = max(total.get(key, 0), value)
    _add(total, resource_list(spec.get("overhead")))
    return {k: v for k, v in total.items() if v > 0}


def replica_request(template: Mapping[str, Any]) -> Resources | None:
    """Per-replica resource request of a workload template (its pod template), or None when it
    requests nothing."""
    pod_spec = nested(template, "spec", "template", "spec")
    if pod_spec is None:
        pod_spec = nested(template, "spec", "jobTemplate", "spec", "template", "spec")
    request = pod_request(pod_spec, limits_fill=True) if pod_spec is not None else {}
    return request or None


def resource_summary(nodes: Iterable[Any], pods: Iterable[Any]) -> dict[str, dict[str, str]]:
    """`status.resourceSummary` of a Cluster from its nodes and pods."""
    allocatable: Resources = {}
    for node in nodes:
        _add(allocatable, resource_list(nested(node, "status", "allocatable")))
    allocated: Resources = {}
    allocating: Resources = {}
    for pod in pods:
        phase = nested(pod, "status", "phase")
        request = pod_request(nested(pod, "spec"))
        if nested(pod, "spec", "nodeName"):
            if phase in ("Succeeded", "Failed"):
                continue
            _add(allocated, {**request, PODS: 1})
        else:
            _add(allocating, {**request, PODS: 1})
    return {"allocatable": format_resources(allocatable),
            "allocating": format_resources(allocating),
            "allocated": format_resources(allocated)}


# the general estimator ---------------------------------------------------------------------------


def max_available_replicas(summary: Any, request: Mapping[str, int] | None) -> int:
    """How many more replicas needing `request` each fit in a cluster with `summary`."""
    if not isinstance(summary, Mapping):
        return 0
    allocatable = resource_list(summary.get("allocatable"))
    allocated = resource_list(summary.get("allocated"))
    allocating = resource_list(summary.get("allocating"))
    allowed = allocatable.get(PODS, 0) - allocated.get(PODS, 0) - allocating.get(PODS, 0)
    if allowed <= 0:
        return 0
    if not request:
        return allowed
    best = allowed
    for key, needed in request.items():
        if needed <= 0 or key == PODS:
            continue
        if key not in allocatable:
            return 0
        free = allocatable[key] - allocated.get(key, 0) - allocating.get(key, 0)
        if free <= 0:
            return 0
        best = min(best, free // needed)
    return best
