"""CustomResourceDefinitions: acceptance, validation, and the resource types they serve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.local import schema
from tether.local.errors import Cause
from tether.local.resources import ResourceType, ScalePaths
from tether.objects import Obj, times

CRD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _names(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    names = (crd.get("spec") or {}).get("names") or {}
    return names if isinstance(names, Mapping) else {}


def validation_causes(crd: Obj) -> list[Cause]:
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "Required value", "spec")]
    causes: list[Cause] = []
    group = spec.get("group")
    names = _names(crd)
    plural = names.get("plural")
    if not group:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.group"))
    if not plural:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.plural"))
    if not names.get("kind"):
        causes.append(Cause("FieldValueRequired", "Required value", "spec.names.kind"))
    name = crd.get("metadata", {}).get("name", "")
    if group and plural and name != f"{plural}.{group}":
        causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                            "metadata.name"))
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
            )
        )
    return out
