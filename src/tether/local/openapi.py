"""The minimal OpenAPI v3 that lets `kubectl apply` validate on the server.

kubectl checks that each kind's PATCH operation takes a `fieldValidation` parameter; when it
does, kubectl leaves validation to the server. Operations carry no requestBody, so kubectl builds
strategic merge patches from its compiled-in types (docs/api-server-notes.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tether.local.resources import Registry, ResourceType

PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": kind}}
    for name, kind in (("fieldValidation", "string"), ("fieldManager", "string"), ("dryRun", "string"),
                       ("force", "boolean"))
]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _operation_id(rt: ResourceType) -> str:
    group = "".join(part.capitalize() for part in (rt.group.split(".")[0] if rt.group else "core").split("-"))
    scope = "Namespaced" if rt.namespaced else ""
    return f"patch{group}{rt.version.capitalize()}{scope}{rt.kind}"


def _item_path(rt: ResourceType) -> str:
    base = f"/{_gv_path(rt.group, rt.version)}"
    if rt.namespaced:
        return f"{base}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
    return f"{base}/{rt.plural}/{{name}}"


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [rt for rt in registry.in_group_version(group, version) if "patch" in rt.verbs]
    if not types:
        return None
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        paths[_item_path(rt)] = {
            "patch": {
                "operationId": _operation_id(rt),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": PARAMETERS,
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def content_hash(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:128].upper()


def root_document(registry: Registry) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            doc = group_version_document(registry, group, version)
            if doc is None:
                continue
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={content_hash(doc)}"}
    return {"paths": paths}
