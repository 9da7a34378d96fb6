"""`tether hub install`: the hub's namespace, CRDs and KubeFed's default federated types.

Everything is server-side applied (idempotent: running it again reports `unchanged`), CRDs are
waited for until Established, and the default types are enabled as KubeFed's helm chart does:
a FederatedTypeConfig in `tether-system` plus a `Federated<Kind>` CRD for each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.federation import crds
from tether.federation.health import HUB_NAMESPACE
from tether.kube import KubeClient, NotFound
from tether.objects import Obj

FIELD_MANAGER = "tether-hub-install"
ESTABLISH_WAIT_S = 60.0
CRD_API = "apiextensions.k8s.io/v1"


@dataclass(frozen=True)
class TargetType:
    group: str
    version: str
    kind: str
    plural: str
    scope: str


# KubeFed's chart enables these (charts/kubefed/templates/federatedtypeconfig.yaml), with
# ingresses at networking.k8s.io/v1 instead of the long-gone extensions/v1beta1.
DEFAULT_TYPES: tuple[TargetType, ...] = (
    TargetType("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "Cluster"),
    TargetType("", "v1", "ConfigMap", "configmaps", "Namespaced"),
    TargetType("apps", "v1", "Deployment", "deployments", "Namespaced"),
    TargetType("networking.k8s.io", "v1", "Ingress", "ingresses", "Namespaced"),
    TargetType("batch", "v1", "Job", "jobs", "Namespaced"),
    TargetType("", "v1", "Namespace", "namespaces", "Cluster"),
    TargetType("apps", "v1", "ReplicaSet", "replicasets", "Namespaced"),
    TargetType("", "v1", "Secret", "secrets", "Namespaced"),
    TargetType("", "v1", "ServiceAccount", "serviceaccounts", "Namespaced"),
    TargetType("", "v1", "Service", "services", "Namespaced"),
)


@dataclass(frozen=True)
class Step:
    kind: str
    name: str
    outcome: str  # created | configured | unchanged

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name} {self.outcome}"


def federated_type_objects(target: TargetType, namespace: str = HUB_NAMESPACE) -> tuple[Obj, Obj]:
    """The Federated<Kind> CRD and the FederatedTypeConfig enabling `target`."""
    crd = crds.federated_crd(target.kind, target.plural, crds.federated_scope(target.kind, target.scope))
    ftc = crds.federated_type_config(group=target.group, version=target.version, kind=target.kind,
                                     plural=target.plural, scope=target.scope, namespace=namespace)
    return crd, ftc


async def apply_reporting(client: KubeClient, obj: Obj) -> Step:
    meta = obj["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    try:
        before = await client.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
    except NotFound:
        before = None
    after = await client.apply(obj, field_manager=FIELD_MANAGER)
    if before is None:
        outcome = "created"
    elif (before["metadata"].get("resourceVersion") == after["metadata"].get("resourceVersion")
          or _content(before) == _content(after)):
        outcome = "unchanged"
    else:
        outcome = "configured"
    return Step(obj["kind"], name, outcome)


def _content(obj: Obj) -> Obj:
    """The object without bookkeeping that a no-op write may still bump."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


async def wait_established(client: KubeClient, names: list[str], timeout_s: float = ESTABLISH_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = await client.get(CRD_API, "CustomResourceDefinition", name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                pending.discard(name)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"CRDs not Established within {timeout_s:.0f}s: {', '.join(sorted(pending))}")
        await asyncio.sleep(0.2)


async def install(client: KubeClient, *, types: tuple[TargetType, ...] = DEFAULT_TYPES,
                  establish_wait_s: float = ESTABLISH_WAIT_S,
                  report: Callable[[Step], None] = lambda step: None) -> list[Step]:
    steps: list[Step] = []

    async def apply(obj: Obj) -> None:
        step = await apply_reporting(client, obj)
        steps.append(step)
        report(step)

    await apply({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": HUB_NAMESPACE, "labels": {"app.kubernetes.io/part-of": "tether-hub"}}})
    hub = crds.hub_crds()
    for crd in hub:
        await apply(crd)
    federated = [federated_type_objects(t) for t in types]
    for crd, _ in federated:
        await apply(crd)
    await wait_established(client, [c["metadata"]["name"] for c in hub + [f[0] for f in federated]],
                           establish_wait_s)
    for _, ftc in federated:
        await apply(ftc)
    return steps
