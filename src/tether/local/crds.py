"""CustomResourceDefinitions: acceptance, validation, and the resource types they serve."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from tether.local import schema
from tether.local.errors import Cause
from tether.local.resources import ResourceType, ScalePaths
from tether.local.validation import fields
from tether.objects import Obj, times

# Groups that are another group's objects under a second name, served without conversion (the
# schemas are the same): Calico's crd.projectcalico.org/v1 CRDs are the store behind its
# projectcalico.org/v3 API, so one object is read and written through either.
SHARED_STORAGE_GROUPS = {"crd.projectcalico.org": "projectcalico.org"}

CRD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _names(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    names = (crd.get("spec") or {}).get("names") or {}
    return names if isinstance(names, Mapping) else {}


APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
PROTECTED_DOMAINS = ("k8s.io", "kubernetes.io")


def is_protected_group(group: str) -> bool:
    """Groups of the Kubernetes project, whose APIs need an approved API review."""
    return any(group == d or group.endswith("." + d) for d in PROTECTED_DOMAINS)


def group_causes(crd: Obj, group: Any) -> list[Cause]:
    """kube-apiserver's rules for spec.group: a DNS subdomain with a dot, and an approval
    annotation (an API review URL, or text starting with "unapproved") for the project's own
    domains."""
    if not isinstance(group, str):
        return [Cause("FieldValueInvalid", f"Invalid value: {group!r}: must be a string", "spec.group")]
    causes = fields.each("spec.group", group, fields.dns1123_subdomain(group))
    if "." not in group:
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{group}": should be a domain with at least '
                            "one dot", "spec.group"))
    if is_protected_group(group):
        annotations = (crd.get("metadata") or {}).get("annotations") or {}
        field = f"metadata.annotations[{APPROVAL_ANNOTATION}]"
        value = annotations.get(APPROVAL_ANNOTATION) if isinstance(annotations, dict) else None
        if value is None:
            causes.append(Cause("FieldValueRequired", f'Required value: protected groups must have approval '
                                f'annotation "{APPROVAL_ANNOTATION}", see '
                                "https://github.com/kubernetes/enhancements/pull/1111", field))
        elif not _approval_ok(str(value)):
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{value}": protected groups must have '
                                'approval annotation with a URL or a reason starting with "unapproved"', field))
    return causes


def _approval_ok(value: str) -> bool:
    if value.startswith("unapproved"):
        return True
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def validation_causes(crd: Obj, builtin: Callable[[str, str], bool] = lambda group, plural: False) -> list[Cause]:
    """Why `crd` cannot be stored; `builtin(group, plural)` says whether a resource is one the
    server has built in (a CRD may never define those: it would shadow the built-in API, and
    deleting it would delete the built-in objects)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "Required value", "spec")]
    causes: list[Cause] = []
    group = spec.get("group")
    names = _names(crd)
    plural = names.get("plural")
    if not group:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.group"))
    else:
        causes += group_causes(crd, group)
    if not plural:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.plural"))
    if not names.get("kind"):
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.kind"))
    name = crd.get("metadata", {}).get("name", "")
    if group and plural and name != f"{plural}.{group}":
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                            "metadata.name"))
    if isinstance(group, str) and isinstance(plural, str) and builtin(group, plural):
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": {plural}.{group} is built into '
                            "the API server; a CustomResourceDefinition cannot define it", "metadata.name"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(Cause("FieldValueNotSupported",
                            f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
                            "spec.scope"))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(Cause("FieldValueInvalid", "must have exactly one version marked as storage version",
                            "spec.versions"))
        return causes
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        causes.append(Cause("FieldValueInvalid", "must have exactly one version marked as storage version",
                            "spec.versions"))
    for i, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name"):
            causes.append(Cause("FieldValueRequired", "Required value", f"spec.versions[{i}].name"))
            continue
        open_api = ((version.get("schema") or {}).get("openAPIV3Schema"))
        if open_api is None:
            causes.append(Cause("FieldValueRequired", "Required value: schemas are required",
                                f"spec.versions[{i}].schema.openAPIV3Schema"))
            continue
        for problem in schema.check_structural(open_api):
            causes.append(Cause("FieldValueInvalid", problem, f"spec.versions[{i}].schema.openAPIV3Schema"))
    return causes


def accept(crd: Obj) -> None:
    """Accept the names and mark the CRD Established, as the apiextensions controllers do."""
    spec = crd.get("spec") or {}
    names = dict(_names(crd))
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    spec["names"] = names
    status = crd.setdefault("status", {})
    status["acceptedNames"] = dict(names)
    stored = [v["name"] for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
    previous = [v for v in status.get("storedVersions") or [] if v not in stored]
    status["storedVersions"] = previous + stored
    now = times.now_rfc3339()
    terminating = bool(crd.get("metadata", {}).get("deletionTimestamp"))
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}

    def condition(kind: str, value: str, reason: str, message: str) -> Obj:
        old = conditions.get(kind)
        since = old["lastTransitionTime"] if old and old.get("status") == value else now
        return {"type": kind, "status": value, "lastTransitionTime": since, "reason": reason, "message": message}

    status["conditions"] = [
        condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
        condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
    ]
    if terminating:
        status["conditions"].append(condition("Terminating", "True", "InstanceDeletionInProgress",
                                              "CustomResource deletion is in progress"))


def is_established(crd: Mapping[str, Any]) -> bool:
    for condition in (crd.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Established":
            return bool(condition.get("status") == "True")
    return False


def storage_key(crd: Mapping[str, Any]) -> str:
    """Where a CRD's objects are stored (shared with another group's CRD for the same plural in
    `SHARED_STORAGE_GROUPS`)."""
    group = str((crd.get("spec") or {}).get("group", ""))
    return f"{SHARED_STORAGE_GROUPS.get(group, group)}/{_names(crd).get('plural', '')}"


def resource_types(crd: Mapping[str, Any]) -> list[ResourceType]:
    spec = crd.get("spec") or {}
    names = _names(crd)
    group = str(spec.get("group", ""))
    kind = str(names.get("kind", ""))
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    storage = next((str(v["name"]) for v in versions if v.get("storage")), "")
    out = []
    for version in versions:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        columns = version.get("additionalPrinterColumns")
        selectable = tuple(str(f.get("jsonPath", "")) for f in version.get("selectableFields") or [])
        out.append(
            ResourceType(
                group=group,
                version=str(version["name"]),
                plural=str(names.get("plural", "")),
                singular=str(names.get("singular") or kind.lower()),
                kind=kind,
                namespaced=spec.get("scope") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status="status" in subresources,
                scale=ScalePaths(
                    spec_replicas=str(scale.get("specReplicasPath", ".spec.replicas")),
                    status_replicas=str(scale.get("statusReplicasPath", ".status.replicas")),
                    label_selector=str(scale.get("labelSelectorPath", "")),
                ) if isinstance(scale, dict) else None,
                has_generation=True,
                crd=True,
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(columns) if isinstance(columns, list) else None,
                selectable_fields=selectable,
                list_kind=str(names.get("listKind") or f"{kind}List"),
                storage_version=storage,
                storage_group=SHARED_STORAGE_GROUPS.get(group, ""),
            )
        )
    return out
