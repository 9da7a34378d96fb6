"""Which pod (or pod template) a `TARGET` such as `deploy/api` stands for.

A workload's running pods are found by its selector; the newest Ready one is chosen, else the
newest Running one. Without one, the workload's pod template is used (`PodFacts.running` false),
so values only a pod has come back unresolved instead of made up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tether.bridge.envresolve import PodFacts, ResolveError
from tether.kube import KubeClient, KubeError, NotFound
from tether.objects import ObjView as Obj
from tether.objects.selectors import label_selector_to_string

KINDS: Mapping[str, tuple[str, str]] = {
    "pod": ("v1", "Pod"), "pods": ("v1", "Pod"), "po": ("v1", "Pod"),
    "deploy": ("apps/v1", "Deployment"), "deployment": ("apps/v1", "Deployment"),
    "deployments": ("apps/v1", "Deployment"),
    "sts": ("apps/v1", "StatefulSet"), "statefulset": ("apps/v1", "StatefulSet"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "ds": ("apps/v1", "DaemonSet"), "daemonset": ("apps/v1", "DaemonSet"), "daemonsets": ("apps/v1", "DaemonSet"),
    "rs": ("apps/v1", "ReplicaSet"), "replicaset": ("apps/v1", "ReplicaSet"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "job": ("batch/v1", "Job"), "jobs": ("batch/v1", "Job"),
}


class TargetError(ResolveError):
    pass


@dataclass(frozen=True)
class Target:
    api_version: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def parse_target(text: str) -> Target:
    """`NAME` (a pod), `pod/NAME`, `deploy/NAME`, `sts/NAME`, `ds/NAME`, `job/NAME`, `rs/NAME`."""
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "pod", text
    if kind.lower() not in KINDS:
        raise TargetError(f"unknown target kind {kind!r} in {text!r}: use a pod name or "
                          f"pod/, deploy/, sts/, ds/, job/ or rs/ followed by a name")
    if not name or "/" in name:
        raise TargetError(f"target {text!r} needs one name after the kind, as in deploy/api")
    api_version, kind_name = KINDS[kind.lower()]
    return Target(api_version, kind_name, name)


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def choose_pod(pods: Sequence[Obj]) -> Obj | None:
    """The newest Ready pod, else the newest Running one, else None."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return None
    live.sort(key=lambda p: (_ready(p), str((p.get("metadata") or {}).get("creationTimestamp", ""))))
    return live[-1]


async def _node_allocatable(client: KubeClient, pod: Obj) -> Mapping[str, str] | None:
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return None
    try:
        node = await client.get_or_none("v1", "Node", str(node_name))
    except KubeError:  # reading Nodes is often forbidden to developers: limits stay unresolved
        return None
    if node is None:
        return None
    return {str(k): str(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


async def resolve_target(client: KubeClient, target: Target, namespace: str) -> PodFacts:
    """The pod to read, or the workload's template when no pod of it is running."""
    if target.kind == "Pod":
        try:
            pod = await client.get("v1", "Pod", target.name, namespace)
        except NotFound:
            raise TargetError(f'pod "{target.name}" not found in namespace "{namespace}"') from None
        return PodFacts(pod, True, await _node_allocatable(client, pod))
    try:
        workload = await client.get(target.api_version, target.kind, target.name, namespace)
    except NotFound:
        raise TargetError(f'{target.kind.lower()} "{target.name}" not found in namespace "{namespace}"') from None
    spec = workload.get("spec") or {}
    selector = label_selector_to_string(spec.get("selector"))
    pods: list[Obj] = []
    if selector:
        pods = list(await client.list_objects("v1", "Pod", namespace, selector))
    uid = (workload.get("metadata") or {}).get("uid")
    if target.kind == "Deployment":
        owned = pods  # owned through a ReplicaSet: the selector is what ties them
    else:
        owned = [p for p in pods if any(r.get("uid") == uid for r in (p.get("metadata") or {}).get("ownerReferences") or [])]
    chosen = choose_pod(owned or pods)
    if chosen is not None:
        return PodFacts(chosen, True, await _node_allocatable(client, chosen))
    template = spec.get("template") or {}
    meta = dict(template.get("metadata") or {})
    meta["namespace"] = namespace
    return PodFacts({"metadata": meta, "spec": template.get("spec") or {}}, False)
