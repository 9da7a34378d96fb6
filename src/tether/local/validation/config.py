"""ConfigMap and Secret validation: key names, the keys a Secret's type requires, and what an
`immutable` one keeps."""

from __future__ import annotations

from typing import Any

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.objects import Obj

MAX_SIZE = 1024 * 1024  # a ConfigMap's or Secret's data, in bytes
# Secret type -> keys of `data` it requires (all of them, unless noted below).
SECRET_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}


def _type_causes(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for field in ("data", "binaryData", "stringData"):
        values = obj.get(field)
        if values is not None and not isinstance(values, dict):
            causes.append(f.type_invalid(field, "must be a map"))
        elif values:
            causes += [f.type_invalid(f"{field}[{key}]", "must be a string")
                       for key, value in values.items() if not isinstance(value, str)]
    return causes


def _keys(values: Any, field: str) -> list[Cause]:
    if not isinstance(values, dict):
        return []
    causes: list[Cause] = []
    for key in sorted(values, key=str):
        causes += f.each(f"{field}[{key}]", str(key), f.config_key(str(key)))
    return causes


def _size(values: Any) -> int:
    return sum(len(str(v)) for v in values.values()) if isinstance(values, dict) else 0


def config_map(obj: Obj) -> list[Cause]:
    causes = _type_causes(obj)
    if causes:
        return causes
    data, binary = obj.get("data"), obj.get("binaryData")
    causes += _keys(data, "data")
    causes += _keys(binary, "binaryData")
    for key in sorted(binary or {}, key=str) if isinstance(binary, dict) else []:
        if isinstance(data, dict) and key in data:
            causes.append(f.invalid(f"binaryData[{key}]", key, "duplicate of key present in data"))
    if _size(data) + _size(binary) * 3 // 4 > MAX_SIZE:
        causes.append(f.too_long("", MAX_SIZE))
    return causes


def secret(obj: Obj) -> list[Cause]:
    causes = _type_causes(obj)
    if causes:
        return causes
    data = f.mapping(obj.get("data"))
    causes += _keys(data, "data")
    if _size(data) * 3 // 4 > MAX_SIZE:
        causes.append(f.too_long("data", MAX_SIZE))
    kind = obj.get("type") or "Opaque"
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if kind == "kubernetes.io/service-account-token":
        if not annotations.get("kubernetes.io/service-account.name"):
            causes.append(f.required("metadata.annotations[kubernetes.io/service-account.name]"))
    elif kind == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            causes += [f.required("data[username]"), f.required("data[password]")]
    elif kind in SECRET_KEYS:
        for key in SECRET_KEYS[kind]:
            if key not in data or (kind == "kubernetes.io/ssh-auth" and not data.get(key)):
                causes.append(f.required(f"data[{key}]"))
                if kind != "kubernetes.io/tls":
                    break
    return causes


def immutable_update(kind: str, new: Obj, old: Obj) -> list[Cause]:
    causes: list[Cause] = []
    if kind == "Secret" and (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
        causes.append(f.immutable("type", new.get("type") or "Opaque"))
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            causes.append(f.forbidden("immutable", "field is immutable when `immutable` is set"))
        fields = ("data",) if kind == "Secret" else ("data", "binaryData")
        for field in fields:
            if (new.get(field) or {}) != (old.get(field) or {}):
                causes.append(f.forbidden(field, "field is immutable when `immutable` is set"))
    return causes
