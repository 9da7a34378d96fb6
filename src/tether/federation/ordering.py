"""The order in which a batch of objects is applied to a member cluster, and deleted from it.

Applying in dependency order avoids the races users of KubeFed and Karmada hit (a namespaced
object before its Namespace, a custom resource before its CRD — Karmada #3479, KubeFed #314, a
Deployment before the ConfigMap it mounts). Tiers:

0. Namespace, CustomResourceDefinition — everything else may live in or be typed by them.
1. What pods consume: ServiceAccount, ConfigMap, Secret, PersistentVolume(Claim), StorageClass,
   PriorityClass, LimitRange, ResourceQuota, and RBAC (Roles/ClusterRoles before their bindings).
2. Service — so DNS and endpoints exist when pods start.
3. Workloads: Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job,
   CronJob, Pod.
4. Everything else: Ingress, HPAs, PDBs, webhooks (last, so they cannot block the objects above),
   custom resources.

Within a tier the listed order holds, then the input order (the sort is stable). Deletion is the
exact reverse of the application order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from .model import WorkItem

TIERS: tuple[tuple[str, ...], ...] = (
    ("Namespace", "CustomResourceDefinition"),
    (
        "ServiceAccount", "ConfigMap", "Secret", "StorageClass", "PersistentVolume",
        "PersistentVolumeClaim", "PriorityClass", "LimitRange", "ResourceQuota",
        "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
    ),
    ("Service",),
    (
        "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController",
        "Job", "CronJob", "Pod",
    ),
)
_RANK = {kind: (t, i) for t, kinds in enumerate(TIERS) for i, kind in enumerate(kinds)}
_REST = (len(TIERS), 0)

T = TypeVar("T", WorkItem, Mapping[str, Any])


def _kind(item: WorkItem | Mapping[str, Any]) -> str:
    manifest = item.manifest if isinstance(item, WorkItem) else item
    return str(manifest.get("kind", ""))


def tier(kind: str) -> int:
    """The tier of a kind (see module docstring); unknown kinds are in the last tier."""
    return _RANK.get(kind, _REST)[0]


def apply_order(items: Sequence[T]) -> list[T]:
    """`items` (WorkItems or manifests) in the order to create/update them."""
    return sorted(items, key=lambda item: _RANK.get(_kind(item), _REST))


def delete_order(items: Sequence[T]) -> list[T]:
    """`items` in the order to delete them: the reverse of `apply_order`."""
    return list(reversed(apply_order(items)))
