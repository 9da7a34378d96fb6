"""JSON as kube-apiserver writes it: its field order, and a newline after every body.

kube-apiserver encodes built-in objects from Go structs, so their fields come in struct order
(`kind`, `apiVersion`, `metadata`, then the type's own fields, usually `spec` and `status`) and
Go maps (labels, annotations, a ConfigMap's data) come sorted by key. Custom resources are plain
maps, so every level of them comes sorted by key (`apiVersion` before `kind`). Its JSON encoder
ends each body, and each watch event, with a newline. Clients compare `Status` bodies byte for
byte, so those follow the struct order too.

Built-in objects are put in order once, when they are written (`order_builtin`): every later
read, list and watch event then encodes them in that order for free. Custom resources are encoded
with sorted keys instead (`dumps(..., sort_keys=True)`), which the C encoder does cheaply.
Bodies go through `tether.objects.jsoncodec` (orjson): UTF-8 as is, as Go writes it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tether.objects import Obj, jsoncodec

STATUS_FIELDS = ("kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code")
DETAILS_FIELDS = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
OBJECT_META_FIELDS = (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
)
# Top-level fields after metadata, in Go struct order, for the kinds that have more than
# spec and status; every other kind has `spec`, `status`.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "ConfigMap": ("immutable", "data", "binaryData"),
    "Secret": ("immutable", "data", "stringData", "type"),
    "ServiceAccount": ("secrets", "imagePullSecrets", "automountServiceAccountToken"),
    "Endpoints": ("subsets",),
    "Event": ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count",
              "type", "eventTime", "series", "action", "related", "reportingComponent", "reportingInstance"),
    "PodTemplate": ("template",),
    "ControllerRevision": ("data", "revision"),
    "EndpointSlice": ("addressType", "endpoints", "ports"),
    "Role": ("rules",),
    "ClusterRole": ("rules", "aggregationRule"),
    "RoleBinding": ("subjects", "roleRef"),
    "ClusterRoleBinding": ("subjects", "roleRef"),
    "PriorityClass": ("value", "globalDefault", "description", "preemptionPolicy"),
    "StorageClass": ("provisioner", "parameters", "reclaimPolicy", "mountOptions", "allowVolumeExpansion",
                     "volumeBindingMode", "allowedTopologies"),
}
DEFAULT_FIELDS = ("spec", "status")
# Go maps among the top-level fields of these kinds: encoded sorted by key.
KIND_MAPS: dict[str, tuple[str, ...]] = {
    "ConfigMap": ("data", "binaryData"),
    "Secret": ("data",),
}
_HEAD = ("kind", "apiVersion", "metadata")
_GO_ESCAPED = re.compile("[<>&\u2028\u2029]")


def dumps(obj: Any, *, sort_keys: bool = False) -> str:
    return jsoncodec.dumps(obj, sort_keys=sort_keys)


def body(obj: Any, *, sort_keys: bool = False) -> bytes:
    """A response body: compact JSON and the newline kube-apiserver's encoder ends it with."""
    return jsoncodec.encode(obj, sort_keys=sort_keys) + b"\n"


def _ordered(mapping: Obj, order: tuple[str, ...]) -> Obj:
    out = {key: mapping[key] for key in order if key in mapping}
    if len(out) != len(mapping):
        out.update((key, value) for key, value in mapping.items() if key not in out)
    return out


def _sorted_map(value: Any) -> Any:
    if isinstance(value, dict) and len(value) > 1:
        return dict(sorted(value.items()))
    return value


def status(document: Obj) -> Obj:
    """A `metav1.Status` in struct order (details too)."""
    out = _ordered(document, STATUS_FIELDS)
    details = out.get("details")
    if isinstance(details, dict):
        out["details"] = _ordered(details, DETAILS_FIELDS)
    return out


def order_builtin(kind: str, obj: Obj) -> None:
    """Put a built-in object's top level and metadata in struct order, in place (the object
    keeps its identity: callers hold it)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        ordered_meta = _ordered(meta, OBJECT_META_FIELDS)
        for key in ("labels", "annotations"):
            if key in ordered_meta:
                ordered_meta[key] = _sorted_map(ordered_meta[key])
        meta.clear()
        meta.update(ordered_meta)
    ordered = _ordered(obj, _HEAD + KIND_FIELDS.get(kind, DEFAULT_FIELDS))
    for key in KIND_MAPS.get(kind, ()):
        if key in ordered:
            ordered[key] = _sorted_map(ordered[key])
    obj.clear()
    obj.update(ordered)


def go_json(obj: Any) -> str:
    """Compact JSON as Go's encoder writes it: UTF-8 as is, and `<`, `>`, `&`, U+2028 and
    U+2029 escaped (those characters occur only inside strings, so replacing them is safe)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if _GO_ESCAPED.search(text):
        text = (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
                .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    return text


def status_body(document: Obj) -> bytes:
    """A `metav1.Status` body byte for byte as kube-apiserver writes it."""
    return (go_json(status(document)) + "\n").encode()
