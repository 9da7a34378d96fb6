"""What a DELETE answers with, as kube-apiserver's registries decide it.

A registry whose storage sets `ReturnDeletedObject` answers an immediate delete with the deleted
object; every other one with a `Status` of `Success` whose details name the object (`kind` holds
the resource, as upstream puts it). An object that stays for now, held by finalizers (the
`orphan` and `foregroundDeletion` ones `propagationPolicy` adds included) or by a pod's grace
period, is answered with itself, `deletionTimestamp` set, whatever its registry. Custom resources
are plain registries: a Status once they are gone.
"""

from __future__ import annotations

from tether.local.resources import ResourceType
from tether.objects import Obj

# (group, kind) of the built-in registries that return the deleted object.
RETURNS_DELETED_OBJECT = frozenset({
    ("", "Pod"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "Namespace"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "ResourceQuota"),
    ("", "PodTemplate"),
    ("storage.k8s.io", "StorageClass"),
})


def returns_object(rt: ResourceType, gone: bool) -> bool:
    """Whether the answer is the object (else a Success Status); `gone`: deleted right away."""
    if not gone:
        return True
    return not rt.crd and (rt.group, rt.kind) in RETURNS_DELETED_OBJECT


def success_status(rt: ResourceType, obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    details: Obj = {"name": meta.get("name", "")}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    if meta.get("uid"):
        details["uid"] = meta["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
