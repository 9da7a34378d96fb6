"""What a simulated node looks like: its labels, spec and status, and its heartbeat Lease (pure).

Modelled on kwok's `node-initialize` and `node-heartbeat-with-lease` stages. Every function
here takes the current object and returns what to write, or None when nothing should change,
so the manager writes only when something is missing or a heartbeat is due.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.objects import Obj

KUBELET_VERSION = "v1.37.0"
KUBELET_PORT = 10250
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
ZONES = 3
# Generous but finite: the scheduler enforces `pods`; cpu and memory are informational.
RESOURCES = {"cpu": "32", "memory": "131072Mi", "ephemeral-storage": "512Gi", "pods": "110"}


@dataclass(frozen=True)
class NodeSeed:
    """Everything that makes one node different from the others."""

    name: str
    index: int
    cluster: str
    internal_ip: str
    pod_cidr: str


def node_name(cluster: str, index: int) -> str:
    return f"{cluster}-node-{index}"


def system_labels(seed: NodeSeed) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": seed.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": f"{seed.cluster}-zone-{seed.index % ZONES}",
        "topology.kubernetes.io/region": f"{seed.cluster}-region",
    }


def _conditions(now: str) -> list[Obj]:
    rows = [
        ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    return [{"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now,
             "lastTransitionTime": now} for t, s, r, m in rows]


def _node_info(seed: NodeSeed) -> dict[str, str]:
    ident = hashlib.md5(seed.name.encode(), usedforsecurity=False).hexdigest()
    return {
        "machineID": ident,
        "systemUUID": f"{ident[:8]}-{ident[8:12]}-{ident[12:16]}-{ident[16:20]}-{ident[20:32]}",
        "bootID": ident[::-1],
        "kernelVersion": "6.8.0-tether",
        "osImage": "Tether simulated node",
        "containerRuntimeVersion": "tether://0.1.0",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def new_node(seed: NodeSeed, now: str) -> Obj:
    """A node as its kubelet registers it, already initialised (status is kept on create)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": seed.name, "labels": system_labels(seed),
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": seed.pod_cidr, "podCIDRs": [seed.pod_cidr]},
        "status": _initial_status(seed, now),
    }


def _initial_status(seed: NodeSeed, now: str) -> Obj:
    return {
        "conditions": _conditions(now),
        "addresses": [{"type": "InternalIP", "address": seed.internal_ip}, {"type": "Hostname", "address": seed.name}],
        "capacity": dict(RESOURCES),
        "allocatable": dict(RESOURCES),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        "nodeInfo": _node_info(seed),
        "phase": "Running",
    }


def spec_update(node: Mapping[str, Any], seed: NodeSeed) -> Obj | None:
    """Fill in what a kubelet and the node-IPAM controller set but the node lacks.

    Only missing labels are added and podCIDR is set only when empty (it is immutable once
    set): labels, taints and `unschedulable` that users set are never touched.
    """
    updated = copy.deepcopy(dict(node))
    meta = updated.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    missing = {k: v for k, v in system_labels(seed).items() if k not in labels}
    spec = updated.setdefault("spec", {})
    changed = bool(missing)
    if missing:
        meta["labels"] = {**labels, **missing}
    if not spec.get("podCIDR"):
        spec["podCIDR"] = seed.pod_cidr
        spec["podCIDRs"] = [seed.pod_cidr]
        changed = True
    return updated if changed else None


def status_update(status: Mapping[str, Any] | None, seed: NodeSeed, now: str, *, heartbeat: bool) -> Obj | None:
    """The node status to write: conditions healthy, missing fields filled, and, when a
    heartbeat is due, fresh `lastHeartbeatTime`s. Values users set (capacity, say) are kept."""
    current = copy.deepcopy(dict(status or {}))
    wanted = _initial_status(seed, now)
    result = copy.deepcopy(current)
    for key in ("addresses", "daemonEndpoints", "phase"):
        if not result.get(key):
            result[key] = wanted[key]
    for key in ("capacity", "allocatable", "nodeInfo"):
        result[key] = {**wanted[key], **(result.get(key) or {})}
    by_type = {c.get("type"): c for c in result.get("conditions") or [] if isinstance(c, dict)}
    conditions: list[Obj] = []
    for fresh in wanted["conditions"]:
        old = by_type.pop(fresh["type"], None)
        if old is None or old.get("status") != fresh["status"]:
            conditions.append(fresh)  # a transition: both times are now
            continue
        kept = dict(old)
        kept.setdefault("reason", fresh["reason"])
        kept.setdefault("message", fresh["message"])
        # NetworkUnavailable belongs to the network plugin, which does not heartbeat.
        if heartbeat and fresh["type"] != "NetworkUnavailable":
            kept["lastHeartbeatTime"] = now
        conditions.append(kept)
    conditions.extend(by_type.values())  # conditions other parts added stay
    result["conditions"] = conditions
    return result if result != current else None


def ready_heartbeat(status: Mapping[str, Any] | None) -> str:
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("lastHeartbeatTime") or "")
    return ""


def lease(node: Mapping[str, Any], now_micro: str, current: Mapping[str, Any] | None) -> Obj:
    """The node's heartbeat Lease, renewed; owned by the Node so it goes when the node does."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    updated: Obj = copy.deepcopy(dict(current)) if current else {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
    }
    if meta.get("uid"):
        updated["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": meta["uid"]}
        ]
    spec = updated.setdefault("spec", {})
    spec["holderIdentity"] = name
    spec["leaseDurationSeconds"] = LEASE_DURATION_S
    spec["renewTime"] = now_micro
    return updated
