"""ObjectMeta validation (apimachinery's ValidateObjectMeta): name, generateName, labels,
annotations, ownerReferences and finalizers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.objects import Obj

NameRule = Callable[[str], Sequence[str]]
ANNOTATIONS_MAX_BYTES = 256 * 1024

RBAC = "rbac.authorization.k8s.io"
# (group, kind) whose names are path segments only (RBAC objects, events).
PATH_NAMED = frozenset({(RBAC, "Role"), (RBAC, "ClusterRole"), (RBAC, "RoleBinding"), (RBAC, "ClusterRoleBinding"),
                        ("", "Event"), ("events.k8s.io", "Event")})
# (group, kind) whose names are DNS labels rather than subdomains.
DNS1123_LABEL_NAMED = frozenset({("", "Namespace")})
DNS1035_LABEL_NAMED = frozenset({("", "Service")})


def path_segment(name: str) -> list[str]:
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def name_rule(group: str, kind: str) -> NameRule:
    key = (group, kind)
    if key in PATH_NAMED:
        return path_segment
    if key in DNS1035_LABEL_NAMED:
        return f.dns1035_label
    if key in DNS1123_LABEL_NAMED:
        return f.dns1123_label
    return f.dns1123_subdomain


def _generate_name_errors(rule: NameRule, prefix: str) -> Sequence[str]:
    # A prefix may end in '-' (the random suffix follows): upstream masks it as an 'a'.
    candidate = prefix[:-1] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
    return rule(candidate)


def object_meta(group: str, kind: str, meta: Obj, rule: NameRule | None = None) -> list[Cause]:
    rule = rule or name_rule(group, kind)
    causes: list[Cause] = []
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        causes += f.each("metadata.generateName", generate, _generate_name_errors(rule, generate))
    name = meta.get("name")
    if not name:
        causes.append(f.required("metadata.name", "name or generateName is required"))
    elif isinstance(name, str):
        causes += f.each("metadata.name", name, rule(name))
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not _string_map(value):
            causes.append(f.type_invalid(f"metadata.{key}", "must be a map of strings"))
    causes += f.labels(meta.get("labels"), "metadata.labels")
    causes += annotation_causes(meta.get("annotations"))
    causes += owner_references(meta.get("ownerReferences"))
    causes += finalizers(meta.get("finalizers"))
    return causes


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())


def annotation_causes(values: Any) -> list[Cause]:
    if not isinstance(values, dict):
        return []
    causes: list[Cause] = []
    total = 0
    for key, value in values.items():
        total += len(str(key)) + len(str(value))
    if any(f.qualified_name(str(key).lower()) for key in values):
        for key in sorted(values, key=str):
            causes += f.each("metadata.annotations", str(key), f.qualified_name(str(key).lower()))
    if total > ANNOTATIONS_MAX_BYTES:
        causes.append(f.too_long("metadata.annotations", ANNOTATIONS_MAX_BYTES))
    return causes


def owner_references(refs: Any) -> list[Cause]:
    if not isinstance(refs, list):
        return []
    causes: list[Cause] = []
    controllers = []
    path = "metadata.ownerReferences"
    for ref in refs:
        if not isinstance(ref, dict):
            continue
        api_version = str(ref.get("apiVersion") or "")
        if not api_version:
            causes.append(f.invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        if not ref.get("kind"):
            causes.append(f.invalid(f"{path}.kind", "", "kind must not be empty"))
        if not ref.get("name"):
            causes.append(f.invalid(f"{path}.name", "", "name must not be empty"))
        if not ref.get("uid"):
            causes.append(f.invalid(f"{path}.uid", "", "uid must not be empty"))
        if ref.get("controller") is True:
            controllers.append(f'{ref.get("kind")}/{ref.get("name")}')
    if len(controllers) > 1:
        causes.append(f.invalid(path, refs, "Only one reference can have Controller set to true. Found \"true\" in "
                                f"references for {' and '.join(controllers)}", rendered="[...]"))
    return causes


def finalizers(values: Any) -> list[Cause]:
    if not isinstance(values, list):
        return []
    causes: list[Cause] = []
    for value in values:
        if isinstance(value, str):
            causes += f.each("metadata.finalizers", value, f.qualified_name(value))
    if "orphan" in values and "foregroundDeletion" in values:
        causes.append(f.invalid("metadata.finalizers", values,
                                "finalizer orphan and foregroundDeletion cannot be both set"))
    return causes
